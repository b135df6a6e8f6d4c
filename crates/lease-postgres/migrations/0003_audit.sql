-- Version 3: the audit trail of refused holder writes (written only by stores opened with it on).
-- Frozen: a released migration is never edited (its checksum is checked at every open).
CREATE TABLE {s}.audit (
    seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    time double precision NOT NULL,
    job text NOT NULL,
    owner text NOT NULL,
    operation text NOT NULL,
    presented bigint NOT NULL,
    current bigint,
    reason text NOT NULL,
    late_by double precision
);
CREATE INDEX audit_job ON {s}.audit (job, seq);

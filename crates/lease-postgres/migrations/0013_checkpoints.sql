-- Version 13: fenced checkpoints, a job's durable steps. One row per job and name: the value
-- the live current lease wrote, its fence and when. Kept across failed attempts, expired
-- leases and retries; a run again of a finished job deletes them (in the transaction that
-- runs it again), and a job's rows go with it when it is deleted (a purge) or the jobs are
-- truncated, by statement triggers as for `parents` (no foreign key, which would make another
-- program's TRUNCATE of `jobs` fail).
-- Frozen: a released migration is never edited (its checksum is recorded in `migrations`
-- and checked at every open).
CREATE TABLE {s}.checkpoints (
    job text NOT NULL,
    name text NOT NULL,
    value text NOT NULL,
    fence bigint NOT NULL CHECK (fence >= 0),
    at double precision NOT NULL,
    PRIMARY KEY (job, name)
);
CREATE FUNCTION {s}.forget_checkpoints() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        DELETE FROM {s}.checkpoints;
    ELSE
        DELETE FROM {s}.checkpoints c USING old_rows o WHERE c.job = o.id;
    END IF;
    RETURN NULL;
END
$fn$;
CREATE TRIGGER forget_checkpoints_delete AFTER DELETE ON {s}.jobs
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION {s}.forget_checkpoints();
CREATE TRIGGER forget_checkpoints_truncate AFTER TRUNCATE ON {s}.jobs
    FOR EACH STATEMENT EXECUTE FUNCTION {s}.forget_checkpoints();

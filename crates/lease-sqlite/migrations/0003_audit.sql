-- Version 3: the audit trail of refused holder writes (written only by stores opened with it on).
-- Frozen: a released migration is never edited (its checksum is recorded in lease_migrations
-- and checked at every open). Every statement is idempotent: the same text creates a new file,
-- marks a seed file and upgrades an older version.
CREATE TABLE IF NOT EXISTS lease_audit(
    seq INTEGER PRIMARY KEY, time REAL NOT NULL, job TEXT NOT NULL, owner TEXT NOT NULL,
    operation TEXT NOT NULL, presented INTEGER NOT NULL, current INTEGER, reason TEXT NOT NULL,
    late_by REAL);

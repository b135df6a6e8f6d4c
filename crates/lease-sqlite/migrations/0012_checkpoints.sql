-- Version 12: fenced checkpoints, a job's durable steps. One row per job and name: the value
-- the live current lease wrote, its fence and when. Kept across failed attempts, expired
-- leases and retries; a run again of a finished job deletes them (in the transaction that
-- runs it again), and a job's rows go with it when it is deleted (a purge). A rowid table:
-- a value may be as long as a result.
-- Frozen: a released migration is never edited (its checksum is recorded in lease_migrations
-- and checked at every open). Runs once per file, when it is created or upgraded from an
-- older version.
CREATE TABLE lease_checkpoints (
    job TEXT NOT NULL,
    name TEXT NOT NULL,
    value TEXT NOT NULL,
    fence INTEGER NOT NULL,
    at REAL NOT NULL,
    UNIQUE (job, name)
);
CREATE TRIGGER lease_checkpoints_delete AFTER DELETE ON jobs_queue BEGIN
    DELETE FROM lease_checkpoints WHERE job = old.id;
END;

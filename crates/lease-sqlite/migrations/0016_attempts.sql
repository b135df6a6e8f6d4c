-- Version 16: each job's ended attempts (issue 56). One row per job and fence: who held the
-- lease, when it was claimed and when it ended, how (done, failed, timed_out, lease_lost,
-- released, cancelled) and its error. Written by the transaction that ends the attempt, as the
-- domain decides it (`Change::Attempt`); the latest 100 by fence are kept; a job's rows go
-- with it when it is deleted (a purge). The attempt under way is the job's own row. The
-- failed ones are indexed by their end, and the dead and cancelled jobs by their last change,
-- which `activity` counts per minute.
-- Frozen: a released migration is never edited (its checksum is recorded in lease_migrations
-- and checked at every open). Runs once per file, when it is created or upgraded from an
-- older version.
CREATE TABLE lease_attempts (
    job TEXT NOT NULL,
    fence INTEGER NOT NULL,
    owner TEXT NOT NULL,
    started REAL,
    ended REAL NOT NULL,
    outcome TEXT NOT NULL,
    error TEXT,
    PRIMARY KEY (job, fence)
) WITHOUT ROWID;
-- The failed attempts by their end, for the overview's failures per minute.
CREATE INDEX lease_attempts_failed ON lease_attempts(ended)
    WHERE outcome IN ('failed', 'timed_out');
-- The jobs dead or cancelled by their last change, for the overview's ends per minute.
CREATE INDEX jobs_queue_ends ON jobs_queue(updated) WHERE finished IN ('dead', 'cancelled');
CREATE TRIGGER lease_attempts_delete AFTER DELETE ON jobs_queue BEGIN
    DELETE FROM lease_attempts WHERE job = old.id;
END;

-- Version 13: the W3C trace context a job was enqueued with (the producer's span), so its
-- attempts join the producer's trace. One row per job that has one, kept apart from the job's
-- row so that no claim or write reads or carries it; written by the enqueue that makes the
-- job or runs it again (in its transaction), and gone with the job when it is deleted (a
-- purge). A job enqueued without one has no row.
-- Frozen: a released migration is never edited (its checksum is recorded in lease_migrations
-- and checked at every open). Runs once per file, when it is created or upgraded from an
-- older version.
CREATE TABLE lease_traces (
    job TEXT PRIMARY KEY,
    traceparent TEXT NOT NULL,
    tracestate TEXT
) WITHOUT ROWID;
CREATE TRIGGER lease_traces_delete AFTER DELETE ON jobs_queue BEGIN
    DELETE FROM lease_traces WHERE job = old.id;
END;

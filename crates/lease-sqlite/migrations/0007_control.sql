-- Version 7: scheduling and flow control. A job may name how long one attempt may run
-- (`timeout`, seconds) and keeps what its current attempt last said of its progress
-- (`progress`, cleared by every claim). A queue may have settings (`lease_queues`): a pause
-- (until resumed, or until `paused_until`), a limit on its live leases (`concurrency`), and the
-- default timeout of an attempt; every claim_next reads them in its own transaction. A
-- schedule (`lease_schedules`) is a cron expression in a time zone, the job each tick makes,
-- its catch-up policy, its version (counted by every change) and the last tick a scheduler
-- fired, which a fire records in the transaction that enqueues the tick's job.
-- Frozen: a released migration is never edited (its checksum is recorded in lease_migrations
-- and checked at every open). Runs once per file, when it is created or upgraded from an
-- older version.
ALTER TABLE jobs_queue ADD COLUMN timeout REAL;
ALTER TABLE jobs_queue ADD COLUMN progress TEXT;
CREATE TABLE lease_queues (
    queue TEXT PRIMARY KEY NOT NULL,
    paused INTEGER NOT NULL DEFAULT 0 CHECK (paused IN (0, 1)),
    paused_until REAL,
    concurrency INTEGER CHECK (concurrency IS NULL OR concurrency >= 1),
    timeout REAL CHECK (timeout IS NULL OR timeout > 0)
);
CREATE TABLE lease_schedules (
    name TEXT PRIMARY KEY NOT NULL,
    cron TEXT NOT NULL,
    zone TEXT NOT NULL,
    queue TEXT NOT NULL,
    priority INTEGER NOT NULL,
    max_attempts INTEGER,
    payload BLOB,
    timeout REAL,
    catch_up TEXT NOT NULL,
    version INTEGER NOT NULL,
    created REAL NOT NULL,
    last_tick REAL
);

-- Version 2: the work queue, beside the contract's table so that `jobs` keeps exactly the
-- contract's columns. One `jobs_queue` row per job, kept in step by triggers when another
-- program inserts or deletes `jobs` rows; `finished` mirrors done/dead/cancelled so that the
-- partial index holds only jobs that can still run; `purged` keeps the fence of each purged id.
-- It backfills a queue row for every existing job in the default queue.
-- Frozen: a released migration is never edited (its checksum is recorded in lease_migrations
-- and checked at every open). Every statement is idempotent: the same text creates a new file,
-- marks a seed file and upgrades an older version.
CREATE TABLE IF NOT EXISTS jobs_queue(
    seq INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    queue TEXT NOT NULL DEFAULT 'default',
    priority INTEGER NOT NULL DEFAULT 0,
    run_at REAL,
    attempts INTEGER NOT NULL DEFAULT 0,
    max_attempts INTEGER NOT NULL DEFAULT 5,
    payload BLOB,
    finished TEXT,
    error TEXT,
    result_fence INTEGER,
    updated REAL
);
CREATE INDEX IF NOT EXISTS jobs_queue_ready
    ON jobs_queue(queue, priority DESC, run_at, seq) WHERE finished IS NULL;
CREATE TABLE IF NOT EXISTS purged(id TEXT PRIMARY KEY, fence INTEGER NOT NULL) WITHOUT ROWID;
CREATE TRIGGER IF NOT EXISTS jobs_queue_insert AFTER INSERT ON jobs BEGIN
    INSERT OR IGNORE INTO jobs_queue(id, finished)
        VALUES (new.id, CASE WHEN new.done = 1 THEN 'done' END);
END;
CREATE TRIGGER IF NOT EXISTS jobs_queue_delete AFTER DELETE ON jobs BEGIN
    DELETE FROM jobs_queue WHERE id = old.id;
END;
INSERT OR IGNORE INTO jobs_queue(id, finished)
    SELECT id, CASE WHEN done = 1 THEN 'done' END FROM jobs ORDER BY rowid;

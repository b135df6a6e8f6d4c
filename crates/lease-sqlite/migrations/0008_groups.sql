-- Version 8: flow control per group. A job may belong to a group of its queue (`grp`, set at
-- enqueue), and a queue may limit the live leases of each group (`per_group`), run each
-- group one job at a time in claim order (`ordered`), and pause single groups
-- (`lease_group_pauses`, read with the queue's settings; a queue with a paused group has a
-- settings row). A claim under those rules reads, for
-- each group it meets, the group's jobs that bear on them (started and not finished, or
-- dead: `Job::bears_on_group` in lease-domain) through `jobs_queue_group`, so a group's
-- backlog of jobs never started is not read to judge it.
-- Frozen: a released migration is never edited (its checksum is recorded in lease_migrations
-- and checked at every open). Runs once per file, when it is created or upgraded from an
-- older version.
ALTER TABLE jobs_queue ADD COLUMN grp TEXT;
ALTER TABLE lease_queues ADD COLUMN per_group INTEGER
    CHECK (per_group IS NULL OR per_group >= 1);
ALTER TABLE lease_queues ADD COLUMN ordered INTEGER NOT NULL DEFAULT 0 CHECK (ordered IN (0, 1));
CREATE TABLE lease_group_pauses (
    queue TEXT NOT NULL,
    grp TEXT NOT NULL,
    until REAL,
    PRIMARY KEY (queue, grp)
) WITHOUT ROWID;
CREATE INDEX jobs_queue_group ON jobs_queue(queue, grp)
    WHERE grp IS NOT NULL
    AND (finished = 'dead' OR (finished IS NULL AND (attempts > 0 OR leased_until IS NOT NULL)));

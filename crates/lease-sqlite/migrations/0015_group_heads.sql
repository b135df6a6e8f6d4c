-- Version 15: group heads, so that a claim passes a group it may not lease from in one step,
-- whatever that group's backlog. `lease_group_heads` holds a row per queue and group with
-- ready jobs (unfinished and held by no one): the claim key (priority, run_at, seq) of the
-- group's first ready job in claim order, or of one before it, never after. The triggers
-- below bring a head forward whenever a job of a group becomes ready (enqueued, its lease
-- ended and refiled, retried, released) or moves in claim order, so the rule holds for rows
-- every writer makes, `migrate` included. A claim that walks by heads
-- (`lease_ports::next::ClaimWalk`) meets the groups in head order and, before it commits,
-- sets the head of every group it met to that group's first ready job (none: the row goes),
-- so a head left behind by a lease is moved on by the next claim that meets it.
-- Frozen: a released migration is never edited (its checksum is recorded in lease_migrations
-- and checked at every open). Runs once per file, when it is created or upgraded from an
-- older version.
CREATE TABLE lease_group_heads (
    queue TEXT NOT NULL,
    grp TEXT NOT NULL,
    priority INTEGER NOT NULL,
    run_at REAL,
    seq INTEGER NOT NULL,
    PRIMARY KEY (queue, grp)
) WITHOUT ROWID;
CREATE INDEX lease_group_heads_order ON lease_group_heads(queue, priority DESC, run_at, seq);
CREATE TRIGGER lease_group_heads_insert AFTER INSERT ON jobs_queue
    WHEN new.grp IS NOT NULL AND new.finished IS NULL AND new.leased_until IS NULL BEGIN
    INSERT INTO lease_group_heads(queue, grp, priority, run_at, seq)
        VALUES (new.queue, new.grp, new.priority, new.run_at, new.seq)
        ON CONFLICT (queue, grp) DO UPDATE SET priority = excluded.priority,
            run_at = excluded.run_at, seq = excluded.seq
        WHERE excluded.priority > priority OR (excluded.priority = priority
            AND (ifnull(excluded.run_at, -9e999), excluded.seq) < (ifnull(run_at, -9e999), seq));
END;
CREATE TRIGGER lease_group_heads_update
    AFTER UPDATE OF queue, grp, finished, leased_until, priority, run_at ON jobs_queue
    WHEN new.grp IS NOT NULL AND new.finished IS NULL AND new.leased_until IS NULL
    AND (old.finished IS NOT NULL OR old.leased_until IS NOT NULL OR old.grp IS NOT new.grp
        OR old.queue IS NOT new.queue OR old.priority IS NOT new.priority
        OR old.run_at IS NOT new.run_at) BEGIN
    INSERT INTO lease_group_heads(queue, grp, priority, run_at, seq)
        VALUES (new.queue, new.grp, new.priority, new.run_at, new.seq)
        ON CONFLICT (queue, grp) DO UPDATE SET priority = excluded.priority,
            run_at = excluded.run_at, seq = excluded.seq
        WHERE excluded.priority > priority OR (excluded.priority = priority
            AND (ifnull(excluded.run_at, -9e999), excluded.seq) < (ifnull(run_at, -9e999), seq));
END;
INSERT INTO lease_group_heads(queue, grp, priority, run_at, seq)
    SELECT queue, grp, priority, run_at, seq FROM (
        SELECT queue, grp, priority, run_at, seq, row_number() OVER (
            PARTITION BY queue, grp ORDER BY priority DESC, run_at, seq) AS n
        FROM jobs_queue WHERE grp IS NOT NULL AND finished IS NULL AND leased_until IS NULL)
    WHERE n = 1;

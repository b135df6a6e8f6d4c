-- Version 10: fair claims. A queue may serve its groups in turn (`fair`), the group served
-- least recently first (`Turn` in lease-domain). `lease_group_turns` holds the turn of every
-- group of a queue with an unfinished job: the number of the queue's lease that last served
-- it (`served`, 0 for never), read in turn order through `lease_group_turns_order`. A row is
-- added (as never served) by the triggers below whenever a job of a group is written
-- unfinished, so it holds for rows every writer makes, `migrate` included; a fair claim
-- removes the row of a group it finds with no unfinished job. `jobs_queue_turn` finds a
-- group's unfinished jobs in claim order, so a claim reads the head of each group it visits
-- without reading another group's backlog.
-- Frozen: a released migration is never edited (its checksum is recorded in lease_migrations
-- and checked at every open). Runs once per file, when it is created or upgraded from an
-- older version.
ALTER TABLE lease_queues ADD COLUMN fair INTEGER NOT NULL DEFAULT 0 CHECK (fair IN (0, 1));
CREATE TABLE lease_group_turns (
    queue TEXT NOT NULL,
    grp TEXT NOT NULL,
    served INTEGER NOT NULL DEFAULT 0 CHECK (served >= 0),
    PRIMARY KEY (queue, grp)
) WITHOUT ROWID;
CREATE INDEX lease_group_turns_order ON lease_group_turns(queue, served, grp);
CREATE INDEX jobs_queue_turn ON jobs_queue(queue, grp, priority DESC, run_at, seq)
    WHERE finished IS NULL;
CREATE TRIGGER lease_group_turns_insert AFTER INSERT ON jobs_queue
    WHEN new.grp IS NOT NULL AND new.finished IS NULL BEGIN
    INSERT OR IGNORE INTO lease_group_turns(queue, grp) VALUES (new.queue, new.grp);
END;
CREATE TRIGGER lease_group_turns_update AFTER UPDATE OF queue, grp, finished ON jobs_queue
    WHEN new.grp IS NOT NULL AND new.finished IS NULL BEGIN
    INSERT OR IGNORE INTO lease_group_turns(queue, grp) VALUES (new.queue, new.grp);
END;
INSERT OR IGNORE INTO lease_group_turns(queue, grp)
    SELECT DISTINCT queue, grp FROM jobs_queue WHERE grp IS NOT NULL AND finished IS NULL;

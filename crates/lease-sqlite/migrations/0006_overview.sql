-- Version 6: the operator's overview at any size. The finished jobs (done, dead, cancelled)
-- of each queue are counted by triggers as they change, so `stats` reads the counts and the
-- open jobs only; completions are counted per queue and minute (of the job's last change) the
-- same way, so the last hour's chart reads at most sixty rows a queue (a purge does not take
-- a completion out of it); and finished jobs are indexed by queue, end and id, so a page of
-- one end is read in id order from where the last ended (open jobs are found through the
-- ready set's two indexes; new jobs are not indexed here, so enqueues do not pay for it).
-- Frozen: a released migration is never edited (its checksum is recorded in lease_migrations
-- and checked at every open). Runs once per file, when it is created or upgraded from an
-- older version.
CREATE TABLE lease_finished (
    queue TEXT NOT NULL,
    finished TEXT NOT NULL,
    n INTEGER NOT NULL,
    PRIMARY KEY (queue, finished)
) WITHOUT ROWID;
INSERT INTO lease_finished
    SELECT queue, finished, count(*) FROM jobs_queue WHERE finished IS NOT NULL GROUP BY 1, 2;
CREATE TABLE lease_completions (
    queue TEXT NOT NULL,
    minute INTEGER NOT NULL,
    n INTEGER NOT NULL,
    PRIMARY KEY (queue, minute)
) WITHOUT ROWID;
INSERT INTO lease_completions
    SELECT queue, (CAST(updated / 60 AS INTEGER)
        - (updated < 0 AND updated / 60 <> CAST(updated / 60 AS INTEGER))) * 60, count(*)
    FROM jobs_queue WHERE finished = 'done' AND updated IS NOT NULL GROUP BY 1, 2;
CREATE TRIGGER lease_finished_insert AFTER INSERT ON jobs_queue
    WHEN new.finished IS NOT NULL BEGIN
    INSERT INTO lease_finished VALUES (new.queue, new.finished, 1)
        ON CONFLICT DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER lease_finished_delete AFTER DELETE ON jobs_queue
    WHEN old.finished IS NOT NULL BEGIN
    UPDATE lease_finished SET n = n - 1 WHERE queue = old.queue AND finished = old.finished;
END;
CREATE TRIGGER lease_finished_update AFTER UPDATE OF queue, finished ON jobs_queue
    WHEN new.finished IS NOT old.finished OR new.queue IS NOT old.queue BEGIN
    UPDATE lease_finished SET n = n - 1
        WHERE old.finished IS NOT NULL AND queue = old.queue AND finished = old.finished;
    INSERT INTO lease_finished SELECT new.queue, new.finished, 1 WHERE new.finished IS NOT NULL
        ON CONFLICT DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER lease_completions_insert AFTER INSERT ON jobs_queue
    WHEN new.finished = 'done' AND new.updated IS NOT NULL BEGIN
    INSERT INTO lease_completions VALUES (new.queue, (CAST(new.updated / 60 AS INTEGER)
        - (new.updated < 0 AND new.updated / 60 <> CAST(new.updated / 60 AS INTEGER))) * 60, 1)
        ON CONFLICT DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER lease_completions_update AFTER UPDATE OF finished ON jobs_queue
    WHEN new.finished = 'done' AND old.finished IS NOT 'done' AND new.updated IS NOT NULL BEGIN
    INSERT INTO lease_completions VALUES (new.queue, (CAST(new.updated / 60 AS INTEGER)
        - (new.updated < 0 AND new.updated / 60 <> CAST(new.updated / 60 AS INTEGER))) * 60, 1)
        ON CONFLICT DO UPDATE SET n = n + 1;
END;
CREATE INDEX jobs_queue_ended ON jobs_queue(queue, finished, id) WHERE finished IS NOT NULL;

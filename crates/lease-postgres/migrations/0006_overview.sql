-- Version 6: the operator's overview at any size, as SQLite's version 6 does it. The finished
-- jobs (done, dead, cancelled) of each queue are counted by a trigger as they change, so
-- `stats` reads the counts and the open jobs only (through the ready set's two partial
-- indexes); completions are counted per queue and minute (of the job's last change), so the
-- last hour's chart reads at most sixty rows a queue (a purge does not take a completion out
-- of it); and finished jobs are indexed by queue, end and id, so a page of one end is read in
-- id order (byte by byte, as `list` merges them) from where the last ended (new jobs enter no
-- new index).
-- Each count is kept in rows per server process (`shard`, the backend's pid), so concurrent
-- completions never wait on each other's counter row; a read sums the shards, and `purge`
-- folds them into shard 0.
-- Frozen: a released migration is never edited (its checksum is recorded in `migrations`
-- and checked at every open).
CREATE TABLE {s}.finished (
    queue text NOT NULL,
    finished text NOT NULL CHECK (finished IN ('done', 'dead', 'cancelled')),
    shard integer NOT NULL,
    n bigint NOT NULL,
    PRIMARY KEY (queue, finished, shard)
);
INSERT INTO {s}.finished
    SELECT queue, CASE WHEN done THEN 'done' ELSE ended END, 0, count(*) FROM {s}.jobs
    WHERE done OR ended IS NOT NULL GROUP BY 1, 2;
CREATE TABLE {s}.completions (
    minute double precision NOT NULL,
    queue text NOT NULL,
    shard integer NOT NULL,
    n bigint NOT NULL,
    PRIMARY KEY (minute, queue, shard)
);
INSERT INTO {s}.completions
    SELECT floor(updated / 60) * 60, queue, 0, count(*) FROM {s}.jobs
    WHERE done AND updated IS NOT NULL GROUP BY 1, 2;
-- The store's own writes move the counts in the statement that writes the job's row (its
-- sessions set `lease.counts = 'store'`): measured on completions alone (16 clients), a row
-- trigger ran at 0.70x a plain update, the counting statement at 0.78x-0.91x. A change of one
-- job's end (a completion, a failure that buries it, a cancel, a retry) made by another
-- program is counted by a row trigger that runs only when the end or the queue of a finished
-- job changed, so claims and renewals pay nothing. Inserts and deletes are counted by statement
-- triggers over the rows each statement changed (transition tables), so a statement that
-- inserts or deletes many jobs (an import, a purge, another program's bulk write) adds one
-- count per queue and end, not one per job; a TRUNCATE leaves nothing to count (and the
-- completions it had, as a purge does).
CREATE FUNCTION {s}.count_finished() RETURNS trigger LANGUAGE plpgsql AS $fn$
DECLARE
    old_end text;
    new_end text;
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        DELETE FROM {s}.finished;
    ELSIF TG_OP = 'INSERT' THEN
        WITH counted AS (
            INSERT INTO {s}.finished (queue, finished, shard, n)
            SELECT queue, CASE WHEN done THEN 'done' ELSE ended END, pg_backend_pid(), count(*)
            FROM new_rows WHERE done OR ended IS NOT NULL GROUP BY 1, 2
            ON CONFLICT (queue, finished, shard) DO UPDATE SET n = {s}.finished.n + excluded.n
        )
        INSERT INTO {s}.completions (minute, queue, shard, n)
        SELECT floor(updated / 60) * 60, queue, pg_backend_pid(), count(*)
        FROM new_rows WHERE done AND updated IS NOT NULL GROUP BY 1, 2
        ON CONFLICT (minute, queue, shard) DO UPDATE SET n = {s}.completions.n + excluded.n;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO {s}.finished (queue, finished, shard, n)
        SELECT queue, CASE WHEN done THEN 'done' ELSE ended END, pg_backend_pid(), -count(*)
        FROM old_rows WHERE done OR ended IS NOT NULL GROUP BY 1, 2
        ON CONFLICT (queue, finished, shard) DO UPDATE SET n = {s}.finished.n + excluded.n;
    ELSE
        -- One plain statement per count that moves (a completion: two), each cheaper than
        -- one statement for all (measured: a statement of two upserts over a VALUES list
        -- cost a third of a completion's throughput, plain ones about half that).
        IF OLD.done OR OLD.ended IS NOT NULL THEN
            old_end := CASE WHEN OLD.done THEN 'done' ELSE OLD.ended END;
            INSERT INTO {s}.finished (queue, finished, shard, n)
            VALUES (OLD.queue, old_end, pg_backend_pid(), -1)
            ON CONFLICT (queue, finished, shard) DO UPDATE SET n = {s}.finished.n - 1;
        END IF;
        IF NEW.done OR NEW.ended IS NOT NULL THEN
            new_end := CASE WHEN NEW.done THEN 'done' ELSE NEW.ended END;
            INSERT INTO {s}.finished (queue, finished, shard, n)
            VALUES (NEW.queue, new_end, pg_backend_pid(), 1)
            ON CONFLICT (queue, finished, shard) DO UPDATE SET n = {s}.finished.n + 1;
            IF NEW.done AND NOT OLD.done AND NEW.updated IS NOT NULL THEN
                INSERT INTO {s}.completions (minute, queue, shard, n)
                VALUES (floor(NEW.updated / 60) * 60, NEW.queue, pg_backend_pid(), 1)
                ON CONFLICT (minute, queue, shard) DO UPDATE SET n = {s}.completions.n + 1;
            END IF;
        END IF;
    END IF;
    RETURN NULL;
END
$fn$;
CREATE TRIGGER count_finished_insert AFTER INSERT ON {s}.jobs
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION {s}.count_finished();
CREATE TRIGGER count_finished_update AFTER UPDATE ON {s}.jobs FOR EACH ROW
    WHEN ((OLD.done IS DISTINCT FROM NEW.done OR OLD.ended IS DISTINCT FROM NEW.ended
        OR ((OLD.done OR OLD.ended IS NOT NULL) AND OLD.queue IS DISTINCT FROM NEW.queue))
        AND current_setting('lease.counts', true) IS DISTINCT FROM 'store')
    EXECUTE FUNCTION {s}.count_finished();
CREATE TRIGGER count_finished_delete AFTER DELETE ON {s}.jobs
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION {s}.count_finished();
CREATE TRIGGER count_finished_truncate AFTER TRUNCATE ON {s}.jobs
    FOR EACH STATEMENT EXECUTE FUNCTION {s}.count_finished();
CREATE INDEX jobs_ended
    ON {s}.jobs (queue, (CASE WHEN done THEN 'done' ELSE ended END), id COLLATE "C")
    WHERE done OR ended IS NOT NULL;

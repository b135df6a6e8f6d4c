-- Version 11: fair claims. A queue may serve its groups in turn (`fair`), the group served
-- least recently first (`Turn` in lease-domain). `group_turns` holds the turn of every group
-- of a queue with an unfinished job: the number of the queue's lease that last served it
-- (`served`, 0 for never), read in turn order through `group_turns_order`. The trigger below
-- adds a row (as never served) whenever a job of a group is written unfinished, so it holds
-- for rows every writer makes, `migrate` included; it takes the group's advisory lock shared,
-- and a fair claim removes the row of a group it finds with no unfinished job only after
-- taking that lock alone (`pg_try_advisory_xact_lock`, then a new statement's snapshot), so
-- a job being written in a group can never leave it without a turn. `jobs_turn` finds a
-- group's unfinished jobs in claim order, so a claim reads the head of each group it visits
-- without reading another group's backlog. `step` declines a queue with settings, so it is
-- not touched.
-- Frozen: a released migration is never edited (its checksum is recorded in `migrations`
-- and checked at every open).
ALTER TABLE {s}.queues ADD COLUMN fair boolean NOT NULL DEFAULT false;
CREATE TABLE {s}.group_turns (
    queue text NOT NULL,
    grp text NOT NULL,
    served bigint NOT NULL DEFAULT 0 CHECK (served >= 0),
    PRIMARY KEY (queue, grp)
);
CREATE INDEX group_turns_order ON {s}.group_turns (queue, served, grp COLLATE "C");
CREATE INDEX jobs_turn ON {s}.jobs (queue, grp, priority DESC, run_at ASC NULLS FIRST, seq)
    WHERE NOT done AND ended IS NULL;
CREATE FUNCTION {s}.keep_group_turn() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(
        hashtextextended('{s}.group_turns/' || NEW.queue || '/' || NEW.grp, 0));
    INSERT INTO {s}.group_turns (queue, grp) VALUES (NEW.queue, NEW.grp)
        ON CONFLICT (queue, grp) DO NOTHING;
    RETURN NULL;
END
$fn$;
CREATE TRIGGER jobs_group_turn AFTER INSERT OR UPDATE OF queue, grp, done, ended ON {s}.jobs
    FOR EACH ROW WHEN (NEW.grp IS NOT NULL AND NOT NEW.done AND NEW.ended IS NULL)
    EXECUTE FUNCTION {s}.keep_group_turn();
INSERT INTO {s}.group_turns (queue, grp)
    SELECT DISTINCT queue, grp FROM {s}.jobs WHERE grp IS NOT NULL AND NOT done AND ended IS NULL
    ON CONFLICT (queue, grp) DO NOTHING;

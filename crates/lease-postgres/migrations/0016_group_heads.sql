-- Version 16: group heads, so that a claim passes a group it may not lease from in one step,
-- whatever that group's backlog. `group_heads` holds a row per queue and group with ready jobs
-- (unfinished and held by no one): the claim key (priority, run_at, seq) of the group's first
-- ready job in claim order, or of one before it, never after. The trigger below brings a head
-- forward whenever a job of a group becomes ready (enqueued, its lease ended and refiled,
-- retried, released) or moves in claim order, so the rule holds for rows every writer makes,
-- `migrate` included. It takes the group's advisory lock shared (the one `keep_group_turn`
-- takes, so a transaction holds one lock per group however many rows it writes) and writes the
-- head only when it moves it forward, so producers appending to a group do not wait on each
-- other. A claim that walks by heads (`lease_ports::next::ClaimWalk`) meets the groups in head
-- order and, before it commits, calls `repair_group_heads` for the groups it met: for each
-- whose lock it takes alone (so no job of the group is becoming ready in a transaction it
-- cannot see), a new statement's snapshot sets the head to the group's first ready job, or
-- removes it when there is none; a head left behind by a lease is moved on by the next claim
-- that meets it. The repair reads `jobs_turn` from the group's first job (its order spelled as
-- that index's, and `leased_until IS NULL` written so the claim-order index cannot serve it),
-- never the claim-order index past another group's backlog.
-- Frozen: a released migration is never edited (its checksum is recorded in `migrations`
-- and checked at every open).
CREATE TABLE {s}.group_heads (
    queue text NOT NULL,
    grp text NOT NULL,
    priority bigint NOT NULL,
    run_at double precision,
    seq bigint NOT NULL,
    PRIMARY KEY (queue, grp)
);
CREATE INDEX group_heads_order ON {s}.group_heads
    (queue, priority DESC, run_at ASC NULLS FIRST, seq);
CREATE FUNCTION {s}.lower_group_head() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(
        hashtextextended('{s}.group_turns/' || NEW.queue || '/' || NEW.grp, 0));
    INSERT INTO {s}.group_heads (queue, grp, priority, run_at, seq)
        VALUES (NEW.queue, NEW.grp, NEW.priority, NEW.run_at, NEW.seq)
        ON CONFLICT (queue, grp) DO NOTHING;
    UPDATE {s}.group_heads h SET priority = NEW.priority, run_at = NEW.run_at, seq = NEW.seq
        WHERE h.queue = NEW.queue AND h.grp = NEW.grp
        AND (NEW.priority > h.priority OR (NEW.priority = h.priority
            AND (coalesce(NEW.run_at, '-infinity'), NEW.seq)
                < (coalesce(h.run_at, '-infinity'), h.seq)));
    RETURN NULL;
END
$fn$;
CREATE TRIGGER jobs_group_head_insert AFTER INSERT ON {s}.jobs
    FOR EACH ROW WHEN (NEW.grp IS NOT NULL AND NOT NEW.done AND NEW.ended IS NULL
        AND NEW.leased_until IS NULL)
    EXECUTE FUNCTION {s}.lower_group_head();
CREATE TRIGGER jobs_group_head_update AFTER UPDATE ON {s}.jobs
    FOR EACH ROW WHEN (NEW.grp IS NOT NULL AND NOT NEW.done AND NEW.ended IS NULL
        AND NEW.leased_until IS NULL
        AND (OLD.leased_until IS NOT NULL OR OLD.done OR OLD.ended IS NOT NULL
            OR OLD.grp IS DISTINCT FROM NEW.grp OR OLD.queue <> NEW.queue
            OR OLD.priority <> NEW.priority OR OLD.run_at IS DISTINCT FROM NEW.run_at
            OR OLD.seq <> NEW.seq))
    EXECUTE FUNCTION {s}.lower_group_head();
CREATE FUNCTION {s}.repair_group_heads(p_queue text, p_groups text[]) RETURNS integer
LANGUAGE plpgsql AS $fn$
DECLARE
    g text;
    h record;
    n integer := 0;
BEGIN
    FOREACH g IN ARRAY p_groups LOOP
        IF pg_try_advisory_xact_lock(
            hashtextextended('{s}.group_turns/' || p_queue || '/' || g, 0)) THEN
            SELECT priority, run_at, seq INTO h FROM {s}.jobs
                WHERE queue = p_queue AND grp = g AND NOT done AND ended IS NULL
                AND (leased_until IS NULL) IS TRUE
                ORDER BY queue, grp, priority DESC, run_at ASC NULLS FIRST, seq LIMIT 1;
            IF NOT FOUND THEN
                DELETE FROM {s}.group_heads WHERE queue = p_queue AND grp = g;
            ELSE
                -- Written only when it moves: a head left where it is costs no dead row.
                UPDATE {s}.group_heads SET priority = h.priority, run_at = h.run_at, seq = h.seq
                    WHERE queue = p_queue AND grp = g
                    AND (priority, run_at, seq) IS DISTINCT FROM (h.priority, h.run_at, h.seq);
                INSERT INTO {s}.group_heads (queue, grp, priority, run_at, seq)
                    VALUES (p_queue, g, h.priority, h.run_at, h.seq)
                    ON CONFLICT (queue, grp) DO NOTHING;
            END IF;
            n := n + 1;
        END IF;
    END LOOP;
    RETURN n;
END
$fn$;
INSERT INTO {s}.group_heads (queue, grp, priority, run_at, seq)
    SELECT DISTINCT ON (queue, grp) queue, grp, priority, run_at, seq FROM {s}.jobs
    WHERE grp IS NOT NULL AND NOT done AND ended IS NULL AND leased_until IS NULL
    ORDER BY queue, grp, priority DESC, run_at ASC NULLS FIRST, seq;

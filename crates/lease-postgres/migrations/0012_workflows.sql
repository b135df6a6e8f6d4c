-- Version 12: workflows, jobs that run after other jobs. A job waiting for its parents has
-- `ended = 'waiting'`: the ready, turn and group indexes, which hold only jobs whose `ended` is
-- NULL, leave it out (claims never read past it), and migration 6's counts count it (so
-- `stats` reads its number; the checks of `jobs.ended` (made by migration 1 as `jobs_check`)
-- and `finished.finished` now allow it).
-- Its parents are rows of `parents`, in the order first named (`ord`), found from the parent
-- by `parents_parent` when the parent finishes, and deleted with the child (by triggers);
-- `on_parent_failure` is its policy (`cancel` or `run`), NULL for a job without parents.
-- `step` (migration 9) is made again only to decline (SQLSTATE LE004) a completion or a
-- burial of a job that has waiting children, which the store then writes through its
-- statements, judging the children with lease_domain in the same transaction. The function's
-- text is migration 9's with the two declines added: a frozen migration cannot be edited, so
-- it is restated by necessity.
-- Frozen: a released migration is never edited (its checksum is recorded in `migrations`
-- and checked at every open).
ALTER TABLE {s}.jobs DROP CONSTRAINT IF EXISTS jobs_check;
ALTER TABLE {s}.jobs DROP CONSTRAINT IF EXISTS jobs_ended_check;
ALTER TABLE {s}.jobs ADD CONSTRAINT jobs_ended_check
    CHECK (ended IS NULL OR (ended IN ('dead', 'cancelled', 'waiting') AND NOT done));
ALTER TABLE {s}.finished DROP CONSTRAINT IF EXISTS finished_finished_check;
ALTER TABLE {s}.finished ADD CONSTRAINT finished_finished_check
    CHECK (finished IN ('done', 'dead', 'cancelled', 'waiting'));
ALTER TABLE {s}.jobs ADD COLUMN on_parent_failure text
    CHECK (on_parent_failure IS NULL OR on_parent_failure IN ('cancel', 'run'));
CREATE TABLE {s}.parents (
    child text NOT NULL,
    parent text NOT NULL,
    ord integer NOT NULL,
    PRIMARY KEY (child, parent)
);
CREATE INDEX parents_parent ON {s}.parents (parent, child);
-- A job's parent rows go with it: a statement trigger over the rows a statement deleted (a
-- purge deletes many in one), and TRUNCATE (which another program may run) empties them too.
-- No foreign key: it would make another program's TRUNCATE of `jobs` fail.
CREATE FUNCTION {s}.forget_parents() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        DELETE FROM {s}.parents;
    ELSE
        DELETE FROM {s}.parents p USING old_rows o WHERE p.child = o.id;
    END IF;
    RETURN NULL;
END
$fn$;
CREATE TRIGGER forget_parents_delete AFTER DELETE ON {s}.jobs
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION {s}.forget_parents();
CREATE TRIGGER forget_parents_truncate AFTER TRUNCATE ON {s}.jobs
    FOR EACH STATEMENT EXECUTE FUNCTION {s}.forget_parents();
DROP FUNCTION {s}.step(text, text, bigint, text, double precision, text, text, integer, bytea[],
    bytea, double precision, double precision, double precision, boolean, text, text);
CREATE FUNCTION {s}.step(
    p_job text, p_owner text, p_fence bigint, p_result text, p_done_at double precision,
    p_queue text, p_claimer text, p_limit integer, p_tokens bytea[], p_token bytea,
    p_now double precision, p_until double precision, p_length double precision,
    p_audit boolean, p_expired text, p_released text)
RETURNS TABLE (o_role text, o_now double precision, o_id text, o_owner text,
    o_until double precision, o_fence bigint, o_result text, o_done boolean, o_queue text,
    o_priority bigint, o_run_at double precision, o_attempts bigint, o_max_attempts bigint,
    o_payload bytea, o_ended text, o_error text, o_result_fence bigint,
    o_updated double precision, o_token bytea, o_timeout double precision, o_progress text, o_grp text)
LANGUAGE plpgsql
-- The candidates stay on the ordered scan of the ready index whatever the statistics say,
-- with nothing compiled and the generic plans at once (see `CLAIM_NEXT_SETTINGS`); the counts
-- of migration 6 are moved here, so its row trigger leaves these writes out, whatever session
-- calls it.
SET enable_sort = off SET jit = off SET plan_cache_mode = force_generic_plan
SET lease.counts = 'store'
AS $fn$
DECLARE
    v_clock boolean := p_now IS NULL;
    v_done_at double precision := p_done_at;
    v_now double precision := p_now;
    v_until double precision := p_until;
    v_left integer := greatest(p_limit, 0);
    v_asked integer;
    v_read integer;
    v_leases integer := 0;
BEGIN
    -- A queue with settings (a pause, a limit, a default timeout) is claimed through the
    -- statements, which decide under them; the row is read FOR SHARE so that a change of
    -- settings (which locks the table) waits for this statement and a later one sees it.
    PERFORM 1 FROM {s}.queues q WHERE q.queue = p_queue FOR SHARE;
    IF FOUND THEN
        RAISE EXCEPTION 'lease step: a queue with settings is claimed by the store'
            USING ERRCODE = 'LE003';
    END IF;
    IF p_job IS NOT NULL THEN
        SELECT j.id, j.owner, j.until, j.fence, j.result, j.done, j.queue, j.priority,
            j.run_at, j.attempts, j.max_attempts, NULL::bytea, j.ended, j.error,
            j.result_fence, j.updated, j.token, j.timeout, j.progress, j.grp
        INTO o_id, o_owner, o_until, o_fence, o_result, o_done, o_queue, o_priority,
            o_run_at, o_attempts, o_max_attempts, o_payload, o_ended, o_error,
            o_result_fence, o_updated, o_token, o_timeout, o_progress, o_grp
        FROM {s}.jobs j WHERE j.id = p_job FOR UPDATE;
        IF v_clock THEN
            v_now := extract(epoch FROM clock_timestamp())::float8;
            v_done_at := v_now;
        END IF;
        IF NOT FOUND THEN
            IF p_audit THEN
                RAISE EXCEPTION 'lease step: a refused completion is recorded by the store'
                    USING ERRCODE = 'LE001';
            END IF;
        ELSE
            o_role := 'c';
            o_now := v_done_at;
            RETURN NEXT;
            IF o_fence = p_fence AND NOT o_done AND o_ended IS NULL AND o_owner = p_owner
                AND o_until > v_done_at THEN
                UPDATE {s}.jobs j SET result = p_result, done = true, result_fence = p_fence,
                    updated = v_done_at, leased_until = NULL
                WHERE j.id = p_job
                RETURNING 'C', v_done_at, j.id, j.owner, j.until, j.fence, j.result, j.done,
                    j.queue, j.priority, j.run_at, j.attempts, j.max_attempts, NULL::bytea,
                    j.ended, j.error, j.result_fence, j.updated, j.token, j.timeout, j.progress, j.grp
                INTO o_role, o_now, o_id, o_owner, o_until, o_fence, o_result, o_done,
                    o_queue, o_priority, o_run_at, o_attempts, o_max_attempts, o_payload,
                    o_ended, o_error, o_result_fence, o_updated, o_token, o_timeout, o_progress, o_grp;
                RETURN NEXT;
                PERFORM 1 FROM {s}.parents p JOIN {s}.jobs c ON c.id = p.child
                WHERE p.parent = p_job AND c.ended = 'waiting' LIMIT 1;
                IF FOUND THEN
                    RAISE EXCEPTION 'lease step: a job with waiting children is completed by the store'
                        USING ERRCODE = 'LE004';
                END IF;
                INSERT INTO {s}.finished (queue, finished, shard, n)
                VALUES (o_queue, 'done', pg_backend_pid(), 1)
                ON CONFLICT (queue, finished, shard) DO UPDATE SET n = {s}.finished.n + 1;
                INSERT INTO {s}.completions (minute, queue, shard, n)
                VALUES (floor(v_done_at / 60) * 60, o_queue, pg_backend_pid(), 1)
                ON CONFLICT (minute, queue, shard) DO UPDATE SET n = {s}.completions.n + 1;
            ELSIF p_audit THEN
                RAISE EXCEPTION 'lease step: a refused completion is recorded by the store'
                    USING ERRCODE = 'LE001';
            END IF;
        END IF;
    END IF;
    IF v_left = 0 THEN
        RETURN;
    END IF;
    IF v_clock THEN
        IF v_now IS NULL THEN
            v_now := extract(epoch FROM clock_timestamp())::float8;
        END IF;
        v_until := v_now + p_length;
        IF NOT (v_until > v_now AND v_until < 'Infinity'::float8) THEN
            RAISE EXCEPTION 'lease step: a lease of % s from % is decided by the store', p_length,
                v_now USING ERRCODE = 'LE002';
        END IF;
    END IF;
    -- Held jobs of the queue whose lease has ended are filed with the unheld ones (as the
    -- candidates statement's `refiled` does), so the candidates come from the ready index alone.
    UPDATE {s}.jobs j SET leased_until = NULL WHERE j.id = ANY(ARRAY(
        SELECT e.id FROM {s}.jobs e WHERE e.queue = p_queue AND NOT e.done AND e.ended IS NULL
        AND e.leased_until <= v_now FOR UPDATE SKIP LOCKED));
    LOOP
        v_asked := v_left;
        v_read := 0;
        FOR o_id, o_owner, o_until, o_fence, o_result, o_done, o_queue, o_priority, o_run_at,
            o_attempts, o_max_attempts, o_payload, o_ended, o_error, o_result_fence,
            o_updated, o_token, o_timeout, o_progress, o_grp IN
            SELECT c.id, c.owner, c.until, c.fence, c.result, c.done, c.queue, c.priority,
                c.run_at, c.attempts, c.max_attempts, NULL::bytea, c.ended, c.error,
                c.result_fence, c.updated, c.token, c.timeout, c.progress, c.grp
            FROM {s}.jobs c
            WHERE c.queue = p_queue AND NOT c.done AND c.ended IS NULL
            AND c.leased_until IS NULL AND c.until <= v_now
            AND (c.run_at IS NULL OR c.run_at <= v_now) AND c.fence < 9223372036854775807
            ORDER BY c.priority DESC, c.run_at ASC NULLS FIRST, c.seq LIMIT v_asked
            FOR UPDATE SKIP LOCKED
        LOOP
            v_read := v_read + 1;
            o_role := 'n';
            o_now := v_now;
            RETURN NEXT;
            IF o_attempts >= greatest(o_max_attempts, 1) THEN
                UPDATE {s}.jobs j SET ended = 'dead',
                    error = CASE WHEN j.owner IS NULL THEN p_released ELSE p_expired END,
                    updated = v_now, leased_until = NULL
                WHERE j.id = o_id
                RETURNING 'w', v_now, j.id, j.owner, j.until, j.fence, j.result, j.done,
                    j.queue, j.priority, j.run_at, j.attempts, j.max_attempts, NULL::bytea,
                    j.ended, j.error, j.result_fence, j.updated, j.token, j.timeout, j.progress, j.grp
                INTO o_role, o_now, o_id, o_owner, o_until, o_fence, o_result, o_done,
                    o_queue, o_priority, o_run_at, o_attempts, o_max_attempts, o_payload,
                    o_ended, o_error, o_result_fence, o_updated, o_token, o_timeout, o_progress, o_grp;
                RETURN NEXT;
                PERFORM 1 FROM {s}.parents p JOIN {s}.jobs c ON c.id = p.child
                WHERE p.parent = o_id AND c.ended = 'waiting' LIMIT 1;
                IF FOUND THEN
                    RAISE EXCEPTION 'lease step: a job with waiting children is buried by the store'
                        USING ERRCODE = 'LE004';
                END IF;
                INSERT INTO {s}.finished (queue, finished, shard, n)
                VALUES (o_queue, 'dead', pg_backend_pid(), 1)
                ON CONFLICT (queue, finished, shard) DO UPDATE SET n = {s}.finished.n + 1;
            ELSE
                v_leases := v_leases + 1;
                UPDATE {s}.jobs j SET owner = p_claimer, until = v_until, fence = j.fence + 1,
                    attempts = j.attempts + 1, updated = v_now,
                    token = coalesce(p_tokens[v_leases], p_token), progress = NULL,
                    leased_until = v_until
                WHERE j.id = o_id
                RETURNING 'w', v_now, j.id, j.owner, j.until, j.fence, j.result, j.done,
                    j.queue, j.priority, j.run_at, j.attempts, j.max_attempts, j.payload,
                    j.ended, j.error, j.result_fence, j.updated, j.token, j.timeout, j.progress, j.grp
                INTO o_role, o_now, o_id, o_owner, o_until, o_fence, o_result, o_done,
                    o_queue, o_priority, o_run_at, o_attempts, o_max_attempts, o_payload,
                    o_ended, o_error, o_result_fence, o_updated, o_token, o_timeout, o_progress, o_grp;
                RETURN NEXT;
                v_left := v_left - 1;
            END IF;
        END LOOP;
        EXIT WHEN v_left = 0 OR v_read < v_asked;
    END LOOP;
END
$fn$;

-- Version 17: each job's ended attempts (issue 56). One row per job and fence: who held the
-- lease, when it was claimed (the job's `updated`, which a claim sets and nothing changes
-- while the lease is held) and when it ended, how (done, failed, timed_out, lease_lost,
-- released, cancelled) and its error; written in the transaction that ends the attempt, as
-- the domain decides it (`Change::Attempt`), by the statements that write the job's row
-- (`Sql::update_counted`, `update_many`) and by `step`, made again here to keep the attempts
-- its completions end and the expired leases its claims take. A job keeps its latest 100;
-- the rows go with it when it is deleted (a purge) or the jobs are truncated.
-- Frozen: a released migration is never edited (its checksum is recorded in `migrations`
-- and checked at every open).
CREATE TABLE {s}.attempts (
    job text NOT NULL,
    fence bigint NOT NULL,
    owner text NOT NULL,
    started double precision,
    ended double precision NOT NULL,
    outcome text NOT NULL,
    error text,
    PRIMARY KEY (job, fence)
);
-- The failed attempts by their end, for the overview's failures per minute (`activity`).
CREATE INDEX attempts_failed ON {s}.attempts (ended) WHERE outcome IN ('failed', 'timed_out');
-- The jobs dead or cancelled by their last change, for the overview's ends per minute.
CREATE INDEX jobs_ends ON {s}.jobs (updated) WHERE ended IN ('dead', 'cancelled');
CREATE FUNCTION {s}.forget_attempts() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        DELETE FROM {s}.attempts;
    ELSE
        DELETE FROM {s}.attempts a USING old_rows o WHERE a.job = o.id;
    END IF;
    RETURN NULL;
END
$fn$;
CREATE TRIGGER forget_attempts_delete AFTER DELETE ON {s}.jobs
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION {s}.forget_attempts();
CREATE TRIGGER forget_attempts_truncate AFTER TRUNCATE ON {s}.jobs
    FOR EACH STATEMENT EXECUTE FUNCTION {s}.forget_attempts();
-- Keeps one ended attempt (`step`'s): and, past the first epoch or the bound's count of
-- claims in one, drops all but the latest 100 of the job's, as `lease_domain::trims_attempts`
-- says.
CREATE FUNCTION {s}.keep_attempt(p_job text, p_fence bigint, p_owner text,
    p_started double precision, p_ended double precision, p_outcome text) RETURNS void
LANGUAGE plpgsql AS $fn$
BEGIN
    INSERT INTO {s}.attempts (job, fence, owner, started, ended, outcome)
    VALUES (p_job, p_fence, p_owner, p_started, p_ended, p_outcome) ON CONFLICT DO NOTHING;
    IF (p_fence & 4294967295) > 100 OR (p_fence >> 32) > 0 THEN
        DELETE FROM {s}.attempts a WHERE a.job = p_job AND a.fence < (SELECT x.fence
            FROM {s}.attempts x WHERE x.job = p_job ORDER BY x.fence DESC OFFSET 99 LIMIT 1);
    END IF;
END
$fn$;
CREATE OR REPLACE FUNCTION {s}.step(
    p_job text, p_owner text, p_fence bigint, p_result text, p_done_at double precision,
    p_queue text, p_claimer text, p_limit integer, p_tokens bytea[], p_token bytea,
    p_now double precision, p_until double precision, p_length double precision,
    p_audit boolean, p_expired text, p_released text)
RETURNS TABLE (o_role text, o_now double precision, o_epoch bigint, o_id text, o_owner text,
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
    v_epoch bigint := {s}.epoch();
BEGIN
    -- Every row answered carries the epoch its fences were handed out in.
    o_epoch := v_epoch;
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
                PERFORM {s}.keep_attempt(p_job, o_fence, o_owner, o_updated, v_done_at, 'done');
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
            AND (c.run_at IS NULL OR c.run_at <= v_now)
            AND {s}.next_fence(c.fence, v_epoch) IS NOT NULL
            ORDER BY c.priority DESC, c.run_at ASC NULLS FIRST, c.seq LIMIT v_asked
            FOR UPDATE SKIP LOCKED
        LOOP
            v_read := v_read + 1;
            o_role := 'n';
            o_now := v_now;
            RETURN NEXT;
            -- An expired lease's attempt ends lost at its deadline, whatever comes of the job.
            IF o_owner IS NOT NULL THEN
                PERFORM {s}.keep_attempt(o_id, o_fence, o_owner, o_updated, o_until, 'lease_lost');
            END IF;
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
                UPDATE {s}.jobs j SET owner = p_claimer, until = v_until, fence = {s}.next_fence(j.fence, v_epoch),
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

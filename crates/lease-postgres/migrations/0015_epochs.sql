-- Version 15: an epoch in every fence, so that no failover or restore hands a fence out twice.
-- The store's epoch is the server's timeline less one (a promotion and the end of a
-- point-in-time recovery each start a new timeline; a primary that never failed over is on
-- timeline 1, so its fences are as before), plus what `raise_epoch` added (a migration carrying
-- a source's epoch, an operator's `lease epoch --raise` after a restore the timeline does not
-- show). A claim hands out `next_fence(fence, epoch)`: the first fence of the epoch
-- (`epoch << 32 | 1`) when the job's fence is below it, else one more, never into the next
-- epoch's fences (the rule of `lease_domain::Fence::next_in`). The epoch is read where the
-- fence is handed out, in the claim's transaction; on a standby in recovery it is refused as a
-- write there is (`read_only_sql_transaction`). `step` is made again with the epoch read once
-- a call, its fences handed out in it, and the epoch answered on every row (`o_epoch`, after
-- `o_now`) so that the domain's check of each answer decides in the same epoch.
-- Frozen: a released migration is never edited (its checksum is recorded in `migrations`
-- and checked at every open).
CREATE TABLE {s}.epoch (
    one boolean PRIMARY KEY DEFAULT true CHECK (one),
    raised bigint NOT NULL DEFAULT 0 CHECK (raised >= 0)
);
INSERT INTO {s}.epoch DEFAULT VALUES;
CREATE FUNCTION {s}.epoch() RETURNS bigint LANGUAGE plpgsql STABLE AS $fn$
BEGIN
    IF pg_is_in_recovery() THEN
        RAISE EXCEPTION 'lease: this server is a standby in recovery; only the primary hands out fences'
            USING ERRCODE = 'read_only_sql_transaction';
    END IF;
    -- The timeline is the first eight hex digits of the current WAL file's name.
    RETURN (SELECT e.raised FROM {s}.epoch e)
        + ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint - 1;
END
$fn$;
CREATE FUNCTION {s}.next_fence(p_fence bigint, p_epoch bigint) RETURNS bigint
LANGUAGE sql IMMUTABLE AS $fn$
    SELECT CASE
        WHEN p_fence < (p_epoch << 32) + 1 THEN (p_epoch << 32) + 1
        WHEN p_fence = 9223372036854775807 OR ((p_fence + 1) & 4294967295) = 0 THEN NULL
        ELSE p_fence + 1
    END
$fn$;
DROP FUNCTION {s}.step(text, text, bigint, text, double precision, text, text, integer, bytea[],
    bytea, double precision, double precision, double precision, boolean, text, text);
CREATE FUNCTION {s}.step(
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

-- Version 14: the W3C trace context a job was enqueued with (the producer's span), so its
-- attempts join the producer's trace. One row per job that has one, kept apart from the job's
-- row so that no claim, step or write reads or carries it; written by the enqueue that makes
-- the job or runs it again (in its transaction), and gone with the job when it is deleted (a
-- purge) or the jobs are truncated, by statement triggers as for `checkpoints`. A job
-- enqueued without one has no row.
-- Frozen: a released migration is never edited (its checksum is recorded in `migrations`
-- and checked at every open).
CREATE TABLE {s}.traces (
    job text PRIMARY KEY,
    traceparent text NOT NULL,
    tracestate text
);
CREATE FUNCTION {s}.forget_traces() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        DELETE FROM {s}.traces;
    ELSE
        DELETE FROM {s}.traces t USING old_rows o WHERE t.job = o.id;
    END IF;
    RETURN NULL;
END
$fn$;
CREATE TRIGGER forget_traces_delete AFTER DELETE ON {s}.jobs
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION {s}.forget_traces();
CREATE TRIGGER forget_traces_truncate AFTER TRUNCATE ON {s}.jobs
    FOR EACH STATEMENT EXECUTE FUNCTION {s}.forget_traces();

-- Version 6: enqueue signals for `lease serve`. A transaction that adds a job to a queue, or
-- makes a dead or cancelled job pending again (retry), notifies the channel `lease_{s}` with
-- the queue's name when it commits, whoever made it (a server, the CLI, another program), so
-- that every server's waiting claims on that queue look again at once. PostgreSQL delivers
-- one notification per queue per transaction (identical ones are folded).
-- Frozen: a released migration is never edited (its checksum is checked at every open).
CREATE FUNCTION {s}.signal_job() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    PERFORM pg_notify('lease_{s}', NEW.queue);
    RETURN NULL;
END
$fn$;
CREATE TRIGGER jobs_signal_insert AFTER INSERT ON {s}.jobs
    FOR EACH ROW EXECUTE FUNCTION {s}.signal_job();
CREATE TRIGGER jobs_signal_retry AFTER UPDATE OF ended ON {s}.jobs
    FOR EACH ROW WHEN (OLD.ended IS NOT NULL AND NEW.ended IS NULL)
    EXECUTE FUNCTION {s}.signal_job();

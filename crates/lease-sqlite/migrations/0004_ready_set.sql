-- Version 4: held jobs leave the ready set, so live leases do not slow the next claim.
-- `leased_until` is where the ready set files a job (`Job::leased_until` in lease-domain):
-- the end of its lease while someone holds it, NULL for a job no one holds. The ready index
-- holds only the unheld jobs, in claim order; held ones are indexed by when their lease ends,
-- and claim_next first files the ones whose lease has ended with the unheld jobs again.
-- Rows other programs insert get NULL (they wait in claim order, as before), and a foreign
-- update that moves a lease's end earlier files the job with the unheld jobs.
-- Frozen: a released migration is never edited (its checksum is recorded in lease_migrations
-- and checked at every open). Runs once per file, when it is created or upgraded from an
-- older version.
ALTER TABLE jobs_queue ADD COLUMN leased_until REAL;
UPDATE jobs_queue SET leased_until = (SELECT j.until FROM jobs j
    WHERE j.id = jobs_queue.id AND j.owner IS NOT NULL AND j.done = 0)
    WHERE finished IS NULL;
DROP INDEX IF EXISTS jobs_queue_ready;
CREATE INDEX jobs_queue_ready ON jobs_queue(queue, priority DESC, run_at, seq)
    WHERE finished IS NULL AND leased_until IS NULL;
CREATE INDEX jobs_queue_leased ON jobs_queue(queue, leased_until)
    WHERE finished IS NULL AND leased_until IS NOT NULL;
CREATE TRIGGER jobs_queue_lease_shortened AFTER UPDATE OF until ON jobs
    WHEN new.until < old.until BEGIN
    UPDATE jobs_queue SET leased_until = NULL WHERE id = new.id AND leased_until IS NOT NULL;
END;

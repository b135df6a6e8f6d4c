-- Version 4: held jobs leave the ready set, so live leases do not slow the next claim.
-- `leased_until` is where the ready set files a job (`Job::leased_until` in lease-domain):
-- the end of its lease while someone holds it, NULL for a job no one holds. The ready index
-- holds only the unheld jobs, in claim order; held ones are indexed by when their lease ends,
-- and claim_next files the ones whose lease has ended with the unheld jobs again.
-- Frozen: a released migration is never edited (its checksum is recorded in `migrations`
-- and checked at every open).
ALTER TABLE {s}.jobs ADD COLUMN leased_until double precision;
UPDATE {s}.jobs SET leased_until = until
    WHERE owner IS NOT NULL AND NOT done AND ended IS NULL;
DROP INDEX {s}.jobs_ready;
CREATE INDEX jobs_ready ON {s}.jobs (queue, priority DESC, run_at ASC NULLS FIRST, seq)
    WHERE NOT done AND ended IS NULL AND leased_until IS NULL;
CREATE INDEX jobs_leased ON {s}.jobs (queue, leased_until)
    WHERE NOT done AND ended IS NULL AND leased_until IS NOT NULL;

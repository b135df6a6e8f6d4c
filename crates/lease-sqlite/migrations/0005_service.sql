-- Version 5: the network service (`lease serve`). A lease granted through it is bound to a
-- secret token handed to the claimant once; the store keeps only the token's SHA-256 digest,
-- beside the job's queue fields, written by the claim and replaced by the next one.
-- API keys are kept the same way: their id, principal and scope in clear, the secret only as
-- its SHA-256 digest; `revoked` is when the key was revoked (NULL while it is live).
-- Frozen: a released migration is never edited (its checksum is recorded in lease_migrations
-- and checked at every open). Runs once per file, when it is created or upgraded from an
-- older version.
ALTER TABLE jobs_queue ADD COLUMN token BLOB;
CREATE TABLE lease_keys (
    id TEXT PRIMARY KEY NOT NULL,
    principal TEXT NOT NULL,
    scope TEXT NOT NULL,
    digest BLOB NOT NULL,
    created REAL NOT NULL,
    revoked REAL
);
CREATE INDEX lease_keys_principal ON lease_keys(principal);

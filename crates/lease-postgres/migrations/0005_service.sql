-- Version 5: the network service (`lease serve`). A lease granted through it is bound to a
-- secret token handed to the claimant once; the store keeps only the token's SHA-256 digest
-- in the job's row, written by the claim and replaced by the next one.
-- API keys are kept the same way: their id, principal and scope in clear, the secret only as
-- its SHA-256 digest; `revoked` is when the key was revoked (NULL while it is live).
-- Frozen: a released migration is never edited (its checksum is recorded in `migrations`
-- and checked at every open).
ALTER TABLE {s}.jobs ADD COLUMN token bytea;
CREATE TABLE {s}.keys (
    id text PRIMARY KEY,
    principal text NOT NULL,
    scope text NOT NULL,
    digest bytea NOT NULL,
    created double precision NOT NULL,
    revoked double precision
);
CREATE INDEX keys_principal ON {s}.keys (principal);

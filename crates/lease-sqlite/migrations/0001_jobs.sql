-- Version 1: the contract's table. Other programs may insert rows with only `id`.
-- Frozen: a released migration is never edited (its checksum is recorded in lease_migrations
-- and checked at every open). Every statement is idempotent: the same text creates a new file,
-- marks a seed file and upgrades an older version.
CREATE TABLE IF NOT EXISTS jobs(
    id TEXT PRIMARY KEY,
    owner TEXT,
    until REAL NOT NULL DEFAULT 0,
    fence INTEGER NOT NULL DEFAULT 0,
    result TEXT,
    done INTEGER NOT NULL DEFAULT 0
);

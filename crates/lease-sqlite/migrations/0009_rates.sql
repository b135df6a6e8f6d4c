-- Version 9: rate limits. A queue may grant at most N leases in any window of a period, of
-- the whole queue (`rate_count`/`rate_period`) and of each of its groups
-- (`group_rate_count`/`group_rate_period`); every claim of such a queue reads, in its own
-- transaction, the log of the grants that still count (`lease_grants`: one row per lease
-- granted and rate it counts against, `grp` NULL for the queue's own, kept until `expires`,
-- the grant's time plus the period): it first forgets the expired ones, then reads how many
-- still count from `lease_grant_counts` (one row per queue and rate: `grp` '' for the
-- queue's own, else the group; kept with the log in the same transaction), so a claim's cost
-- does not grow with the rate's count, and logs its own.
-- Frozen: a released migration is never edited (its checksum is recorded in lease_migrations
-- and checked at every open). Runs once per file, when it is created or upgraded from an
-- older version.
ALTER TABLE lease_queues ADD COLUMN rate_count INTEGER CHECK (rate_count IS NULL OR rate_count >= 1);
ALTER TABLE lease_queues ADD COLUMN rate_period REAL CHECK (rate_period IS NULL OR rate_period > 0);
ALTER TABLE lease_queues ADD COLUMN group_rate_count INTEGER
    CHECK (group_rate_count IS NULL OR group_rate_count >= 1);
ALTER TABLE lease_queues ADD COLUMN group_rate_period REAL
    CHECK (group_rate_period IS NULL OR group_rate_period > 0);
CREATE TABLE lease_grants (
    queue TEXT NOT NULL,
    grp TEXT,
    expires REAL NOT NULL
);
CREATE INDEX lease_grants_scope ON lease_grants(queue, grp, expires);
CREATE INDEX lease_grants_expiry ON lease_grants(queue, expires);
CREATE TABLE lease_grant_counts (
    queue TEXT NOT NULL,
    grp TEXT NOT NULL,
    n INTEGER NOT NULL CHECK (n >= 0),
    PRIMARY KEY (queue, grp)
) WITHOUT ROWID;

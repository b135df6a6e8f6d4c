-- Version 10: rate limits. A queue may grant at most N leases in any window of a period, of
-- the whole queue (`rate_count`/`rate_period`) and of each of its groups
-- (`group_rate_count`/`group_rate_period`); every claim of such a queue takes the queue's
-- advisory lock and reads, in its own transaction, the log of the grants that still count
-- (`grants`: one row per lease granted and rate it counts against, `grp` NULL for the
-- queue's own, kept until `expires`, the grant's time plus the period): it first forgets the
-- expired ones, then reads how many still count from `grant_counts` (one row per queue and
-- rate: `grp` '' for the queue's own, else the group; kept with the log in the same
-- transaction), so a claim's cost does not grow with the rate's count, and logs its own.
-- `step` declines a queue with settings, so it is not touched.
-- Frozen: a released migration is never edited (its checksum is recorded in `migrations`
-- and checked at every open).
ALTER TABLE {s}.queues ADD COLUMN rate_count bigint CHECK (rate_count IS NULL OR rate_count >= 1);
ALTER TABLE {s}.queues ADD COLUMN rate_period double precision
    CHECK (rate_period IS NULL OR rate_period > 0);
ALTER TABLE {s}.queues ADD COLUMN group_rate_count bigint
    CHECK (group_rate_count IS NULL OR group_rate_count >= 1);
ALTER TABLE {s}.queues ADD COLUMN group_rate_period double precision
    CHECK (group_rate_period IS NULL OR group_rate_period > 0);
CREATE TABLE {s}.grants (
    queue text NOT NULL,
    grp text,
    expires double precision NOT NULL
);
CREATE INDEX grants_scope ON {s}.grants (queue, grp, expires);
CREATE INDEX grants_expiry ON {s}.grants (queue, expires);
CREATE TABLE {s}.grant_counts (
    queue text NOT NULL,
    grp text NOT NULL,
    n bigint NOT NULL CHECK (n >= 0),
    PRIMARY KEY (queue, grp)
);

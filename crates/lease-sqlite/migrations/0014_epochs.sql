-- Version 14: the store's epoch, in which every claim hands out its fence: the first fence of
-- the epoch (`epoch << 32 | 1`) when the job's fence is below it, else one more
-- (`lease_domain::Fence::next_in`). It grows when the file's history may have lost writes:
-- `lease restore` installs a backup one epoch above both the backup's and the replaced file's,
-- `lease epoch --raise` after a copy the store cannot see, and a migration raises it to its
-- source's. A file made before epochs is at epoch 0 and hands out fences as before. One row.
-- Frozen: a released migration is never edited (its checksum is recorded in lease_migrations
-- and checked at every open). Runs once per file, when it is created or upgraded from an
-- older version.
CREATE TABLE lease_epoch (
    one INTEGER PRIMARY KEY CHECK (one = 1),
    epoch INTEGER NOT NULL CHECK (epoch >= 0 AND epoch <= 2147483647)
);
INSERT INTO lease_epoch(one, epoch) VALUES (1, 0);

-- Version 11: workflows, jobs that run after other jobs. A job waiting for its parents keeps
-- `finished = 'waiting'`: the ready, turn and group indexes, which hold only jobs whose
-- `finished` is NULL, leave it out (claims never read past it), and migration 6's counters
-- count it (so `stats` reads its number). Its parents are rows of `lease_parents`, in the
-- order first named (`ord`), found from the parent by `lease_parents_parent` when the parent
-- finishes; `on_parent_failure` is its policy (`cancel` or `run`), NULL for a job without
-- parents. A job's parent rows go with it when it is deleted; a parent's rows stay when the
-- parent is purged (a purged parent had finished, and counts as done).
-- Frozen: a released migration is never edited (its checksum is recorded in lease_migrations
-- and checked at every open). Runs once per file, when it is created or upgraded from an
-- older version.
ALTER TABLE jobs_queue ADD COLUMN on_parent_failure TEXT
    CHECK (on_parent_failure IS NULL OR on_parent_failure IN ('cancel', 'run'));
CREATE TABLE lease_parents (
    child TEXT NOT NULL,
    parent TEXT NOT NULL,
    ord INTEGER NOT NULL,
    PRIMARY KEY (child, parent)
) WITHOUT ROWID;
CREATE INDEX lease_parents_parent ON lease_parents(parent, child);
CREATE TRIGGER lease_parents_delete AFTER DELETE ON jobs_queue BEGIN
    DELETE FROM lease_parents WHERE child = old.id;
END;

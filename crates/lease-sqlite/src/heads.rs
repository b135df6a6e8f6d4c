//! The groups' heads (migration 15): one row per queue and group with ready jobs, at or before
//! the group's first ready job in claim order. Triggers bring a head forward; a claim that
//! walks by heads reads them ([`first`]) and moves on the heads of the groups it met
//! ([`repair`]); an operator rebuilds and checks them ([`rebuild`], [`check`]).

use lease_domain::{GroupKey, QueueName};
use lease_ports::StoreError;
use lease_ports::next::Head;
use lease_ports::transfer::HeadCheck;
use rusqlite::Connection;

use crate::error;

/// The first heads of a queue's groups (migration 15) in claim order, at most `?2`, leaving
/// out the groups `?3` (a JSON array).
pub(crate) const SELECT_HEADS: &str = "SELECT grp, priority, run_at, seq FROM lease_group_heads \
    WHERE queue = ?1 AND grp NOT IN (SELECT value FROM json_each(?3)) \
    ORDER BY priority DESC, run_at, seq LIMIT +?2";

/// A group's head at its first ready job (unfinished, held by no one) in claim order, if it
/// has one; written only when it moves.
pub(crate) const SET_HEAD: &str = "INSERT INTO lease_group_heads(queue, grp, priority, run_at, seq) \
    SELECT queue, grp, priority, run_at, seq FROM jobs_queue INDEXED BY jobs_queue_turn \
    WHERE queue = ?1 AND grp = ?2 AND finished IS NULL AND leased_until IS NULL \
    ORDER BY priority DESC, run_at, seq LIMIT 1 \
    ON CONFLICT (queue, grp) DO UPDATE SET priority = excluded.priority, \
    run_at = excluded.run_at, seq = excluded.seq \
    WHERE priority IS NOT excluded.priority OR run_at IS NOT excluded.run_at \
    OR seq IS NOT excluded.seq";

/// Removes the head of a group with no ready job.
const DROP_HEAD: &str = "DELETE FROM lease_group_heads WHERE queue = ?1 AND grp = ?2 \
    AND NOT EXISTS (SELECT 1 FROM jobs_queue INDEXED BY jobs_queue_turn \
    WHERE queue = ?1 AND grp = ?2 AND finished IS NULL AND leased_until IS NULL)";

/// Every head at its group's first ready job, from the jobs.
const REBUILD: &str = "DELETE FROM lease_group_heads; \
    INSERT INTO lease_group_heads(queue, grp, priority, run_at, seq) \
    SELECT queue, grp, priority, run_at, seq FROM ( \
        SELECT queue, grp, priority, run_at, seq, row_number() OVER ( \
            PARTITION BY queue, grp ORDER BY priority DESC, run_at, seq) AS n \
        FROM jobs_queue WHERE grp IS NOT NULL AND finished IS NULL AND leased_until IS NULL) \
    WHERE n = 1";

/// The groups with a ready job whose head is missing or after their first ready job.
const STRAY: &str = "SELECT r.queue, r.grp FROM ( \
        SELECT queue, grp, priority, run_at, seq, row_number() OVER ( \
            PARTITION BY queue, grp ORDER BY priority DESC, run_at, seq) AS n \
        FROM jobs_queue WHERE grp IS NOT NULL AND finished IS NULL AND leased_until IS NULL) r \
    LEFT JOIN lease_group_heads h ON h.queue = r.queue AND h.grp = r.grp \
    WHERE r.n = 1 AND (h.grp IS NULL OR NOT (h.priority > r.priority \
        OR (h.priority = r.priority AND (ifnull(h.run_at, -9e999), h.seq) \
            <= (ifnull(r.run_at, -9e999), r.seq)))) \
    ORDER BY r.queue, r.grp";

/// The first `want` heads of `queue`'s groups in claim order, leaving out `skip`.
pub(crate) fn first(
    conn: &Connection,
    queue: &QueueName,
    want: usize,
    skip: &[GroupKey],
) -> Result<Vec<Head>, StoreError> {
    let skip = json_strings(skip.iter().map(GroupKey::as_str));
    let want = i64::try_from(want).unwrap_or(i64::MAX);
    let rows = conn
        .prepare_cached(SELECT_HEADS)
        .and_then(|mut stmt| {
            stmt.query_map(rusqlite::params![queue.as_str(), want, skip], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, Option<f64>>(2)?,
                    r.get::<_, i64>(3)?,
                ))
            })?
            .collect::<Result<Vec<_>, _>>()
        })
        .map_err(error::sql(conn))?;
    rows.into_iter()
        .map(|(group, priority, run_at, seq)| {
            lease_ports::codec::head(group, priority, run_at, seq)
        })
        .collect()
}

/// Texts as a JSON array of strings (for `json_each`).
fn json_strings<'a>(texts: impl Iterator<Item = &'a str>) -> String {
    let mut out = String::from("[");
    for (i, text) in texts.enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push('"');
        for c in text.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
                c => out.push(c),
            }
        }
        out.push('"');
    }
    out.push(']');
    out
}

/// Sets the head of each of `groups` of `queue` to its first ready job (removing it when it
/// has none); says whether it wrote.
pub(crate) fn repair(
    conn: &Connection,
    queue: &QueueName,
    groups: &[GroupKey],
) -> Result<bool, StoreError> {
    let mut wrote = false;
    for group in groups {
        for statement in [SET_HEAD, DROP_HEAD] {
            wrote |= conn
                .prepare_cached(statement)
                .and_then(|mut stmt| stmt.execute([queue.as_str(), group.as_str()]))
                .map_err(error::sql(conn))?
                > 0;
        }
    }
    Ok(wrote)
}

/// Rebuilds every head from the jobs (in the open write transaction).
pub(crate) fn rebuild(conn: &Connection) -> Result<(), StoreError> {
    conn.execute_batch(REBUILD).map_err(error::sql(conn))
}

/// How many heads there are and which groups a claim could pass by.
pub(crate) fn check(conn: &Connection) -> Result<HeadCheck, StoreError> {
    let heads: i64 = conn
        .query_row("SELECT count(*) FROM lease_group_heads", [], |r| r.get(0))
        .map_err(error::sql(conn))?;
    let stray = conn
        .prepare_cached(STRAY)
        .and_then(|mut stmt| {
            stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))?
                .collect::<Result<Vec<_>, _>>()
        })
        .map_err(error::sql(conn))?;
    let stray = stray
        .into_iter()
        .map(|(queue, group)| {
            let queue = QueueName::stored(queue)
                .map_err(|e| StoreError::Corrupt(format!("a head's stored queue: {e}").into()))?;
            let group = GroupKey::stored(group)
                .map_err(|e| StoreError::Corrupt(format!("a head's stored group: {e}").into()))?;
            Ok((queue, group))
        })
        .collect::<Result<_, StoreError>>()?;
    Ok(HeadCheck {
        heads: lease_ports::codec::count(heads, "the group heads")?,
        stray,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connection::open;
    use crate::options::SqliteOptions;

    fn queue() -> QueueName {
        QueueName::new("q").unwrap()
    }

    fn group(name: &str) -> GroupKey {
        GroupKey::new(name).unwrap()
    }

    /// Enqueues `id` into group `grp` of queue `q`, as the store's writes file it.
    fn enqueue(conn: &Connection, id: &str, grp: &str) {
        conn.execute("INSERT INTO jobs(id) VALUES (?1)", [id])
            .unwrap();
        conn.execute(
            "UPDATE jobs_queue SET queue = 'q', grp = ?2 WHERE id = ?1",
            [id, grp],
        )
        .unwrap();
    }

    fn head_seq(conn: &Connection, grp: &str) -> Option<i64> {
        conn.query_row(
            "SELECT seq FROM lease_group_heads WHERE queue = 'q' AND grp = ?1",
            [grp],
            |r| r.get(0),
        )
        .ok()
    }

    fn seq_of(conn: &Connection, id: &str) -> i64 {
        conn.query_row("SELECT seq FROM jobs_queue WHERE id = ?1", [id], |r| {
            r.get(0)
        })
        .unwrap()
    }

    #[test]
    fn heads_follow_writes_a_check_finds_a_stray_one_and_a_rebuild_or_repair_mends_it() {
        let dir = tempfile::tempdir().unwrap();
        let conn = open(&dir.path().join("heads.db"), &SqliteOptions::default())
            .unwrap()
            .conn;
        for (id, grp) in [("a", "g"), ("b", "g"), ("c", "g"), ("x", "h")] {
            enqueue(&conn, id, grp);
        }
        let sound = check(&conn).unwrap();
        assert_eq!((sound.heads, sound.stray.len()), (2, 0));
        assert_eq!(head_seq(&conn, "g"), Some(seq_of(&conn, "a")));

        // A lease leaves the head behind (before the first ready job), which is sound.
        conn.execute(
            "UPDATE jobs_queue SET leased_until = 100 WHERE id = 'a'",
            [],
        )
        .unwrap();
        assert!(check(&conn).unwrap().stray.is_empty());
        assert!(repair(&conn, &queue(), &[group("g")]).unwrap());
        assert_eq!(head_seq(&conn, "g"), Some(seq_of(&conn, "b")));
        // The lease ends and the job is filed again: the head comes back to it.
        conn.execute(
            "UPDATE jobs_queue SET leased_until = NULL WHERE id = 'a'",
            [],
        )
        .unwrap();
        assert_eq!(head_seq(&conn, "g"), Some(seq_of(&conn, "a")));

        // A missing head and one after its group's first ready job are found.
        conn.execute("DELETE FROM lease_group_heads WHERE grp = 'h'", [])
            .unwrap();
        conn.execute("UPDATE lease_group_heads SET seq = 999 WHERE grp = 'g'", [])
            .unwrap();
        let stray = check(&conn).unwrap();
        assert_eq!(stray.heads, 1);
        assert_eq!(stray.stray, [(queue(), group("g")), (queue(), group("h"))]);
        rebuild(&conn).unwrap();
        let rebuilt = check(&conn).unwrap();
        assert_eq!((rebuilt.heads, rebuilt.stray.len()), (2, 0));
        assert_eq!(head_seq(&conn, "g"), Some(seq_of(&conn, "a")));

        // A group with no ready job left loses its head when a claim repairs it.
        conn.execute("UPDATE jobs_queue SET finished = 'done' WHERE id = 'x'", [])
            .unwrap();
        assert!(repair(&conn, &queue(), &[group("h")]).unwrap());
        assert_eq!(head_seq(&conn, "h"), None);
        assert_eq!(check(&conn).unwrap().heads, 1);
    }
}

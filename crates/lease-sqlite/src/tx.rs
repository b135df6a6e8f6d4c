//! The transaction runner: one op in its own `BEGIN IMMEDIATE` transaction, or a batch in
//! one transaction with a savepoint per op; answers only after `COMMIT` returned, and a failed
//! batch commit fails every op of the batch with the kind of its error.

use lease_ports::StoreError;
use rusqlite::Connection;

use crate::error;
use crate::ops::{Op, Reply, apply};

pub(crate) fn run(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([]).map(drop)
}

/// Rolls back whatever is still open; used on every path that does not commit.
pub(crate) fn roll_back(conn: &Connection) {
    if !conn.is_autocommit() {
        // A failed ROLLBACK leaves nothing to do: SQLite has already ended the transaction.
        let _ = run(conn, "ROLLBACK");
    }
}

/// Runs `body` in its own `BEGIN IMMEDIATE` transaction and commits what it wrote; an error
/// rolls everything back. A commit that fails is [`error::at_commit`]'s error.
pub(crate) fn immediate<T>(
    conn: &Connection,
    body: impl FnOnce(&Connection) -> Result<T, StoreError>,
) -> Result<T, StoreError> {
    run(conn, "BEGIN IMMEDIATE").map_err(error::sql(conn))?;
    match body(conn) {
        Ok(value) => match run(conn, "COMMIT") {
            Ok(()) => Ok(value),
            Err(e) => {
                roll_back(conn);
                Err(error::at_commit(e))
            }
        },
        Err(e) => {
            roll_back(conn);
            Err(e)
        }
    }
}

/// Runs one op in its own `BEGIN IMMEDIATE` transaction; one that writes nothing rolls back (no
/// sync).
pub(crate) fn execute(conn: &mut Connection, op: &Op) -> Result<Reply, StoreError> {
    run(conn, "BEGIN IMMEDIATE").map_err(error::sql(conn))?;
    match apply(conn, op) {
        Ok((reply, true)) => match run(conn, "COMMIT") {
            Ok(()) => Ok(reply),
            Err(e) => {
                roll_back(conn);
                Err(error::at_commit(e))
            }
        },
        Ok((reply, false)) => {
            roll_back(conn);
            Ok(reply)
        }
        Err(e) => {
            roll_back(conn);
            Err(e)
        }
    }
}

/// Runs several ops in one `BEGIN IMMEDIATE` transaction, in order; one commit (one sync)
/// covers them all. A failing op leaves the others alone: the batch first runs without
/// savepoints (ops almost never fail: a refusal is an answer, not a failure), and if one op
/// fails the transaction is rolled back and the batch runs again with a savepoint per op.
///
/// If the transaction cannot begin or commit, or SQLite ends it early, every op of the batch
/// fails: none of them is applied (or, for a failed commit, the outcome is unknown).
pub(crate) fn execute_batch(conn: &mut Connection, batch: &[Op]) -> Vec<Result<Reply, StoreError>> {
    if let [op] = batch {
        return vec![execute(conn, op)];
    }
    if let Some(results) = execute_without_savepoints(conn, batch) {
        return results;
    }
    execute_with_savepoints(conn, batch)
}

/// The fast path of [`execute_batch`]: every op in one transaction with no savepoint. `None`
/// when an op failed (the transaction is then rolled back: nothing of the batch stands).
fn execute_without_savepoints(
    conn: &mut Connection,
    batch: &[Op],
) -> Option<Vec<Result<Reply, StoreError>>> {
    if run(conn, "BEGIN IMMEDIATE").is_err() {
        // The batch with savepoints meets the same failure and answers it.
        return None;
    }
    let mut replies = Vec::with_capacity(batch.len());
    let mut wrote = false;
    for op in batch {
        match apply(conn, op) {
            Ok((reply, did_write)) => {
                wrote |= did_write;
                replies.push(Ok(reply));
            }
            Err(_) => {
                roll_back(conn);
                return None;
            }
        }
    }
    Some(finish(conn, batch, replies, wrote))
}

/// Commits a batch's transaction (or rolls it back when nothing was written) and gives each op
/// its answer; a failed commit fails every op with its kind.
fn finish(
    conn: &mut Connection,
    batch: &[Op],
    results: Vec<Result<Reply, StoreError>>,
    wrote: bool,
) -> Vec<Result<Reply, StoreError>> {
    if !wrote {
        roll_back(conn);
        return results;
    }
    match run(conn, "COMMIT") {
        Ok(()) => results,
        Err(e) => {
            roll_back(conn);
            let err = error::at_commit(e);
            batch
                .iter()
                .map(|_| Err(batch_error(&err, "the batch's commit failed")))
                .collect()
        }
    }
}

/// The batch with a savepoint per op, so that a failing op leaves the others alone.
fn execute_with_savepoints(conn: &mut Connection, batch: &[Op]) -> Vec<Result<Reply, StoreError>> {
    let fail_all = |err: &StoreError, why: &str| -> Vec<Result<Reply, StoreError>> {
        batch.iter().map(|_| Err(batch_error(err, why))).collect()
    };
    if let Err(e) = run(conn, "BEGIN IMMEDIATE") {
        return fail_all(&error::sql(conn)(e), "the batch could not begin");
    }
    let mut results = Vec::with_capacity(batch.len());
    let mut wrote = false;
    for op in batch {
        let attempt = run(conn, "SAVEPOINT op")
            .map_err(error::sql(conn))
            .and_then(|()| apply(conn, op));
        match attempt {
            Ok((reply, did_write)) => {
                wrote |= did_write;
                results.push(
                    run(conn, "RELEASE op")
                        .map(|()| reply)
                        .map_err(error::sql(conn)),
                );
            }
            Err(e) => {
                if conn.is_autocommit() {
                    // SQLite rolled the whole transaction back (a full disk, say): nothing stands.
                    return fail_all(&e, "the batch was rolled back");
                }
                let _ = run(conn, "ROLLBACK TO op").and_then(|()| run(conn, "RELEASE op"));
                results.push(Err(e));
            }
        }
    }
    finish(conn, batch, results, wrote)
}

/// The error every op of a failed batch gets: it keeps the kind (so "not applied" stays
/// determinate and an unknown commit stays indeterminate) and says what happened.
pub(crate) fn batch_error(err: &StoreError, why: &str) -> StoreError {
    let message = if err.is_determinate() {
        format!("{why}, so this write was not applied: {err}")
    } else {
        format!("{why}: {err}")
    };
    err.retold(|d| d.retold(message.as_str()))
        .unwrap_or_else(|| StoreError::Unavailable(message.into()))
}

/// Runs `body` in a read transaction, so that a multi-row read sees one snapshot.
pub(crate) fn reading<T>(
    conn: &Connection,
    body: impl FnOnce(&Connection) -> Result<T, StoreError>,
) -> Result<T, StoreError> {
    run(conn, "BEGIN").map_err(error::sql(conn))?;
    let result = body(conn);
    roll_back(conn);
    result
}

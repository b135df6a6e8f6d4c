//! The store operations over one connection. Every write is a `lease_domain::Command`: inside a
//! `BEGIN IMMEDIATE` transaction the job is loaded, the command decides, the decision is stored,
//! and the transaction commits before anyone is answered. A batch runs several commands in one
//! transaction, each inside its own savepoint.

use lease_domain::{Command, Fence, Job, JobId, Outcome, Owner, Timestamp};
use lease_ports::{JobState, StoreError};
use rusqlite::Connection;
use rusqlite::types::ValueRef;

use crate::error;

/// Loads one job.
pub const SELECT_JOB: &str = "SELECT owner, until, fence, result, done FROM jobs WHERE id = ?1";
/// Stores a decided job over its row.
pub const UPDATE_JOB: &str =
    "UPDATE jobs SET owner = ?2, until = ?3, fence = ?4, result = ?5, done = ?6 WHERE id = ?1";
/// Stores a decided job that had no row.
pub const INSERT_JOB: &str =
    "INSERT INTO jobs(id, owner, until, fence, result, done) VALUES (?1, ?2, ?3, ?4, ?5, ?6)";

fn corrupt(id: &JobId, what: String) -> StoreError {
    StoreError::Corrupt(format!("job {id}: {what}"))
}

/// Reads one column as text, or NULL; anything else (a number, a blob, text that is not UTF-8)
/// is corrupt data that names the job and the column.
fn text(
    id: &JobId,
    row: &rusqlite::Row<'_>,
    column: &'static str,
) -> Result<Option<String>, StoreError> {
    match row.get_ref(column).map_err(error::before_commit)? {
        ValueRef::Null => Ok(None),
        ValueRef::Text(bytes) => String::from_utf8(bytes.to_vec())
            .map(Some)
            .map_err(|e| corrupt(id, format!("stored {column} is not valid UTF-8 text ({e})"))),
        other => Err(corrupt(
            id,
            format!("stored {column} is {:?}, not text", other.data_type()),
        )),
    }
}

/// Reads one numeric column; `until` may be stored as an integer (`DEFAULT 0`).
fn number(id: &JobId, row: &rusqlite::Row<'_>, column: &'static str) -> Result<f64, StoreError> {
    match row.get_ref(column).map_err(error::before_commit)? {
        ValueRef::Real(x) => Ok(x),
        ValueRef::Integer(n) => {
            // Integers of up to 2^53 convert exactly; a larger stored `until` is still a time.
            #[allow(clippy::cast_precision_loss)]
            Ok(n as f64)
        }
        other => Err(corrupt(
            id,
            format!("stored {column} is {:?}, not a number", other.data_type()),
        )),
    }
}

fn integer(id: &JobId, row: &rusqlite::Row<'_>, column: &'static str) -> Result<i64, StoreError> {
    match row.get_ref(column).map_err(error::before_commit)? {
        ValueRef::Integer(n) => Ok(n),
        other => Err(corrupt(
            id,
            format!("stored {column} is {:?}, not an integer", other.data_type()),
        )),
    }
}

/// Turns a stored row into a job, refusing values no lease rule could have written.
fn decode(id: &JobId, row: &rusqlite::Row<'_>) -> Result<Job, StoreError> {
    let owner = text(id, row, "owner")?
        .map(Owner::new)
        .transpose()
        .map_err(|e| corrupt(id, format!("stored owner: {e}")))?;
    let until = number(id, row, "until")?;
    let until = Timestamp::new(until)
        .map_err(|_| corrupt(id, format!("stored until {until} is not finite")))?;
    let fence = Fence::try_from(integer(id, row, "fence")?)
        .map_err(|f| corrupt(id, format!("stored fence {f} is negative")))?;
    let result = text(id, row, "result")?;
    let done = match integer(id, row, "done")? {
        0 => false,
        1 => true,
        other => {
            return Err(corrupt(
                id,
                format!("stored done {other} is neither 0 nor 1"),
            ));
        }
    };
    Ok(Job {
        owner,
        until,
        fence,
        result,
        done,
    })
}

fn load(conn: &Connection, id: &JobId) -> Result<Option<Job>, StoreError> {
    let mut stmt = conn.prepare_cached(SELECT_JOB).map_err(error::sql(conn))?;
    let mut rows = stmt.query([id.as_str()]).map_err(error::sql(conn))?;
    match rows.next().map_err(error::sql(conn))? {
        Some(row) => decode(id, row).map(Some),
        None => Ok(None),
    }
}

fn store(conn: &Connection, sql: &str, id: &JobId, job: &Job) -> Result<(), StoreError> {
    conn.prepare_cached(sql)
        .and_then(|mut stmt| {
            stmt.execute(rusqlite::params![
                id.as_str(),
                job.owner.as_ref().map(Owner::as_str),
                job.until.get(),
                i64::from(job.fence),
                job.result.as_deref(),
                job.done,
            ])
        })
        .map_err(error::sql(conn))?;
    Ok(())
}

/// Loads, decides and stores one command inside the open transaction; says whether it wrote.
fn apply(conn: &Connection, id: &JobId, command: &Command) -> Result<(Outcome, bool), StoreError> {
    let current = load(conn, id)?;
    let (next, outcome) = command.decide(current.as_ref());
    let Some(next) = next else {
        return Ok((outcome, false));
    };
    let sql = if current.is_some() {
        UPDATE_JOB
    } else {
        INSERT_JOB
    };
    store(conn, sql, id, &next)?;
    Ok((outcome, true))
}

fn run(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([]).map(drop)
}

/// Rolls back whatever is still open; used on every path that does not commit.
fn roll_back(conn: &Connection) {
    if !conn.is_autocommit() {
        // A failed ROLLBACK leaves nothing to do: SQLite has already ended the transaction.
        let _ = run(conn, "ROLLBACK");
    }
}

/// Runs one command in its own `BEGIN IMMEDIATE` transaction; a refusal rolls back (no sync).
pub(crate) fn execute(
    conn: &mut Connection,
    id: &JobId,
    command: &Command,
) -> Result<Outcome, StoreError> {
    run(conn, "BEGIN IMMEDIATE").map_err(error::sql(conn))?;
    match apply(conn, id, command) {
        Ok((outcome, true)) => match run(conn, "COMMIT") {
            Ok(()) => Ok(outcome),
            Err(e) => {
                roll_back(conn);
                Err(error::at_commit(e))
            }
        },
        Ok((outcome, false)) => {
            roll_back(conn);
            Ok(outcome)
        }
        Err(e) => {
            roll_back(conn);
            Err(e)
        }
    }
}

/// Runs several commands in one `BEGIN IMMEDIATE` transaction, in order, each in its own
/// savepoint so a failing one leaves the others alone; one commit (one sync) covers them all.
///
/// If the transaction cannot begin or commit, or SQLite ends it early, every command of the
/// batch fails: none of them is applied (or, for a failed commit, the outcome is unknown).
pub(crate) fn execute_batch(
    conn: &mut Connection,
    batch: &[(JobId, Command)],
) -> Vec<Result<Outcome, StoreError>> {
    if let [(id, command)] = batch {
        return vec![execute(conn, id, command)];
    }
    let fail_all = |err: &StoreError, why: &str| -> Vec<Result<Outcome, StoreError>> {
        batch.iter().map(|_| Err(batch_error(err, why))).collect()
    };
    if let Err(e) = run(conn, "BEGIN IMMEDIATE") {
        return fail_all(&error::sql(conn)(e), "the batch could not begin");
    }
    let mut results = Vec::with_capacity(batch.len());
    let mut wrote = false;
    for (id, command) in batch {
        let attempt = run(conn, "SAVEPOINT op")
            .map_err(error::sql(conn))
            .and_then(|()| apply(conn, id, command));
        match attempt {
            Ok((outcome, did_write)) => {
                wrote |= did_write;
                results.push(
                    run(conn, "RELEASE op")
                        .map(|()| outcome)
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
    if !wrote {
        roll_back(conn);
        return results;
    }
    match run(conn, "COMMIT") {
        Ok(()) => results,
        Err(e) => {
            roll_back(conn);
            fail_all(&error::at_commit(e), "the batch's commit failed")
        }
    }
}

/// The error every command of a failed batch gets: it keeps the kind (so "not applied" stays
/// determinate and an unknown commit stays indeterminate) and says what happened.
pub(crate) fn batch_error(err: &StoreError, why: &str) -> StoreError {
    let message = if err.is_determinate() {
        format!("{why}, so this write was not applied: {err}")
    } else {
        format!("{why}: {err}")
    };
    match err {
        StoreError::Full(_) => StoreError::Full(message),
        StoreError::ReadOnly(_) => StoreError::ReadOnly(message),
        StoreError::Corrupt(_) => StoreError::Corrupt(message),
        StoreError::Indeterminate(_) => StoreError::Indeterminate(message),
        _ => StoreError::Unavailable(message),
    }
}

pub(crate) fn state(conn: &Connection, id: &JobId) -> Result<Option<JobState>, StoreError> {
    Ok(load(conn, id)?.map(|job| JobState::new(id, job)))
}

#[cfg(test)]
mod tests {
    use lease_domain::{ClaimRefused, LeaseTerm};

    use super::*;
    use crate::connection::{SqliteOptions, open};

    fn fresh(dir: &tempfile::TempDir, options: &SqliteOptions) -> Connection {
        open(&dir.path().join("batch.db"), options).unwrap().conn
    }

    fn claim(owner: &str) -> Command {
        Command::Claim(
            Owner::new(owner).unwrap(),
            LeaseTerm::new(0.0, 10.0).unwrap(),
        )
    }

    fn id(name: &str) -> JobId {
        JobId::new(name).unwrap()
    }

    #[test]
    fn a_failed_batch_keeps_the_kind_of_its_error_for_every_command() {
        let kinds = [
            StoreError::Full("x".into()),
            StoreError::ReadOnly("x".into()),
            StoreError::Corrupt("x".into()),
            StoreError::Indeterminate("x".into()),
            StoreError::Unavailable("x".into()),
        ];
        for kind in kinds {
            let batch = batch_error(&kind, "the batch's commit failed");
            assert_eq!(
                std::mem::discriminant(&batch),
                std::mem::discriminant(&kind),
                "{kind:?} became {batch:?}"
            );
            assert_eq!(batch.is_determinate(), kind.is_determinate());
            assert!(
                batch.to_string().contains("the batch's commit failed"),
                "{batch}"
            );
        }
    }

    #[test]
    fn a_batch_decides_in_order_and_later_commands_see_earlier_writes() {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = fresh(&dir, &SqliteOptions::default());
        let batch = [
            (id("j"), Command::Enqueue),
            (id("j"), claim("a")),
            (id("j"), claim("b")),
            (id("j"), Command::Enqueue),
        ];
        let answers: Vec<Outcome> = execute_batch(&mut conn, &batch)
            .into_iter()
            .map(Result::unwrap)
            .collect();
        assert_eq!(answers[0], Outcome::Enqueued(true));
        assert_eq!(answers[1], Outcome::Claimed(Ok(Fence::new(1).unwrap())));
        assert!(matches!(
            answers[2],
            Outcome::Claimed(Err(ClaimRefused::Live { .. }))
        ));
        assert_eq!(answers[3], Outcome::Enqueued(false));
        assert_eq!(
            state(&conn, &id("j")).unwrap().unwrap().owner.as_deref(),
            Some("a")
        );
    }

    #[test]
    fn a_failing_command_leaves_the_rest_of_its_batch_alone() {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = fresh(&dir, &SqliteOptions::default());
        conn.execute_batch("INSERT INTO jobs(id) VALUES ('a'), ('b'); INSERT INTO jobs(id, fence) VALUES ('bad', -1);")
            .unwrap();
        let batch = [
            (id("a"), claim("w")),
            (id("bad"), claim("w")),
            (id("b"), claim("w")),
        ];
        let answers = execute_batch(&mut conn, &batch);
        assert!(matches!(answers[0], Ok(Outcome::Claimed(Ok(_)))));
        assert!(
            matches!(answers[1], Err(StoreError::Corrupt(_))),
            "{:?}",
            answers[1]
        );
        assert!(matches!(answers[2], Ok(Outcome::Claimed(Ok(_)))));
        assert_eq!(state(&conn, &id("a")).unwrap().unwrap().fence, 1);
        assert_eq!(state(&conn, &id("b")).unwrap().unwrap().fence, 1);
        let bad: i64 = conn
            .query_row("SELECT fence FROM jobs WHERE id = 'bad'", [], |r| r.get(0))
            .unwrap();
        assert_eq!(bad, -1);
    }

    #[test]
    fn when_the_disk_fills_mid_batch_every_answer_matches_what_is_stored() {
        let dir = tempfile::tempdir().unwrap();
        let options = SqliteOptions {
            max_pages: Some(6),
            ..SqliteOptions::default()
        };
        let mut conn = fresh(&dir, &options);
        // Small and large enqueues alternate; the large ones run out of pages.
        let batch: Vec<(JobId, Command)> = (0..40)
            .map(|i| {
                (
                    id(&format!(
                        "{i:02}-{}",
                        "x".repeat(if i % 2 == 0 { 1 } else { 3000 })
                    )),
                    Command::Enqueue,
                )
            })
            .collect();
        let answers = execute_batch(&mut conn, &batch);
        let failures = answers.iter().filter(|a| a.is_err()).count();
        assert!(failures > 0, "the cap never bit");
        for ((job, _), answer) in batch.iter().zip(&answers) {
            let stored = state(&conn, job).unwrap().is_some();
            match answer {
                Ok(Outcome::Enqueued(true)) => assert!(stored, "{job} acknowledged but not stored"),
                Err(e) => {
                    assert!(matches!(e, StoreError::Full(_)), "{e}");
                    assert!(!stored, "{job} failed but was stored");
                }
                other => panic!("unexpected {other:?}"),
            }
        }
    }
}

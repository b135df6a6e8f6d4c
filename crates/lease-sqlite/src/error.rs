//! How rusqlite and r2d2 failures map onto the port's portable error kinds.

use lease_ports::{Detail, StoreError};
use rusqlite::{Connection, ErrorCode};

/// `ENOSPC` and `EDQUOT` on Linux: the file system (or the user's quota) is out of space.
const OUT_OF_SPACE: [i32; 2] = [28, 122];

/// The `errno` of the last failed system call SQLite made for this connection.
#[allow(unsafe_code)]
fn system_errno(conn: &Connection) -> i32 {
    // SAFETY: `handle` is the live `sqlite3*` owned by `conn`, which outlives this call;
    // `sqlite3_system_errno` only reads a field of it and is safe to call at any time.
    unsafe { rusqlite::ffi::sqlite3_system_errno(conn.handle()) }
}

/// Maps an error from any statement before `COMMIT`: the transaction did not commit,
/// so every kind here is determinate.
///
/// Prefer [`sql`], which also tells a full file system apart from other I/O errors.
pub(crate) fn before_commit(err: rusqlite::Error) -> StoreError {
    type Kind = fn(Detail) -> StoreError;
    let (kind, message): (Kind, String) = match &err {
        rusqlite::Error::SqliteFailure(failure, _) => match failure.code {
            // SQLite gives up on a lock either when its busy timeout passes or, to avoid a
            // deadlock, at once; the message says which lock, not how long it waited.
            ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked => (
                StoreError::Unavailable,
                format!("the database is locked by another connection: {err}"),
            ),
            ErrorCode::DiskFull => (StoreError::Full, err.to_string()),
            ErrorCode::ReadOnly => (StoreError::ReadOnly, err.to_string()),
            ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase => {
                (StoreError::Corrupt, err.to_string())
            }
            _ => (StoreError::Unavailable, err.to_string()),
        },
        rusqlite::Error::FromSqlConversionFailure(..)
        | rusqlite::Error::IntegralValueOutOfRange(..)
        | rusqlite::Error::InvalidColumnType(..)
        | rusqlite::Error::Utf8Error(..) => (
            StoreError::Corrupt,
            format!("a stored value has the wrong type: {err}"),
        ),
        _ => (StoreError::Unavailable, err.to_string()),
    };
    kind(Detail::caused_by(message, err))
}

/// Whether SQLite reported an I/O or open failure whose system error was "no space left":
/// growing the `-shm` file or the WAL on a full file system fails as an I/O error, not as
/// `SQLITE_FULL`.
fn out_of_space(conn: &Connection, err: &rusqlite::Error) -> bool {
    matches!(
        err,
        rusqlite::Error::SqliteFailure(f, _)
            if matches!(f.code, ErrorCode::SystemIoFailure | ErrorCode::CannotOpen)
    ) && OUT_OF_SPACE.contains(&system_errno(conn))
}

/// [`before_commit`] for errors of statements on `conn`, reading the system error that SQLite
/// saw so that a full file system is [`StoreError::Full`]. Call it right after the failure.
pub(crate) fn sql(conn: &Connection) -> impl Fn(rusqlite::Error) -> StoreError + '_ {
    move |err| {
        if out_of_space(conn, &err) {
            StoreError::Full(Detail::caused_by(
                format!("{err}: no space left on the file system"),
                err,
            ))
        } else {
            before_commit(err)
        }
    }
}

/// Maps an error from `COMMIT` itself. A full disk or a lock means SQLite did not commit;
/// anything else (an I/O error while syncing, say) leaves the outcome unknown.
pub(crate) fn at_commit(err: rusqlite::Error) -> StoreError {
    match &err {
        rusqlite::Error::SqliteFailure(failure, _)
            if matches!(
                failure.code,
                ErrorCode::DiskFull | ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked
            ) =>
        {
            before_commit(err)
        }
        _ => StoreError::Indeterminate(Detail::caused_by(format!("commit failed: {err}"), err)),
    }
}

/// Maps a failure to get a pooled connection.
pub(crate) fn pool(err: r2d2::Error) -> StoreError {
    StoreError::Unavailable(Detail::caused_by(
        format!("no database connection: {err}"),
        err,
    ))
}

/// A failure while opening or preparing a database: a lock held by another opener, which is
/// worth trying again until the busy timeout, or a final answer.
#[derive(Debug)]
pub(crate) enum OpenError {
    /// SQLite returned `SQLITE_BUSY` or `SQLITE_LOCKED` (sometimes at once, without waiting).
    Busy(rusqlite::Error),
    /// Any other failure.
    Fail(StoreError),
}

impl From<StoreError> for OpenError {
    fn from(err: StoreError) -> Self {
        OpenError::Fail(err)
    }
}

/// [`sql`] for the steps of opening: a busy database stays retryable.
pub(crate) fn open_step(conn: &Connection) -> impl Fn(rusqlite::Error) -> OpenError + '_ {
    move |err| match &err {
        rusqlite::Error::SqliteFailure(f, _)
            if matches!(f.code, ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) =>
        {
            OpenError::Busy(err)
        }
        _ => OpenError::Fail(sql(conn)(err)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sqlite_error_stays_as_the_source() {
        let conn = Connection::open_in_memory().expect("memory database");
        let err = conn
            .execute("SELECT * FROM nowhere", [])
            .expect_err("no such table");
        let text = err.to_string();
        let mapped = sql(&conn)(err);
        assert!(matches!(mapped, StoreError::Unavailable(_)), "{mapped}");
        assert!(
            mapped.to_string().ends_with(&text),
            "the message is unchanged"
        );
        let source = std::error::Error::source(&mapped).map(ToString::to_string);
        assert_eq!(source, Some(text));
    }

    fn failure(code: i32) -> rusqlite::Error {
        rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(code), None)
    }

    #[test]
    fn a_lock_is_named_as_such_without_claiming_how_long_it_waited() {
        let err = before_commit(failure(rusqlite::ffi::SQLITE_BUSY));
        assert!(matches!(err, StoreError::Unavailable(_)), "{err}");
        assert!(
            err.to_string().contains("locked by another connection"),
            "{err}"
        );
        assert!(!err.to_string().contains("past the busy timeout"), "{err}");
    }

    #[test]
    fn each_sqlite_failure_maps_to_its_kind() {
        use rusqlite::ffi;
        type Expected = fn(&StoreError) -> bool;
        let cases: [(i32, Expected); 6] = [
            (ffi::SQLITE_FULL, |e| matches!(e, StoreError::Full(_))),
            (ffi::SQLITE_READONLY, |e| {
                matches!(e, StoreError::ReadOnly(_))
            }),
            (ffi::SQLITE_CORRUPT, |e| matches!(e, StoreError::Corrupt(_))),
            (ffi::SQLITE_NOTADB, |e| matches!(e, StoreError::Corrupt(_))),
            (ffi::SQLITE_LOCKED, |e| {
                matches!(e, StoreError::Unavailable(_))
            }),
            (ffi::SQLITE_IOERR, |e| {
                matches!(e, StoreError::Unavailable(_))
            }),
        ];
        for (code, expected) in cases {
            let err = before_commit(failure(code));
            assert!(expected(&err), "code {code}: {err}");
        }
    }

    #[test]
    fn a_commit_that_failed_for_space_or_a_lock_did_not_happen_and_any_other_is_unknown() {
        use rusqlite::ffi;
        assert!(matches!(
            at_commit(failure(ffi::SQLITE_FULL)),
            StoreError::Full(_)
        ));
        assert!(matches!(
            at_commit(failure(ffi::SQLITE_BUSY)),
            StoreError::Unavailable(_)
        ));
        assert!(matches!(
            at_commit(failure(ffi::SQLITE_LOCKED)),
            StoreError::Unavailable(_)
        ));
        let unknown = at_commit(failure(ffi::SQLITE_IOERR));
        assert!(matches!(unknown, StoreError::Indeterminate(_)), "{unknown}");
        assert!(!unknown.is_determinate());
    }

    #[test]
    fn only_a_lock_is_worth_retrying_while_opening() {
        let conn = Connection::open_in_memory().unwrap();
        let step = open_step(&conn);
        assert!(matches!(
            step(failure(rusqlite::ffi::SQLITE_BUSY)),
            OpenError::Busy(_)
        ));
        assert!(matches!(
            step(failure(rusqlite::ffi::SQLITE_LOCKED)),
            OpenError::Busy(_)
        ));
        assert!(matches!(
            step(failure(rusqlite::ffi::SQLITE_CORRUPT)),
            OpenError::Fail(StoreError::Corrupt(_))
        ));
    }

    #[test]
    fn an_io_error_that_is_not_out_of_space_is_not_full() {
        let conn = Connection::open_in_memory().unwrap();
        // Opening a file in a missing directory fails with CANTOPEN and errno ENOENT.
        let err = conn
            .execute_batch("ATTACH '/no/such/directory/x.db' AS other")
            .unwrap_err();
        let mapped = sql(&conn)(err);
        assert!(matches!(mapped, StoreError::Unavailable(_)), "{mapped}");
    }

    #[test]
    fn invalid_utf8_in_a_stored_value_is_corrupt_data() {
        let bad = String::from_utf8(vec![0xc3, 0x28])
            .unwrap_err()
            .utf8_error();
        assert!(matches!(
            before_commit(rusqlite::Error::Utf8Error(0, bad)),
            StoreError::Corrupt(_)
        ));
    }
}

//! How rusqlite and r2d2 failures map onto the port's portable error kinds.

use lease_ports::StoreError;
use rusqlite::ErrorCode;

/// Maps an error from any statement before `COMMIT`: the transaction did not commit,
/// so every kind here is determinate.
pub(crate) fn before_commit(err: rusqlite::Error) -> StoreError {
    match &err {
        rusqlite::Error::SqliteFailure(failure, _) => match failure.code {
            ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked => StoreError::Unavailable(
                format!("database stayed locked past the busy timeout: {err}"),
            ),
            ErrorCode::DiskFull => StoreError::Full(err.to_string()),
            ErrorCode::ReadOnly => StoreError::ReadOnly(err.to_string()),
            ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase => {
                StoreError::Corrupt(err.to_string())
            }
            _ => StoreError::Unavailable(err.to_string()),
        },
        rusqlite::Error::FromSqlConversionFailure(..)
        | rusqlite::Error::IntegralValueOutOfRange(..)
        | rusqlite::Error::InvalidColumnType(..) => {
            StoreError::Corrupt(format!("a stored value has the wrong type: {err}"))
        }
        _ => StoreError::Unavailable(err.to_string()),
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
        _ => StoreError::Indeterminate(format!("commit failed: {err}")),
    }
}

/// Maps a failure to get a pooled connection.
pub(crate) fn pool(err: &r2d2::Error) -> StoreError {
    StoreError::Unavailable(format!("no database connection: {err}"))
}

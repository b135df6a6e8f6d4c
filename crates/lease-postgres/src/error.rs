//! PostgreSQL failures as the port's error kinds. What matters most is whether the server can
//! have committed: only a failure that can hide the answer to a COMMIT is `Indeterminate`.

use lease_ports::{Detail, StoreError};
use tokio_postgres::error::SqlState;

/// Where in a transaction a failure happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stage {
    /// Before COMMIT was sent: nothing can have been applied.
    BeforeCommit,
    /// COMMIT was sent (or pipelined with the failed statement): only a server that answered
    /// with an ordinary error is known to have rolled back.
    Commit,
}

/// Whether the error is the connection itself failing (closed, I/O, the server terminating
/// the session) rather than the server answering a statement with an error.
pub(crate) fn is_connection_loss(error: &tokio_postgres::Error) -> bool {
    if error.is_closed() {
        return true;
    }
    match error.as_db_error() {
        // An answer from the server: only a FATAL or PANIC one (or an operator intervention
        // or connection failure class) ends the session.
        Some(db) => {
            let code = db.code().code();
            matches!(db.severity(), "FATAL" | "PANIC")
                || code.starts_with("57")
                || code.starts_with("08")
        }
        // No server answer at all: I/O, a protocol failure, a timeout.
        None => true,
    }
}

/// Maps a failure at `stage` to the port's kinds.
pub(crate) fn map(error: tokio_postgres::Error, stage: Stage) -> StoreError {
    let text = describe(&error);
    type Kind = fn(Detail) -> StoreError;
    let (kind, message): (Kind, String) = if is_connection_loss(&error) {
        match stage {
            Stage::BeforeCommit => (
                StoreError::Unavailable,
                format!(
                    "the connection to PostgreSQL failed before commit, nothing was applied: {text}"
                ),
            ),
            Stage::Commit => (
                StoreError::Indeterminate,
                format!("the connection to PostgreSQL failed while committing: {text}"),
            ),
        }
    } else {
        match error.code() {
            Some(code) if *code == SqlState::DISK_FULL => (StoreError::Full, text),
            Some(code) if *code == SqlState::READ_ONLY_SQL_TRANSACTION => {
                (StoreError::ReadOnly, text)
            }
            Some(code)
                if *code == SqlState::CHECK_VIOLATION || *code == SqlState::NOT_NULL_VIOLATION =>
            {
                (StoreError::Corrupt, text)
            }
            Some(code)
                if *code == SqlState::UNDEFINED_TABLE || *code == SqlState::INVALID_SCHEMA_NAME =>
            {
                return StoreError::Incompatible {
                    path: "the PostgreSQL database".to_owned(),
                    reason: format!("the lease tables are gone ({text})"),
                };
            }
            _ => (StoreError::Unavailable, text),
        }
    };
    kind(Detail::caused_by(message, error))
}

/// The error's text with the server's message, code and detail when there is one.
pub(crate) fn describe(error: &tokio_postgres::Error) -> String {
    match error.as_db_error() {
        Some(db) => {
            let mut text = format!("{} ({})", db.message(), db.code().code());
            if let Some(detail) = db.detail() {
                text.push_str(": ");
                text.push_str(detail);
            }
            text
        }
        None => {
            let mut text = error.to_string();
            let mut source = std::error::Error::source(error);
            while let Some(s) = source {
                text.push_str(": ");
                text.push_str(&s.to_string());
                source = s.source();
            }
            text
        }
    }
}

/// Maps a failure to get a pooled connection (nothing was sent, so never indeterminate).
pub(crate) fn pool(error: deadpool_postgres::PoolError, target: &str) -> StoreError {
    use deadpool_postgres::PoolError;
    match error {
        PoolError::Backend(e) => {
            if e.code() == Some(&SqlState::INVALID_CATALOG_NAME) {
                return StoreError::NoSuchDatabase {
                    path: target.to_owned(),
                    reason: describe(&e),
                };
            }
            StoreError::Unavailable(Detail::caused_by(
                format!("cannot connect to {target}: {}", describe(&e)),
                e,
            ))
        }
        PoolError::Timeout(deadpool_postgres::TimeoutType::Create) => StoreError::Unavailable(
            format!(
                "no connection to {target} within the connect timeout (connect_timeout in the \
                 target, or PGCONNECT_TIMEOUT; 10 s when neither is set)"
            )
            .into(),
        ),
        PoolError::Timeout(kind) => StoreError::Unavailable(
            format!("no connection to {target} in time ({kind:?} timeout)").into(),
        ),
        PoolError::PostCreateHook(e) => StoreError::Unavailable(
            format!("a new connection to {target} could not be set up: {e}").into(),
        ),
        other => StoreError::Unavailable(format!("connection pool for {target}: {other}").into()),
    }
}

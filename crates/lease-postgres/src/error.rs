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
    let answer = error
        .as_db_error()
        .map(|db| (db.severity(), db.code().code()));
    ends_session(error.is_closed(), answer)
}

/// [`is_connection_loss`]'s rule: a closed connection, no answer from the server at all (I/O,
/// a protocol failure, a timeout), or an answer that ends the session (FATAL or PANIC, or the
/// operator intervention or connection exception classes, `57` and `08`).
fn ends_session(closed: bool, answer: Option<(&str, &str)>) -> bool {
    match answer {
        _ if closed => true,
        Some((severity, code)) => {
            matches!(severity, "FATAL" | "PANIC")
                || code.starts_with("57")
                || code.starts_with("08")
        }
        None => true,
    }
}

/// What a failure amounts to, before its text is attached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Unavailable,
    Indeterminate,
    Full,
    ReadOnly,
    Corrupt,
    TablesGone,
}

/// The kind of a failure at `stage`: a lost connection is unavailable before COMMIT and
/// unknown during it; otherwise the server's SQLSTATE decides.
fn kind_of(lost: bool, code: Option<&SqlState>, stage: Stage) -> Kind {
    if lost {
        return match stage {
            Stage::BeforeCommit => Kind::Unavailable,
            Stage::Commit => Kind::Indeterminate,
        };
    }
    match code {
        Some(code) if *code == SqlState::DISK_FULL => Kind::Full,
        Some(code) if *code == SqlState::READ_ONLY_SQL_TRANSACTION => Kind::ReadOnly,
        Some(code)
            if *code == SqlState::CHECK_VIOLATION || *code == SqlState::NOT_NULL_VIOLATION =>
        {
            Kind::Corrupt
        }
        Some(code)
            if *code == SqlState::UNDEFINED_TABLE || *code == SqlState::INVALID_SCHEMA_NAME =>
        {
            Kind::TablesGone
        }
        _ => Kind::Unavailable,
    }
}

/// Maps a failure at `stage` to the port's kinds.
pub(crate) fn map(error: tokio_postgres::Error, stage: Stage) -> StoreError {
    let text = describe(&error);
    let lost = is_connection_loss(&error);
    let kind = kind_of(lost, error.code(), stage);
    let detail = |message: String| Detail::caused_by(message, error);
    match kind {
        Kind::Unavailable if lost => StoreError::Unavailable(detail(format!(
            "the connection to PostgreSQL failed before commit, nothing was applied: {text}"
        ))),
        Kind::Indeterminate => StoreError::Indeterminate(detail(format!(
            "the connection to PostgreSQL failed while committing: {text}"
        ))),
        Kind::Unavailable => StoreError::Unavailable(detail(text)),
        Kind::Full => StoreError::Full(detail(text)),
        Kind::ReadOnly => StoreError::ReadOnly(detail(text)),
        Kind::Corrupt => StoreError::Corrupt(detail(text)),
        Kind::TablesGone => StoreError::Incompatible {
            path: "the PostgreSQL database".to_owned(),
            reason: detail(format!("the lease tables are gone ({text})")),
        },
    }
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
                    reason: Detail::caused_by(describe(&e), e),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_closed_connection_no_answer_or_a_session_ending_answer_is_a_lost_connection() {
        assert!(ends_session(true, Some(("ERROR", "23514"))));
        assert!(ends_session(false, None));
        for (severity, code) in [
            ("FATAL", "XX000"),
            ("PANIC", "XX000"),
            ("ERROR", "57P01"),
            ("ERROR", "08006"),
        ] {
            assert!(
                ends_session(false, Some((severity, code))),
                "{severity} {code}"
            );
        }
        for (severity, code) in [("ERROR", "23514"), ("ERROR", "40001"), ("ERROR", "53100")] {
            assert!(
                !ends_session(false, Some((severity, code))),
                "{severity} {code}"
            );
        }
    }

    #[test]
    fn each_failure_maps_to_its_kind() {
        use Stage::{BeforeCommit, Commit};
        assert_eq!(kind_of(true, None, BeforeCommit), Kind::Unavailable);
        assert_eq!(kind_of(true, None, Commit), Kind::Indeterminate);
        let cases = [
            (SqlState::DISK_FULL, Kind::Full),
            (SqlState::READ_ONLY_SQL_TRANSACTION, Kind::ReadOnly),
            (SqlState::CHECK_VIOLATION, Kind::Corrupt),
            (SqlState::NOT_NULL_VIOLATION, Kind::Corrupt),
            (SqlState::UNDEFINED_TABLE, Kind::TablesGone),
            (SqlState::INVALID_SCHEMA_NAME, Kind::TablesGone),
            (SqlState::T_R_SERIALIZATION_FAILURE, Kind::Unavailable),
            (SqlState::UNIQUE_VIOLATION, Kind::Unavailable),
        ];
        for (code, kind) in cases {
            assert_eq!(kind_of(false, Some(&code), Commit), kind, "{}", code.code());
            assert_eq!(
                kind_of(false, Some(&code), BeforeCommit),
                kind,
                "{}",
                code.code()
            );
        }
        assert_eq!(kind_of(false, None, Commit), Kind::Unavailable);
    }
}

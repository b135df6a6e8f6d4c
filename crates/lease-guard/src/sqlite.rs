//! A fence guard inside the caller's rusqlite transaction: the check and the caller's own write
//! commit or roll back together.

use lease_domain::{Fence, decide_guard};
use rusqlite::{Connection, OptionalExtension, Transaction};

use crate::{Admission, FenceGuard, GuardError};

/// The guard's table: the highest fence seen per key.
pub const CREATE_TABLE: &str = "CREATE TABLE IF NOT EXISTS lease_fences(key TEXT PRIMARY KEY, fence INTEGER NOT NULL) WITHOUT ROWID";

/// Creates the guard's table in the resource's database (idempotent).
///
/// # Errors
/// [`GuardError::Storage`] when SQLite fails.
pub fn install(conn: &Connection) -> Result<(), GuardError> {
    conn.execute_batch(CREATE_TABLE).map_err(storage)
}

fn storage(err: rusqlite::Error) -> GuardError {
    GuardError::Storage(err.to_string())
}

/// A guard over an open transaction: it takes a `rusqlite::Transaction`, so the check and the
/// protected write cannot end up in different transactions. Use it in the transaction that
/// makes the protected write, before the write; when it refuses, roll back (or simply do not
/// write). Begin the transaction with `TransactionBehavior::Immediate` when other connections
/// write the same database, so that the check does not read a version another writer is about
/// to replace.
#[derive(Debug, Clone, Copy)]
pub struct SqliteGuard<'a> {
    conn: &'a Connection,
}

impl<'a> SqliteGuard<'a> {
    /// A guard working in the transaction `tx`.
    #[must_use]
    pub fn new(tx: &'a Transaction<'_>) -> Self {
        Self { conn: tx }
    }
}

impl FenceGuard for SqliteGuard<'_> {
    fn admit(&self, key: &str, fence: Fence) -> Result<Admission, GuardError> {
        let stored: Option<i64> = self
            .conn
            .query_row(
                "SELECT fence FROM lease_fences WHERE key = ?1",
                [key],
                |r| r.get(0),
            )
            .optional()
            .map_err(storage)?;
        let current = stored
            .map(|f| {
                Fence::try_from(f)
                    .map_err(|f| GuardError::Corrupt(format!("the stored fence of {key} is {f}")))
            })
            .transpose()?;
        match decide_guard(current, fence) {
            // The fence is the one already kept: nothing to write.
            Ok(keep) if current == Some(keep) => Ok(Ok(())),
            Ok(keep) => {
                self.conn
                    .execute(
                        "INSERT INTO lease_fences(key, fence) VALUES (?1, ?2) \
                         ON CONFLICT(key) DO UPDATE SET fence = excluded.fence",
                        rusqlite::params![key, i64::from(keep)],
                    )
                    .map_err(storage)?;
                Ok(Ok(()))
            }
            Err(refused) => Ok(crate::counted_in("sqlite", Err(refused))),
        }
    }
}

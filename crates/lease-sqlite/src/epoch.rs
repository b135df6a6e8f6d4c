//! The store's epoch inside the open transaction (migration 14): read where a claim hands out
//! its fence, raised by a migration, `lease restore` and `lease epoch --raise`.

use lease_domain::Epoch;
use lease_ports::StoreError;
use rusqlite::Connection;

use crate::error;

const SELECT: &str = "SELECT epoch FROM lease_epoch WHERE one = 1";

const RAISE: &str = "UPDATE lease_epoch SET epoch = max(epoch, ?1) WHERE one = 1";

/// The store's epoch.
pub(crate) fn read(conn: &Connection) -> Result<Epoch, StoreError> {
    let stored: i64 = conn
        .prepare_cached(SELECT)
        .and_then(|mut stmt| stmt.query_row([], |r| r.get(0)))
        .map_err(error::sql(conn))?;
    lease_ports::codec::epoch(stored)
}

/// Raises the store's epoch to `at_least` where it is below; the epoch after.
pub(crate) fn raise(conn: &Connection, at_least: Epoch) -> Result<Epoch, StoreError> {
    conn.prepare_cached(RAISE)
        .and_then(|mut stmt| stmt.execute([i64::from(at_least.get())]))
        .map_err(error::sql(conn))?;
    read(conn)
}

//! Connections: the setup of every pooled connection, the pooled connection that is closed
//! rather than reused when it was left inside a transaction, and the statements prepared on
//! each.

use std::time::Duration;

use deadpool_postgres::HookError;
use lease_ports::StoreError;
use tokio_postgres::Statement;

use crate::error::{self, Stage};
use crate::sql::Sql;

/// Sets up every new pooled connection: durable commits, read back, a bound on idling
/// inside a transaction, and `lease.counts = 'store'`: this session's writes move migration
/// 6's counts themselves (`Sql::update_counted`), so its row trigger, which counts the
/// changes of other programs, leaves them out.
pub(crate) async fn setup(
    client: &mut deadpool_postgres::ClientWrapper,
    idle: Duration,
) -> Result<(), HookError> {
    client
        .batch_execute(&format!(
            "SET synchronous_commit = on; SET idle_in_transaction_session_timeout = {}; \
             SET lease.counts = 'store'",
            idle.as_millis().max(1)
        ))
        .await
        .map_err(HookError::Backend)?;
    let row = client
        .query_one(
            "SELECT current_setting('synchronous_commit'), current_setting('fsync')",
            &[],
        )
        .await
        .map_err(HookError::Backend)?;
    let (sync, fsync): (String, String) = (row.get(0), row.get(1));
    if sync != "on" {
        return Err(HookError::message(format!(
            "synchronous_commit reads back as {sync:?}, not on: commits would not be durable"
        )));
    }
    if fsync != "on" {
        return Err(HookError::message(
            "the server runs with fsync = off: acknowledged writes would not survive a crash",
        ));
    }
    Ok(())
}

/// A pooled connection that is dropped from the pool unless the operation ended its
/// transaction cleanly: a connection left inside a transaction (a cancelled call, an error)
/// is closed, so the server rolls it back, and never reused.
pub(crate) struct Conn {
    pub(crate) object: Option<deadpool_postgres::Object>,
    pub(crate) clean: bool,
}

impl Conn {
    pub(crate) fn client(&self) -> &tokio_postgres::Client {
        match self.object.as_ref() {
            Some(o) => o,
            None => unreachable_client(),
        }
    }

    pub(crate) fn client_mut(&mut self) -> &mut tokio_postgres::Client {
        match self.object.as_mut() {
            Some(o) => o,
            None => unreachable_client(),
        }
    }

    pub(crate) async fn prepare(&self, query: &str) -> Result<Statement, StoreError> {
        match self.object.as_ref() {
            Some(o) => o
                .prepare_cached(query)
                .await
                .map_err(|e| error::map(e, Stage::BeforeCommit)),
            None => Err(StoreError::Unavailable(
                "the connection was already given back".into(),
            )),
        }
    }

    pub(crate) fn clean(&mut self) {
        self.clean = true;
    }
}

/// `Conn` holds its object from creation until drop; no method runs after drop.
#[allow(clippy::panic)] // Unreachable by construction (see above); there is no error to return.
pub(crate) fn unreachable_client() -> ! {
    panic!("a pooled connection was used after it was given back")
}

impl Drop for Conn {
    fn drop(&mut self) {
        if !self.clean {
            if let Some(object) = self.object.take() {
                drop(deadpool_postgres::Object::take(object));
            }
        }
    }
}

/// The prepared statements of one connection (prepared once, then taken from its cache).
pub(crate) struct Statements {
    pub(crate) begin: Statement,
    pub(crate) commit: Statement,
    pub(crate) rollback: Statement,
    pub(crate) lock: Statement,
    pub(crate) lock_purged: Statement,
    pub(crate) forget_purged: Statement,
    pub(crate) insert: Statement,
    pub(crate) update: Statement,
    pub(crate) update_counted: Statement,
    pub(crate) clock: Statement,
    /// `claim_next`'s planner settings, for its transaction only.
    pub(crate) settings: Statement,
    /// The store's epoch, read where a claim by id hands out its fence.
    pub(crate) epoch: Statement,
    pub(crate) candidates: Statement,
    pub(crate) insert_audit: Statement,
    pub(crate) trim_audit: Statement,
}

impl Statements {
    pub(crate) async fn prepare(conn: &Conn, sql: &Sql) -> Result<Self, StoreError> {
        Ok(Self {
            begin: conn.prepare("BEGIN").await?,
            commit: conn.prepare("COMMIT").await?,
            rollback: conn.prepare("ROLLBACK").await?,
            lock: conn.prepare(&sql.lock).await?,
            lock_purged: conn.prepare(&sql.lock_purged).await?,
            forget_purged: conn.prepare(&sql.forget_purged).await?,
            insert: conn.prepare(&sql.insert).await?,
            update: conn.prepare(&sql.update).await?,
            update_counted: conn.prepare(&sql.update_counted).await?,
            clock: conn.prepare(&sql.clock).await?,
            settings: conn.prepare(&sql.settings).await?,
            epoch: conn.prepare(&sql.epoch).await?,
            candidates: conn.prepare(&sql.candidates).await?,
            insert_audit: conn.prepare(&sql.insert_audit).await?,
            trim_audit: conn.prepare(&sql.trim_audit).await?,
        })
    }
}

//! The network service's API keys in the `keys` table (migration 5): each add decided by
//! `lease_domain::decide_new_key` over the principal's live keys, read under a transaction
//! lock on the principal (`pg_advisory_xact_lock`), so concurrent adds for one principal
//! are decided one at a time, and on the id's row.

use lease_domain::{KeyId, KeyRefused, Timestamp, decide_new_key};
use lease_ports::StoreError;
use lease_ports::keys::{KeyRecord, KeyStore, decode_key, live_scopes};
use tokio_postgres::Row;

use crate::PgLeaseStore;
use crate::error::{self, Stage};

const COLUMNS: &str = "id, principal, scope, digest, created, revoked";

fn read(row: &Row) -> Result<KeyRecord, StoreError> {
    let get_err = |e: tokio_postgres::Error| {
        StoreError::Corrupt(lease_ports::Detail::caused_by(format!("key row: {e}"), e))
    };
    let scope: String = row.try_get(2).map_err(get_err)?;
    let digest: Vec<u8> = row.try_get(3).map_err(get_err)?;
    decode_key(
        row.try_get(0).map_err(get_err)?,
        row.try_get(1).map_err(get_err)?,
        &scope,
        &digest,
        row.try_get(4).map_err(get_err)?,
        row.try_get(5).map_err(get_err)?,
    )
}

#[async_trait::async_trait]
impl KeyStore for PgLeaseStore {
    async fn add_key(&self, key: &KeyRecord) -> Result<Result<(), KeyRefused>, StoreError> {
        let s = &self.schema;
        let mut conn = self.conn().await?;
        let c = conn.client();
        let before = |e: tokio_postgres::Error| error::map(e, Stage::BeforeCommit);
        c.batch_execute("BEGIN").await.map_err(before)?;
        c.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended('lease key ' || $1, 0))",
            &[&key.principal.as_str()],
        )
        .await
        .map_err(before)?;
        let held = c
            .query(
                &format!("SELECT {COLUMNS} FROM {s}.keys WHERE principal = $1"),
                &[&key.principal.as_str()],
            )
            .await
            .map_err(before)?
            .iter()
            .map(read)
            .collect::<Result<Vec<_>, _>>()?;
        let taken = c
            .query_opt(
                &format!("SELECT 1 FROM {s}.keys WHERE id = $1 FOR UPDATE"),
                &[&key.id.as_str()],
            )
            .await
            .map_err(before)?
            .is_some();
        let live = live_scopes(&held, &key.principal);
        let decided = decide_new_key(&key.id, taken, &key.principal, key.scope, &live);
        if decided.is_ok() {
            // Another principal's add of the same id can still commit first: then this
            // insert adds nothing, and the id is reported taken.
            let inserted = c
                .execute(
                    &format!(
                        "INSERT INTO {s}.keys ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, NULL) \
                         ON CONFLICT (id) DO NOTHING"
                    ),
                    &[
                        &key.id.as_str(),
                        &key.principal.as_str(),
                        &key.scope.as_str(),
                        &&key.digest.as_bytes()[..],
                        &key.created.get(),
                    ],
                )
                .await
                .map_err(before)?;
            if inserted == 0 {
                c.batch_execute("ROLLBACK").await.map_err(before)?;
                conn.clean();
                return Ok(Err(KeyRefused::IdTaken(key.id.clone())));
            }
            c.batch_execute("COMMIT")
                .await
                .map_err(|e| error::map(e, Stage::Commit))?;
        } else {
            c.batch_execute("ROLLBACK").await.map_err(before)?;
        }
        conn.clean();
        Ok(decided)
    }

    async fn key(&self, id: &KeyId) -> Result<Option<KeyRecord>, StoreError> {
        let mut conn = self.conn().await?;
        let row = conn
            .client()
            .query_opt(
                &format!("SELECT {COLUMNS} FROM {}.keys WHERE id = $1", self.schema),
                &[&id.as_str()],
            )
            .await
            .map_err(|e| error::map(e, Stage::BeforeCommit))?;
        conn.clean();
        row.as_ref().map(read).transpose()
    }

    async fn keys(&self) -> Result<Vec<KeyRecord>, StoreError> {
        let mut conn = self.conn().await?;
        let rows = conn
            .client()
            .query(
                &format!("SELECT {COLUMNS} FROM {}.keys ORDER BY id", self.schema),
                &[],
            )
            .await
            .map_err(|e| error::map(e, Stage::BeforeCommit))?;
        conn.clean();
        rows.iter().map(read).collect()
    }

    async fn revoke_key(&self, id: &KeyId, now: Timestamp) -> Result<bool, StoreError> {
        let mut conn = self.conn().await?;
        let changed = conn
            .client()
            .execute(
                &format!(
                    "UPDATE {}.keys SET revoked = coalesce(revoked, $2) WHERE id = $1",
                    self.schema
                ),
                &[&id.as_str(), &now.get()],
            )
            .await
            .map_err(|e| error::map(e, Stage::Commit))?;
        conn.clean();
        Ok(changed > 0)
    }
}

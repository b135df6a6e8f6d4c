//! The network service's API keys in the `lease_keys` table (migration 5): each add decided
//! by `lease_domain::decide_new_key` over the principal's live keys, read in the same
//! `BEGIN IMMEDIATE` transaction that writes it.

use lease_domain::{KeyId, KeyRefused, Timestamp, decide_new_key};
use lease_ports::StoreError;
use lease_ports::keys::{KeyRecord, KeyStore, decode_key, live_scopes};
use rusqlite::{Connection, OptionalExtension};

use crate::{SqliteLeaseStore, error, tx};

const COLUMNS: &str = "id, principal, scope, digest, created, revoked";

fn read(row: &rusqlite::Row<'_>) -> rusqlite::Result<Result<KeyRecord, StoreError>> {
    let digest: Vec<u8> = row.get(3)?;
    let scope: String = row.get(2)?;
    Ok(decode_key(
        row.get(0)?,
        row.get(1)?,
        &scope,
        &digest,
        row.get(4)?,
        row.get(5)?,
    ))
}

fn select(
    conn: &Connection,
    filter: &str,
    param: Option<&str>,
) -> Result<Vec<KeyRecord>, StoreError> {
    let sql = format!("SELECT {COLUMNS} FROM lease_keys {filter} ORDER BY id");
    let mut stmt = conn.prepare_cached(&sql).map_err(error::sql(conn))?;
    let rows = match param {
        Some(p) => stmt.query_map([p], read),
        None => stmt.query_map([], read),
    }
    .map_err(error::sql(conn))?;
    rows.map(|row| row.map_err(error::sql(conn))?).collect()
}

fn add(conn: &Connection, key: &KeyRecord) -> Result<Result<(), KeyRefused>, StoreError> {
    let held = select(conn, "WHERE principal = ?1", Some(key.principal.as_str()))?;
    let taken = conn
        .prepare_cached("SELECT 1 FROM lease_keys WHERE id = ?1")
        .and_then(|mut s| s.query_row([key.id.as_str()], |_| Ok(())).optional())
        .map_err(error::sql(conn))?
        .is_some();
    let live = live_scopes(&held, &key.principal);
    if let Err(refused) = decide_new_key(&key.id, taken, &key.principal, key.scope, &live) {
        return Ok(Err(refused));
    }
    conn.prepare_cached(
        "INSERT INTO lease_keys(id, principal, scope, digest, created, revoked) \
         VALUES (?1, ?2, ?3, ?4, ?5, NULL)",
    )
    .and_then(|mut s| {
        s.execute(rusqlite::params![
            key.id.as_str(),
            key.principal.as_str(),
            key.scope.as_str(),
            &key.digest.as_bytes()[..],
            key.created.get(),
        ])
    })
    .map_err(error::sql(conn))?;
    Ok(Ok(()))
}

fn revoke(conn: &Connection, id: &KeyId, now: Timestamp) -> Result<bool, StoreError> {
    conn.prepare_cached("UPDATE lease_keys SET revoked = coalesce(revoked, ?2) WHERE id = ?1")
        .and_then(|mut s| s.execute(rusqlite::params![id.as_str(), now.get()]))
        .map(|changed| changed > 0)
        .map_err(error::sql(conn))
}

#[async_trait::async_trait]
impl KeyStore for SqliteLeaseStore {
    async fn add_key(&self, key: &KeyRecord) -> Result<Result<(), KeyRefused>, StoreError> {
        self.refuse_if_read_only()?;
        let key = key.clone();
        self.run(move |store| store.with_conn(|conn| tx::immediate(conn, |conn| add(conn, &key))))
            .await
    }

    async fn key(&self, id: &KeyId) -> Result<Option<KeyRecord>, StoreError> {
        let id = id.clone();
        self.run(move |store| {
            store.with_conn(|conn| Ok(select(conn, "WHERE id = ?1", Some(id.as_str()))?.pop()))
        })
        .await
    }

    async fn keys(&self) -> Result<Vec<KeyRecord>, StoreError> {
        self.run(|store| store.with_conn(|conn| select(conn, "", None)))
            .await
    }

    async fn revoke_key(&self, id: &KeyId, now: Timestamp) -> Result<bool, StoreError> {
        self.refuse_if_read_only()?;
        let id = id.clone();
        self.run(move |store| {
            store.with_conn(|conn| tx::immediate(conn, |conn| revoke(conn, &id, now)))
        })
        .await
    }
}

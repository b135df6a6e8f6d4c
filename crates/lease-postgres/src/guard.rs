//! The resource side of fencing on PostgreSQL: a protected resource keeps, per key, the
//! highest fence it has seen (table `fences`), and admits a write only from a fence at least
//! that high, inside the resource's own transaction, so the check and the write commit or
//! roll back together.
//!
//! Two ways to call it:
//! - from Rust, [`admit`] inside a tokio-postgres transaction (the rule is
//!   `lease_domain::decide_guard`);
//! - from any language, the SQL function `<schema>.admit_fence(key text, fence bigint)`
//!   (installed by the lease schema's migration 2, or by [`install`] in another database), which
//!   returns the fence when it admits the write and raises SQLSTATE `LF409` (aborting the
//!   caller's transaction) when the fence is stale. Its rule is the same as `decide_guard`'s, and
//!   a test checks that the two agree on random sequences.

use lease_domain::{Fence, GuardRefused, decide_guard};
use lease_ports::StoreError;
use tokio_postgres::GenericClient;

use crate::error::{self, Stage};
use crate::schema::check_schema_name;

/// The SQLSTATE the SQL function raises for a stale fence.
pub const STALE_FENCE_SQLSTATE: &str = "LF409";

/// The guard's table and SQL function in schema `{s}` (idempotent), as [`install`] makes them.
/// The lease schema gets them from its own frozen migration 2 (`migrations/0002_guard.sql`);
/// this text may change in a later release, that one never does.
const GUARD_SQL: &str = "
CREATE TABLE IF NOT EXISTS {s}.fences (key text PRIMARY KEY, fence bigint NOT NULL CHECK (fence >= 0));
CREATE OR REPLACE FUNCTION {s}.admit_fence(p_key text, p_fence bigint) RETURNS bigint
LANGUAGE plpgsql AS $fn$
DECLARE
    seen bigint;
BEGIN
    IF p_key IS NULL OR p_key = '' THEN
        RAISE EXCEPTION 'lease guard: the key is empty' USING ERRCODE = '22023';
    END IF;
    IF p_fence IS NULL OR p_fence < 0 THEN
        RAISE EXCEPTION 'lease guard: % is not a fence', p_fence USING ERRCODE = '22023';
    END IF;
    INSERT INTO {s}.fences (key, fence) VALUES (p_key, p_fence) ON CONFLICT (key) DO NOTHING;
    SELECT fence INTO seen FROM {s}.fences WHERE key = p_key FOR UPDATE;
    IF p_fence < seen THEN
        RAISE EXCEPTION 'lease guard: fence % is stale for %, the resource has seen fence %',
            p_fence, p_key, seen
            USING ERRCODE = 'LF409', DETAIL = format('presented=%s current=%s', p_fence, seen);
    END IF;
    UPDATE {s}.fences SET fence = p_fence WHERE key = p_key AND fence < p_fence;
    RETURN p_fence;
END
$fn$;
";

/// Installs the guard's table and function in schema `schema` of the database `client` is
/// connected to (idempotent; the schema is created if missing). The lease schema has them
/// already.
///
/// # Errors
/// [`StoreError::Incompatible`] for a bad schema name; the server's error otherwise.
pub async fn install(client: &impl GenericClient, schema: &str) -> Result<(), StoreError> {
    check_schema_name(schema)?;
    client
        .batch_execute(&format!(
            "CREATE SCHEMA IF NOT EXISTS {schema}; {}",
            GUARD_SQL.replace("{s}", schema)
        ))
        .await
        .map_err(|e| error::map(e, Stage::BeforeCommit))
}

/// Admits a write to `key` from a holder of `fence` inside the caller's open transaction
/// (`client` is a `tokio_postgres::Transaction`): records the fence as the highest seen, or
/// refuses it and records nothing. Make the protected write in the same transaction, after
/// this, and commit.
///
/// # Errors
/// [`StoreError`] when the server fails; a refusal is `Ok(Err(_))`.
pub async fn admit(
    client: &impl GenericClient,
    schema: &str,
    key: &str,
    fence: Fence,
) -> Result<Result<(), GuardRefused>, StoreError> {
    check_schema_name(schema)?;
    let fail = |e: tokio_postgres::Error| error::map(e, Stage::BeforeCommit);
    client
        .execute(
            &format!(
                "INSERT INTO {schema}.fences (key, fence) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING"
            ),
            &[&key, &i64::from(fence)],
        )
        .await
        .map_err(fail)?;
    let row = client
        .query_one(
            &format!("SELECT fence FROM {schema}.fences WHERE key = $1 FOR UPDATE"),
            &[&key],
        )
        .await
        .map_err(fail)?;
    let current = Fence::try_from(row.get::<_, i64>(0))
        .map_err(|f| StoreError::Corrupt(format!("guard key {key}: stored fence {f}").into()))?;
    match decide_guard(Some(current), fence) {
        Ok(keep) => {
            client
                .execute(
                    &format!("UPDATE {schema}.fences SET fence = $2 WHERE key = $1 AND fence < $2"),
                    &[&key, &i64::from(keep)],
                )
                .await
                .map_err(fail)?;
            Ok(Ok(()))
        }
        Err(refused) => {
            metrics::counter!(lease_ports::observe::names::GUARD_REFUSALS, "resource" => "postgres")
                .increment(1);
            Ok(Err(refused))
        }
    }
}

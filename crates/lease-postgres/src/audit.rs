//! The audit trail on PostgreSQL: a refused holder write recorded in the refusing
//! transaction, and the reading side.

use async_trait::async_trait;
use futures::future::try_join;
use lease_domain::{JobId, Timestamp};
use lease_ports::StoreError;
use lease_ports::codec::StoredAudit;

use crate::PgLeaseStore;
use crate::connection::Statements;
use crate::error::{self, Stage};

impl PgLeaseStore {
    /// Adds a refused holder write to the audit trail in the open transaction and trims the
    /// trail to `retention` rows (sent at once; the caller commits).
    pub(crate) async fn audit_rows(
        &self,
        c: &tokio_postgres::Client,
        s: &Statements,
        id: &JobId,
        entry: &lease_domain::Refusal,
        retention: u64,
    ) -> Result<(), StoreError> {
        audit_sent(c, s, id, entry, retention)
            .await
            .map_err(|e| error::map(e, Stage::Commit))
    }
}

/// [`PgLeaseStore::audit_rows`]'s two statements, with the server's own error.
pub(crate) async fn audit_sent(
    c: &tokio_postgres::Client,
    s: &Statements,
    id: &JobId,
    entry: &lease_domain::Refusal,
    retention: u64,
) -> Result<(), tokio_postgres::Error> {
    let (insert, trim) = (&s.insert_audit, &s.trim_audit);
    let current = entry.current.map(i64::from);
    let retention = i64::try_from(retention).unwrap_or(i64::MAX);
    try_join(
        c.execute(
            insert,
            &[
                &id.as_str(),
                &entry.owner.as_str(),
                &entry.operation.as_str(),
                &i64::from(entry.presented),
                &current,
                &entry.reason.as_str(),
                &entry.late_by,
            ],
        ),
        c.execute(trim, &[&retention]),
    )
    .await
    .map(drop)
}

#[async_trait]
impl lease_ports::audit::AuditTrail for PgLeaseStore {
    async fn refusals(
        &self,
        filter: &lease_ports::audit::AuditFilter,
    ) -> Result<Vec<lease_ports::audit::AuditRow>, StoreError> {
        let mut conn = self.conn().await?;
        let limit = if filter.limit == 0 {
            i64::MAX
        } else {
            i64::try_from(filter.limit).unwrap_or(i64::MAX)
        };
        let rows = conn
            .client()
            .query(
                &format!(
                    "SELECT time, job, owner, operation, presented, current, reason, late_by \
                     FROM {}.audit WHERE ($1::text IS NULL OR job = $1) \
                     AND ($2::float8 IS NULL OR time >= $2) ORDER BY seq DESC LIMIT $3",
                    self.schema
                ),
                &[
                    &filter.job.as_ref().map(JobId::as_str),
                    &filter.since.map(Timestamp::get),
                    &limit,
                ],
            )
            .await
            .map_err(|e| error::map(e, Stage::BeforeCommit))?;
        conn.clean();
        let read = |e: tokio_postgres::Error| {
            StoreError::Corrupt(lease_ports::Detail::caused_by(format!("audit row: {e}"), e))
        };
        let mut found = Vec::with_capacity(rows.len());
        for r in &rows {
            let stored = StoredAudit {
                time: r.try_get(0).map_err(read)?,
                job: r.try_get(1).map_err(read)?,
                owner: r.try_get(2).map_err(read)?,
                operation: r.try_get(3).map_err(read)?,
                presented: r.try_get(4).map_err(read)?,
                current: r.try_get(5).map_err(read)?,
                reason: r.try_get(6).map_err(read)?,
                late_by: r.try_get(7).map_err(read)?,
            };
            found.push(stored.decode()?);
        }
        found.reverse();
        Ok(found)
    }
}

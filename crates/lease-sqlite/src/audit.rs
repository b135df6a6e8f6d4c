//! The audit trail of refused holder writes (when a store is opened with the trail on): a
//! refusal is added in the transaction that refused it, at the host's clock, and the trail
//! trimmed to its retention.

use lease_domain::JobId;
use lease_ports::StoreError;
use rusqlite::Connection;

use crate::error;

/// The audit trail's table (made when a store is opened with the trail on).
pub(crate) const INSERT_AUDIT: &str = "INSERT INTO lease_audit(time, job, owner, operation, presented, \
    current, reason, late_by) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)";

pub(crate) const TRIM_AUDIT: &str =
    "DELETE FROM lease_audit WHERE seq <= (SELECT max(seq) FROM lease_audit) - ?1";

/// Adds a refusal to the audit trail at the host's clock, in the open transaction, and trims
/// the trail to `retention` rows.
pub(crate) fn record_refusal(
    conn: &Connection,
    retention: u64,
    id: &JobId,
    entry: &lease_domain::Refusal,
) -> Result<(), StoreError> {
    let now = crate::clock::host_now()?;
    conn.prepare_cached(INSERT_AUDIT)
        .and_then(|mut stmt| {
            stmt.execute(rusqlite::params![
                now.get(),
                id.as_str(),
                entry.owner.as_str(),
                entry.operation.as_str(),
                i64::from(entry.presented),
                entry.current.map(i64::from),
                entry.reason.as_str(),
                entry.late_by,
            ])
        })
        .and_then(|_| {
            conn.prepare_cached(TRIM_AUDIT)?
                .execute([i64::try_from(retention).unwrap_or(i64::MAX)])
        })
        .map(drop)
        .map_err(error::sql(conn))
}

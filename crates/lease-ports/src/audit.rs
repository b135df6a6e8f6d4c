//! The opt-in audit trail of refused writes: one row per write of a lease holder that a store
//! refused (stale, expired, not the owner, done, cancelled, dead, missing, a wrong token), kept up to a
//! retention limit. Stores write it in the refusing transaction when opened with it on; this
//! module is the reading side.

use async_trait::async_trait;
use lease_domain::{JobId, Timestamp};

use crate::StoreError;

/// How a reader shows an operation or reason it does not know (a newer writer's).
pub const UNKNOWN: &str = "unknown";

/// How many audit rows a store keeps by default (the oldest go first).
pub const DEFAULT_RETENTION: u64 = 100_000;

/// One refused write.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditRow {
    /// When it was refused, by the store's clock (Unix seconds).
    pub time: f64,
    /// The job.
    pub job: String,
    /// The writer.
    pub owner: String,
    /// The holder's write: `renew`, `progress`, `complete`, `release` or `fail`
    /// ([`lease_domain::HolderWrite`]), or [`UNKNOWN`] for a stored name this version does
    /// not know.
    pub operation: String,
    /// The fence it presented.
    pub presented_fence: u64,
    /// The job's fence then (`None`: no such job).
    pub current_fence: Option<u64>,
    /// `stale`, `expired`, `not_owner`, `done`, `cancelled`, `dead`, `missing` or `bad_token`
    /// ([`lease_domain::AuditReason`]), or [`UNKNOWN`].
    pub reason: String,
    /// For an expired lease, how late the write came (its `now` minus the lease's `until`).
    pub late_by: Option<f64>,
}

/// Which audit rows to read.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AuditFilter {
    /// Only this job.
    pub job: Option<JobId>,
    /// Only refusals at or after this time.
    pub since: Option<Timestamp>,
    /// At most this many, the newest (0: no limit).
    pub limit: usize,
}

/// A store that can show its audit trail (empty when it was never opened with the trail on).
#[async_trait]
pub trait AuditTrail: Send + Sync {
    /// The refusals `filter` selects, oldest first.
    async fn refusals(&self, filter: &AuditFilter) -> Result<Vec<AuditRow>, StoreError>;
}

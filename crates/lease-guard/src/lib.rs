//! The resource side of fencing. A lease store refuses a stale holder's writes to the job; the
//! systems a worker writes to (a ledger, another database, an HTTP service) need the same
//! check. A guard keeps, per key (the job id, or a resource one job owns), the highest fence it
//! has seen, and admits a write only from a fence at least that high, as decided by
//! `lease_domain::decide_guard`. The check belongs inside the resource's own transaction, so
//! that it and the write commit or fail together.
//!
//! Transactional resources take a [`FenceGuard`] check inside the writer's own transaction:
//! - [`MemoryGuard`]: in process memory, for tests.
//! - [`sqlite::SqliteGuard`]: inside the caller's open rusqlite transaction.
//! - `mysql` (feature `mysql`): the procedure `lease_admit_fence` in MariaDB or MySQL.
//! - [`http`]: the `Lease-Job` and `Lease-Fence` request headers, and a check over any guard
//!   (no HTTP library here).
//!
//! Stores that keep a value with its fence take a [`value::ValueGuard`] (`put`, `get`,
//! `delete` under a fence), each write one atomic step inside the resource:
//! [`value::MemoryValueGuard`], `redis` (a function library), `object` (S3, GCS, Azure:
//! conditional puts), `dir` (a directory: a sidecar and a file lock), `nats` (JetStream
//! key-value: a revision check), `mysql` (a table). Each backend is behind a feature of its
//! name; `contract` is the suite every one of them passes.

// Library and binary code may not unwrap, expect or panic on what it meets, nor export what is
// unreachable (each exception allowed in place with its reason); tests may.
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        unreachable_pub
    )
)]

#[cfg(feature = "contract")]
// The guards' shared contract suite (built only with the feature), where a failed step is a
// failed test: it may unwrap, expect and panic.
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
pub mod contract;
#[cfg(feature = "dir")]
pub mod dir;
pub mod http;
#[cfg(feature = "mysql")]
pub mod mysql;
#[cfg(feature = "nats")]
pub mod nats;
#[cfg(feature = "object-store")]
pub mod object;
#[cfg(feature = "redis")]
pub mod redis;
mod registry;
pub mod sqlite;
pub mod value;

pub use registry::{Installed, install, open};

use std::collections::HashMap;
use std::sync::Mutex;

pub use lease_domain::{Fence, GuardRefused, decide_guard};

/// A library error behind a guard's failure.
pub type Cause = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why a guard could not decide (as opposed to refusing, which is an ordinary outcome).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GuardError {
    /// The guard's storage failed; nothing was decided.
    #[error("the fence guard's storage failed: {0}")]
    Storage(String),
    /// A stored fence is not a valid fence.
    #[error("the fence guard holds corrupt data: {0}")]
    Corrupt(String),
    /// The key cannot be a key of this resource; nothing was read or written.
    #[error("invalid key: {0}")]
    InvalidKey(String),
    /// The resource cannot do what was asked (an expiry on an object store, an object store
    /// without conditional writes); nothing was written.
    #[error("not supported: {0}")]
    Unsupported(String),
    /// The resource could not be reached or failed before the write; it was not applied.
    #[error("the resource is unavailable: {0}")]
    Unavailable(String, #[source] Option<Cause>),
    /// The write was sent and its answer lost: it may or may not have been applied (`get`
    /// tells).
    #[error("outcome unknown, the write may or may not have been applied: {0}")]
    Indeterminate(String, #[source] Option<Cause>),
}

impl GuardError {
    /// `Unavailable` with its cause.
    pub fn unavailable(message: impl Into<String>, cause: impl Into<Cause>) -> Self {
        GuardError::Unavailable(message.into(), Some(cause.into()))
    }

    /// `Indeterminate` with its cause.
    pub fn indeterminate(message: impl Into<String>, cause: impl Into<Cause>) -> Self {
        GuardError::Indeterminate(message.into(), Some(cause.into()))
    }
}

/// The counter of writes a guard refused, labelled by `resource` (the same name as
/// `lease_ports::observe::names::GUARD_REFUSALS`).
pub const GUARD_REFUSALS: &str = "lease_guard_refusals_total";

/// Counts a refused admission at `resource` (every guard calls it) and traces it.
pub fn counted_in(resource: &'static str, admission: Admission) -> Admission {
    if let Err(refused) = &admission {
        metrics::counter!(GUARD_REFUSALS, "resource" => resource).increment(1);
        tracing::debug!(
            resource,
            presented = refused.presented.get(),
            current = refused.current.get(),
            "a guard refused a stale write"
        );
    }
    admission
}

/// What a guard answers: admitted, or refused with the fences involved.
pub type Admission = Result<(), GuardRefused>;

/// A fence guard over some storage.
pub trait FenceGuard {
    /// Admits a write to `key` from a holder of `fence` (recording it as the highest seen), or
    /// refuses it, recording nothing.
    ///
    /// # Errors
    /// [`GuardError`] when the guard's storage fails.
    fn admit(&self, key: &str, fence: Fence) -> Result<Admission, GuardError>;
}

/// A guard in process memory.
#[derive(Debug, Default)]
pub struct MemoryGuard {
    seen: Mutex<HashMap<String, Fence>>,
}

impl MemoryGuard {
    /// An empty guard.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }
}

impl FenceGuard for MemoryGuard {
    fn admit(&self, key: &str, fence: Fence) -> Result<Admission, GuardError> {
        let mut seen = self
            .seen
            .lock()
            .map_err(|_| GuardError::Storage("the in-memory guard's lock is poisoned".into()))?;
        Ok(counted_in(
            "memory",
            decide_guard(seen.get(key).copied(), fence).map(|keep| {
                seen.insert(key.to_owned(), keep);
            }),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fence(n: u64) -> Fence {
        Fence::new(n).unwrap()
    }

    #[test]
    fn the_memory_guard_admits_same_or_newer_fences_per_key() {
        let guard = MemoryGuard::new();
        assert!(guard.admit("a", fence(2)).unwrap().is_ok());
        assert!(guard.admit("a", fence(2)).unwrap().is_ok());
        let refused = guard.admit("a", fence(1)).unwrap().unwrap_err();
        assert_eq!((refused.presented, refused.current), (fence(1), fence(2)));
        assert!(
            guard.admit("b", fence(1)).unwrap().is_ok(),
            "keys are independent"
        );
        assert!(guard.admit("a", fence(3)).unwrap().is_ok());
        assert!(guard.admit("a", fence(2)).unwrap().is_err());
    }
}

//! The resource side of fencing. A lease store refuses a stale holder's writes to the job; the
//! systems a worker writes to (a ledger, another database, an HTTP service) need the same
//! check. A guard keeps, per key (the job id, or a resource one job owns), the highest fence it
//! has seen, and admits a write only from a fence at least that high, as decided by
//! `lease_domain::decide_guard`. The check belongs inside the resource's own transaction, so
//! that it and the write commit or fail together.
//!
//! - [`MemoryGuard`]: in process memory, for tests.
//! - [`sqlite::SqliteGuard`]: inside the caller's open rusqlite transaction.
//! - [`http`]: the `Lease-Job` and `Lease-Fence` request headers, and a check over any guard
//!   (no HTTP library here).

pub mod http;
pub mod sqlite;

use std::collections::HashMap;
use std::sync::Mutex;

pub use lease_domain::{Fence, GuardRefused, decide_guard};

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
}

/// The counter of writes a guard refused (the same name as
/// `lease_ports::observe::names::GUARD_REFUSALS`).
pub const GUARD_REFUSALS: &str = "lease_guard_refusals_total";

/// Counts a refused admission (every guard here calls it).
fn counted(admission: Admission) -> Admission {
    if admission.is_err() {
        metrics::counter!(GUARD_REFUSALS).increment(1);
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
        Ok(counted(decide_guard(seen.get(key).copied(), fence).map(
            |keep| {
                seen.insert(key.to_owned(), keep);
            },
        )))
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

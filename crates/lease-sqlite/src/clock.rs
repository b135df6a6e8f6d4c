//! The host's clock, which decides `now` when the store is opened in store-clock mode (or
//! bounds the caller's clock): the only place the SQLite store reads the time.

use std::sync::Arc;

use lease_domain::Timestamp;
use lease_ports::StoreError;

/// A clock the store reads instead of the system's, in store-clock mode and for a skew bound
/// (for simulations and tests that decide what time it is).
#[derive(Clone)]
pub struct HostClock(Arc<dyn Fn() -> Timestamp + Send + Sync>);

impl HostClock {
    /// A clock that reads `now`.
    pub fn new(now: impl Fn() -> Timestamp + Send + Sync + 'static) -> Self {
        Self(Arc::new(now))
    }
}

impl std::fmt::Debug for HostClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HostClock(..)")
    }
}

/// `clock`'s time, or this host's when there is none.
pub(crate) fn now(clock: Option<&HostClock>) -> Result<Timestamp, StoreError> {
    match clock {
        Some(clock) => Ok((clock.0)()),
        None => host_now(),
    }
}

/// This host's clock in Unix seconds (negative before 1970).
pub(crate) fn host_now() -> Result<Timestamp, StoreError> {
    let seconds = match std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        Ok(d) => d.as_secs_f64(),
        Err(e) => -e.duration().as_secs_f64(),
    };
    Timestamp::new(seconds).map_err(StoreError::InvalidInput)
}

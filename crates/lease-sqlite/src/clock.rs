//! The host's clock, which decides `now` when the store is opened in store-clock mode (or
//! bounds the caller's clock): the only place the SQLite store reads the time.

use lease_domain::Timestamp;
use lease_ports::StoreError;

/// This host's clock in Unix seconds (negative before 1970).
pub(crate) fn host_now() -> Result<Timestamp, StoreError> {
    let seconds = match std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        Ok(d) => d.as_secs_f64(),
        Err(e) => -e.duration().as_secs_f64(),
    };
    Timestamp::new(seconds).map_err(StoreError::InvalidInput)
}

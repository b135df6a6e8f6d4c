//! Guards for stores that keep the value with its fence (Redis, object stores, a directory,
//! NATS key-value, a MariaDB table): `put`, `get` and `delete` under a fence, each decided by
//! `decide_guard` and done atomically with the write inside the resource.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use lease_domain::{Fence, decide_guard};

use crate::{Admission, GuardError, counted_in};

/// The longest key a guard takes, in bytes (the job ids' limit).
pub const MAX_KEY_BYTES: usize = lease_domain::MAX_NAME_BYTES;

/// A key of a guarded resource: 1 to [`MAX_KEY_BYTES`] bytes of UTF-8 with no control
/// character. A backend may refuse more (an object store's path rules), before anything is
/// written.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct GuardKey(String);

impl GuardKey {
    /// Checks a key.
    ///
    /// # Errors
    /// [`GuardError::InvalidKey`] naming what is wrong.
    pub fn new(key: impl Into<String>) -> Result<Self, GuardError> {
        let key = key.into();
        if key.is_empty() {
            return Err(GuardError::InvalidKey("the key is empty".into()));
        }
        if key.len() > MAX_KEY_BYTES {
            return Err(GuardError::InvalidKey(format!(
                "the key is {} bytes long, over the limit of {MAX_KEY_BYTES} bytes",
                key.len()
            )));
        }
        if key.chars().any(char::is_control) {
            return Err(GuardError::InvalidKey(
                "the key holds a control character".into(),
            ));
        }
        Ok(Self(key))
    }

    /// The key as text.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for GuardKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A value read back, with the fence it was written under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Guarded {
    /// The fence the value was written under.
    pub fence: Fence,
    /// The value, as stored.
    pub value: Vec<u8>,
}

/// How a value is written.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PutOptions {
    /// The job the writer holds, recorded beside the fence where the resource keeps metadata
    /// (an object's `lease-job`).
    pub job: Option<String>,
    /// How long the value lives (Redis only; others refuse it). The fence never expires.
    pub expiry: Option<Duration>,
}

/// A store that keeps, per key, a value and the highest fence that wrote it.
///
/// # Contract
/// - `put` stores `value` at `key` iff `fence` is at least the highest fence the resource has
///   seen for `key` (`decide_guard`), and records `fence` as that highest; the check and the
///   write are one atomic step inside the resource, so two holders racing can never
///   interleave them. An equal fence is admitted (a holder retrying its own write).
/// - A refusal names the presented and the current fence and changes nothing.
/// - `delete` removes the value under the same rule; the fence stays, so a fence never goes
///   down, not even after a delete.
/// - `get` answers the value and the fence it was written under, or `None` when there is no
///   value (never written, or deleted).
///
/// # Errors
/// [`GuardError`] when the resource cannot be reached or fails: never taken as admitted. A
/// write whose answer was lost may or may not have been applied (`GuardError::Indeterminate`).
///
/// # Cancellation
/// Dropping a future does not undo a write already sent; `get` tells what is stored.
#[async_trait]
pub trait ValueGuard: Send + Sync {
    /// Writes `value` at `key` from a holder of `fence`, or refuses it.
    async fn put(
        &self,
        key: &GuardKey,
        value: &[u8],
        fence: Fence,
        options: &PutOptions,
    ) -> Result<Admission, GuardError>;

    /// The value at `key` and its fence, if there is a value.
    async fn get(&self, key: &GuardKey) -> Result<Option<Guarded>, GuardError>;

    /// Deletes the value at `key` from a holder of `fence`, or refuses it; the fence stays.
    async fn delete(&self, key: &GuardKey, fence: Fence) -> Result<Admission, GuardError>;

    /// What the resource is, for metrics and messages (`memory`, `redis`, `s3`, ...).
    fn resource(&self) -> &'static str;
}

/// Refuses an expiry on a resource that cannot expire values.
///
/// # Errors
/// [`GuardError::Unsupported`] when `options` asks for an expiry.
pub fn no_expiry(resource: &str, options: &PutOptions) -> Result<(), GuardError> {
    match options.expiry {
        Some(_) => Err(GuardError::Unsupported(format!(
            "{resource} values cannot expire; an expiry is for Redis"
        ))),
        None => Ok(()),
    }
}

/// A guard whose every call is a `tracing` span (`resource`, `key`, `fence`, `outcome`),
/// silent unless the application installs a subscriber.
#[derive(Clone)]
pub struct Traced(pub std::sync::Arc<dyn ValueGuard>);

impl std::fmt::Debug for Traced {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Traced").field(&self.0.resource()).finish()
    }
}

fn outcome(admission: &Result<Admission, GuardError>) -> &'static str {
    match admission {
        Ok(Ok(())) => "admitted",
        Ok(Err(_)) => "refused",
        Err(_) => "error",
    }
}

#[async_trait]
impl ValueGuard for Traced {
    async fn put(
        &self,
        key: &GuardKey,
        value: &[u8],
        fence: Fence,
        options: &PutOptions,
    ) -> Result<Admission, GuardError> {
        use tracing::Instrument;
        let span = tracing::info_span!(
            "guard.put",
            resource = self.0.resource(),
            key = key.as_str(),
            fence = fence.get(),
            outcome = tracing::field::Empty
        );
        let answer = self
            .0
            .put(key, value, fence, options)
            .instrument(span.clone())
            .await;
        span.record("outcome", outcome(&answer));
        answer
    }

    async fn get(&self, key: &GuardKey) -> Result<Option<Guarded>, GuardError> {
        use tracing::Instrument;
        let span = tracing::info_span!(
            "guard.get",
            resource = self.0.resource(),
            key = key.as_str()
        );
        self.0.get(key).instrument(span).await
    }

    async fn delete(&self, key: &GuardKey, fence: Fence) -> Result<Admission, GuardError> {
        use tracing::Instrument;
        let span = tracing::info_span!(
            "guard.delete",
            resource = self.0.resource(),
            key = key.as_str(),
            fence = fence.get(),
            outcome = tracing::field::Empty
        );
        let answer = self.0.delete(key, fence).instrument(span.clone()).await;
        span.record("outcome", outcome(&answer));
        answer
    }

    fn resource(&self) -> &'static str {
        self.0.resource()
    }
}

#[derive(Debug, Default)]
struct Slot {
    fence: Option<Fence>,
    value: Option<Vec<u8>>,
}

/// A value guard in process memory (the reference every backend is held to).
#[derive(Debug, Default)]
pub struct MemoryValueGuard {
    slots: Mutex<HashMap<GuardKey, Slot>>,
}

impl MemoryValueGuard {
    /// An empty guard.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    fn with_slot<T>(
        &self,
        key: &GuardKey,
        f: impl FnOnce(&mut Slot) -> T,
    ) -> Result<T, GuardError> {
        let mut slots = self
            .slots
            .lock()
            .map_err(|_| GuardError::Storage("the in-memory guard's lock is poisoned".into()))?;
        Ok(f(slots.entry(key.clone()).or_default()))
    }
}

#[async_trait]
impl ValueGuard for MemoryValueGuard {
    async fn put(
        &self,
        key: &GuardKey,
        value: &[u8],
        fence: Fence,
        options: &PutOptions,
    ) -> Result<Admission, GuardError> {
        no_expiry("memory", options)?;
        let admission = self.with_slot(key, |slot| {
            decide_guard(slot.fence, fence).map(|keep| {
                slot.fence = Some(keep);
                slot.value = Some(value.to_vec());
            })
        })?;
        Ok(counted_in("memory", admission))
    }

    async fn get(&self, key: &GuardKey) -> Result<Option<Guarded>, GuardError> {
        self.with_slot(key, |slot| match (&slot.value, slot.fence) {
            (Some(value), Some(fence)) => Some(Guarded {
                fence,
                value: value.clone(),
            }),
            _ => None,
        })
    }

    async fn delete(&self, key: &GuardKey, fence: Fence) -> Result<Admission, GuardError> {
        let admission = self.with_slot(key, |slot| {
            decide_guard(slot.fence, fence).map(|keep| {
                slot.fence = Some(keep);
                slot.value = None;
            })
        })?;
        Ok(counted_in("memory", admission))
    }

    fn resource(&self) -> &'static str {
        "memory"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_checked_before_anything_is_written() {
        assert!(GuardKey::new("reports/2026/12.csv").is_ok());
        for bad in [
            String::new(),
            "a\nb".into(),
            "a\0b".into(),
            "x".repeat(1025),
        ] {
            assert!(
                matches!(GuardKey::new(bad.clone()), Err(GuardError::InvalidKey(_))),
                "{bad:?}"
            );
        }
    }
}

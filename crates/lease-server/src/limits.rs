//! Per-principal rate limits: a token bucket for each principal and kind of request, so that
//! one busy client cannot crowd out the others, and a lease holder's writes (renew, complete,
//! fail, release) have a bucket of their own that claims and reads never drain: renewals are
//! not starved by claims. Buckets are per server process (a limit, not shared state).

use std::collections::HashMap;
use std::sync::Mutex;

use lease_domain::Principal;
use tokio::time::Instant;

/// The kind of request a bucket counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Class {
    /// A lease holder's write.
    Holder,
    /// Everything else.
    Other,
}

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    last: Instant,
}

/// The buckets of one server.
#[derive(Debug)]
pub(crate) struct RateLimits {
    per_second: f64,
    burst: f64,
    buckets: Mutex<HashMap<(Principal, Class), Bucket>>,
}

/// The most buckets kept; past it, full buckets are dropped (they hold nothing to remember).
const MAX_BUCKETS: usize = 100_000;

impl RateLimits {
    /// `per_second` requests a second for each principal and class, in bursts of up to
    /// `burst`; 0 turns the limit off.
    pub(crate) fn new(per_second: f64, burst: f64) -> Self {
        Self {
            per_second,
            burst: burst.max(1.0),
            buckets: Mutex::default(),
        }
    }

    /// Takes one request from the principal's bucket; `Err(seconds)` until one is there.
    pub(crate) fn admit(&self, principal: &Principal, class: Class) -> Result<(), u64> {
        if self.per_second <= 0.0 {
            return Ok(());
        }
        let now = Instant::now();
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        if buckets.len() >= MAX_BUCKETS {
            let (rate, burst) = (self.per_second, self.burst);
            buckets
                .retain(|_, b| b.tokens + now.duration_since(b.last).as_secs_f64() * rate < burst);
        }
        let bucket = buckets.entry((principal.clone(), class)).or_insert(Bucket {
            tokens: self.burst,
            last: now,
        });
        let refill = now.duration_since(bucket.last).as_secs_f64() * self.per_second;
        bucket.tokens = (bucket.tokens + refill).min(self.burst);
        bucket.last = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            Ok(())
        } else {
            let wait = (1.0 - bucket.tokens) / self.per_second;
            // Whole seconds, rounded up, at least one (Retry-After has no fractions).
            let wait = std::time::Duration::try_from_secs_f64(wait)
                .map_or(1, |d| d.as_secs() + u64::from(d.subsec_nanos() > 0));
            Err(wait.max(1))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_is_admitted_then_refused_and_holders_have_their_own_bucket() {
        let limits = RateLimits::new(2.0, 3.0);
        let ci = Principal::new("ci").unwrap();
        let cd = Principal::new("cd").unwrap();
        for _ in 0..3 {
            assert_eq!(limits.admit(&ci, Class::Other), Ok(()));
        }
        assert_eq!(limits.admit(&ci, Class::Other), Err(1));
        // Claims spent ci's bucket; its renewals and other principals are untouched.
        assert_eq!(limits.admit(&ci, Class::Holder), Ok(()));
        assert_eq!(limits.admit(&cd, Class::Other), Ok(()));
        let off = RateLimits::new(0.0, 1.0);
        for _ in 0..1000 {
            assert_eq!(off.admit(&ci, Class::Other), Ok(()));
        }
    }
}

//! Where a worker's time comes from: the system clock, or a manual clock that tests move by hand.
//!
//! The domain never reads a clock; the runtime reads this one and passes `now` to every call.

use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::future::BoxFuture;
use tokio::sync::watch;

/// A source of `now` (Unix seconds) and of sleeps measured on the same clock.
pub trait Clock: Send + Sync {
    /// The current time in seconds.
    fn now(&self) -> f64;

    /// Resolves once `seconds` have passed on this clock.
    fn sleep(&self, seconds: f64) -> BoxFuture<'static, ()>;
}

/// A time as Unix seconds: negative before 1970.
#[must_use]
pub fn unix_seconds(time: SystemTime) -> f64 {
    match time.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_secs_f64(),
        Err(e) => -e.duration().as_secs_f64(),
    }
}

/// The system clock (Unix seconds) with Tokio's timers.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> f64 {
        unix_seconds(SystemTime::now())
    }

    fn sleep(&self, seconds: f64) -> BoxFuture<'static, ()> {
        // A negative (or NaN) time has passed already; one too long for a Duration is forever.
        let duration = Duration::try_from_secs_f64(seconds).unwrap_or(if seconds > 0.0 {
            Duration::MAX
        } else {
            Duration::ZERO
        });
        Box::pin(tokio::time::sleep(duration))
    }
}

/// A clock that moves only when told to: sleeps end when [`ManualClock::advance`] passes them.
#[derive(Debug)]
pub struct ManualClock {
    now: Mutex<f64>,
    moved: watch::Sender<f64>,
}

impl ManualClock {
    /// A clock reading `start`.
    #[must_use]
    pub fn new(start: f64) -> Self {
        Self {
            now: Mutex::new(start),
            moved: watch::Sender::new(start),
        }
    }

    /// Moves the clock forward by `seconds` and wakes every sleep that has ended.
    pub fn advance(&self, seconds: f64) {
        let mut now = self
            .now
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *now += seconds;
        self.moved.send_replace(*now);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> f64 {
        *self
            .now
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn sleep(&self, seconds: f64) -> BoxFuture<'static, ()> {
        let until = self.now() + seconds;
        let mut moved = self.moved.subscribe();
        Box::pin(async move {
            // The sender lives as long as the clock; if it is dropped, the sleep ends.
            let _ = moved.wait_for(|now| *now >= until).await;
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_before_1970_are_negative_seconds() {
        assert_eq!(unix_seconds(UNIX_EPOCH + Duration::from_millis(1500)), 1.5);
        assert_eq!(unix_seconds(UNIX_EPOCH - Duration::from_millis(2500)), -2.5);
        assert_eq!(unix_seconds(UNIX_EPOCH), 0.0);
    }

    #[test]
    fn a_sleep_too_long_for_a_duration_is_forever_and_a_negative_one_is_over() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        runtime.block_on(async {
            let clock = SystemClock;
            let forever = tokio::time::timeout(Duration::from_millis(50), clock.sleep(1e20)).await;
            assert!(forever.is_err(), "a sleep of 1e20 s ended at once");
            let over = tokio::time::timeout(Duration::from_millis(500), clock.sleep(-3.0)).await;
            assert!(over.is_ok());
        });
    }
}

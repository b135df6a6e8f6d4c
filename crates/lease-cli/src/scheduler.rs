//! The scheduler loop the long-running commands run beside their work (`lease serve`, and
//! `lease work` on a database): the store's schedules until stopped, a line on stderr for each
//! tick fired and for each new error.

use std::sync::Arc;
use std::time::Duration;

use lease_ports::control::Controlled;
use lease_worker::CancellationToken;

use crate::render::escape_controls;

/// Where `lease work` and `lease serve` say things as they go (stderr, from `main`).
pub(crate) type Say = Arc<dyn Fn(&str) + Send + Sync>;

/// Runs the store's schedules until `stop`, a line on stderr for each tick fired and for each
/// new error (the same error again is not repeated).
pub(crate) async fn run_schedules(
    store: Arc<dyn Controlled>,
    clock: lease_schedule::Clock,
    recheck: Duration,
    stop: CancellationToken,
    who: &'static str,
    say: Say,
) {
    let last_error = std::sync::Mutex::new(String::new());
    lease_schedule::run(store, clock, recheck, stop, |pass| {
        let error = match pass {
            Ok(pass) => {
                for fired in &pass.fired {
                    say(&format!("{who}: {}", crate::control::pass_line(fired)));
                }
                pass.unreadable
                    .iter()
                    .map(|(name, why)| {
                        format!(
                            "schedule {} cannot be read: {why}",
                            escape_controls(name.as_str())
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("; ")
            }
            Err(e) => format!("the schedules could not be run: {e}"),
        };
        let mut last = last_error
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !error.is_empty() && *last != error {
            say(&format!("{who}: {}", escape_controls(&error)));
        }
        *last = error;
    })
    .await;
}

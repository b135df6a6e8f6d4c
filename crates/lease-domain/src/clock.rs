//! Whose clock decides `now`: the caller's (the seed contract) or the store's (one authoritative
//! clock for every machine), and the skew bound that refuses a caller whose clock has drifted.
//!
//! A store reads its own clock inside the write's transaction and asks [`ClockMode::resolve`]
//! what to decide with: the caller's command as it is, the command re-timed to the store's
//! `now` (keeping the caller's lease length), or a [`ClockRefused`] that changes nothing.

use crate::command::Command;
use crate::values::{InputError, LeaseTerm, Timestamp, Ttl};

/// Whose clock decides `now` for a store, chosen when the store is opened.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ClockMode {
    /// The caller's `now` decides (the seed contract). With `max_skew`, a caller `now` further
    /// than that from the store's clock is refused.
    Caller {
        /// The largest accepted distance between the caller's `now` and the store's clock.
        max_skew: Option<Ttl>,
    },
    /// The store's clock decides; of the caller's term only the lease length (`until - now`)
    /// is kept, and the caller's `now` is otherwise ignored.
    Store,
}

impl Default for ClockMode {
    /// The seed contract: the caller's `now`, unchecked.
    fn default() -> Self {
        ClockMode::Caller { max_skew: None }
    }
}

/// A caller `now` further from the store's clock than the bound allows; nothing was changed.
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
#[error(
    "clock skew: the caller's now is {caller} but the store's clock reads {store}, \
     {distance} s apart, over the bound of {bound} s"
)]
pub struct ClockSkew {
    /// The caller's `now`.
    pub caller: f64,
    /// The store's clock, read in the same transaction.
    pub store: f64,
    /// How far apart they are, in seconds.
    pub distance: f64,
    /// The bound the store was opened with.
    pub bound: f64,
}

/// Why a command cannot be decided under the store's clock mode; nothing was changed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ClockRefused {
    /// The caller's clock is too far from the store's.
    #[error(transparent)]
    Skew(#[from] ClockSkew),
    /// Re-timed to the store's `now`, the lease's `until` is not a valid time.
    #[error(transparent)]
    Input(#[from] InputError),
}

impl ClockMode {
    /// Whether deciding `command` needs the store's clock (a store reads it only then).
    #[must_use]
    pub fn needs_clock(&self, command: &Command) -> bool {
        match self {
            ClockMode::Caller { max_skew: None } => false,
            ClockMode::Caller { max_skew: Some(_) } | ClockMode::Store => {
                command.caller_now().is_some()
            }
        }
    }

    /// Whether a multi-job operation at a caller's `now` (`claim_next`) needs the store's clock.
    #[must_use]
    pub fn needs_clock_for_term(&self) -> bool {
        !matches!(self, ClockMode::Caller { max_skew: None })
    }

    /// The command to decide, given the store's clock `store_now` (ignored when
    /// [`ClockMode::needs_clock`] is false).
    ///
    /// # Errors
    /// [`ClockRefused::Skew`] when the caller's `now` is over the bound from `store_now`, and
    /// [`ClockRefused::Input`] when re-timing the lease overflows.
    pub fn resolve(
        &self,
        command: &Command,
        store_now: Timestamp,
    ) -> Result<Command, ClockRefused> {
        let Some(caller) = command.caller_now() else {
            return Ok(command.clone());
        };
        match self {
            ClockMode::Caller { max_skew } => {
                check_skew(caller, store_now, *max_skew)?;
                Ok(command.clone())
            }
            ClockMode::Store => Ok(command.at(store_now)?),
        }
    }

    /// The lease term to decide a `claim_next` with, as [`ClockMode::resolve`] does for one job.
    ///
    /// # Errors
    /// As [`ClockMode::resolve`].
    pub fn resolve_term(
        &self,
        term: LeaseTerm,
        store_now: Timestamp,
    ) -> Result<LeaseTerm, ClockRefused> {
        match self {
            ClockMode::Caller { max_skew } => {
                check_skew(term.now(), store_now, *max_skew)?;
                Ok(term)
            }
            ClockMode::Store => Ok(term.at(store_now)?),
        }
    }
}

fn check_skew(caller: Timestamp, store: Timestamp, bound: Option<Ttl>) -> Result<(), ClockSkew> {
    let Some(bound) = bound else {
        return Ok(());
    };
    let distance = (caller.get() - store.get()).abs();
    if distance > bound.get() {
        return Err(ClockSkew {
            caller: caller.get(),
            store: store.get(),
            distance,
            bound: bound.get(),
        });
    }
    Ok(())
}

impl crate::values::Renewal {
    /// The same report at `now` instead: a renewal keeps its lease length.
    ///
    /// # Errors
    /// As [`LeaseTerm::at`].
    pub fn at(self, now: Timestamp) -> Result<Self, InputError> {
        Ok(match self {
            Self::Renew(term) => Self::Renew(term.at(now)?),
            Self::Keep(_) => Self::Keep(now),
        })
    }
}

impl LeaseTerm {
    /// The same lease length starting at `now` instead.
    ///
    /// # Errors
    /// [`InputError::UntilOverflow`] or [`InputError::TtlBelowResolution`] for the new term.
    pub fn at(self, now: Timestamp) -> Result<LeaseTerm, InputError> {
        let length = self.until().get() - self.now().get();
        // `until > now` was checked when the term was made, so the length is positive and
        // finite unless the subtraction overflowed; either way `Ttl::new` says what is wrong.
        let moved = LeaseTerm::from_parts(now, Ttl::new(length)?)?.in_epoch(self.epoch());
        Ok(match self.token() {
            Some(token) => moved.with_token(token),
            None => moved,
        })
    }
}

impl Command {
    /// The same command with a claim's term in the store's `epoch` ([`LeaseTerm::in_epoch`]);
    /// any other command is unchanged (only a claim hands out a fence).
    #[must_use]
    pub fn in_epoch(self, epoch: crate::values::Epoch) -> Command {
        match self {
            Command::Claim(owner, term) => Command::Claim(owner, term.in_epoch(epoch)),
            Command::AsHolder(as_of, inner) => {
                Command::AsHolder(as_of, Box::new(inner.in_epoch(epoch)))
            }
            other => other,
        }
    }

    /// The caller's `now` the command carries, if it carries one.
    #[must_use]
    pub fn caller_now(&self) -> Option<Timestamp> {
        match self {
            Command::Claim(_, term) | Command::Renew(_, _, term) => Some(term.now()),
            Command::Progress(_, _, renewal, _) => Some(renewal.now()),
            Command::Complete(_, _, now, _)
            | Command::HoldGroup(_, _, now, _)
            | Command::Checkpoint(_, _, now, _)
            | Command::Fail(_, _, now, _, _)
            | Command::Cancel(now)
            | Command::Retry(now) => Some(*now),
            Command::Enqueue
            | Command::EnqueueWith(_)
            | Command::Release(_, _)
            | Command::GiveBack(_, _) => None,
            Command::AsHolder(_, inner) => inner.caller_now(),
        }
    }

    /// The same command at `now` instead of the caller's time; a lease keeps its length.
    ///
    /// # Errors
    /// As [`LeaseTerm::at`].
    pub fn at(&self, now: Timestamp) -> Result<Command, InputError> {
        Ok(match self {
            Command::Claim(owner, term) => Command::Claim(owner.clone(), term.at(now)?),
            Command::Renew(owner, fence, term) => {
                Command::Renew(owner.clone(), *fence, term.at(now)?)
            }
            Command::Progress(owner, fence, renewal, text) => {
                Command::Progress(owner.clone(), *fence, renewal.at(now)?, text.clone())
            }
            Command::Complete(owner, fence, _, result) => {
                Command::Complete(owner.clone(), *fence, now, result.clone())
            }
            Command::Fail(owner, fence, _, error, retry) => {
                Command::Fail(owner.clone(), *fence, now, error.clone(), *retry)
            }
            Command::HoldGroup(owner, fence, _, until) => {
                Command::HoldGroup(owner.clone(), *fence, now, *until)
            }
            Command::Checkpoint(owner, fence, _, checkpoint) => {
                Command::Checkpoint(owner.clone(), *fence, now, checkpoint.clone())
            }
            Command::Cancel(_) => Command::Cancel(now),
            Command::Retry(_) => Command::Retry(now),
            Command::AsHolder(credential, inner) => {
                Command::AsHolder(credential.clone(), Box::new(inner.at(now)?))
            }
            other => other.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::values::Owner;

    fn t(x: f64) -> Timestamp {
        Timestamp::new(x).unwrap()
    }

    #[test]
    fn store_mode_moves_a_claim_to_the_store_clock_keeping_its_length() {
        let claim = Command::Claim(Owner::new("a").unwrap(), LeaseTerm::new(5.0, 30.0).unwrap());
        let resolved = ClockMode::Store.resolve(&claim, t(1000.0)).unwrap();
        assert_eq!(
            resolved,
            Command::Claim(
                Owner::new("a").unwrap(),
                LeaseTerm::new(1000.0, 30.0).unwrap()
            )
        );
    }

    #[test]
    fn caller_mode_without_a_bound_never_needs_the_store_clock_and_keeps_the_command() {
        let mode = ClockMode::default();
        let cancel = Command::Cancel(t(5.0));
        assert!(!mode.needs_clock(&cancel));
        assert_eq!(mode.resolve(&cancel, t(1e9)).unwrap(), cancel);
    }

    #[test]
    fn a_bound_refuses_a_caller_just_past_it_and_accepts_one_at_it() {
        let mode = ClockMode::Caller {
            max_skew: Some(Ttl::new(2.0).unwrap()),
        };
        assert!(mode.needs_clock(&Command::Retry(t(1.0))));
        assert!(mode.resolve(&Command::Retry(t(102.0)), t(100.0)).is_ok());
        assert!(mode.resolve(&Command::Retry(t(98.0)), t(100.0)).is_ok());
        let refused = mode
            .resolve(&Command::Retry(t(102.5)), t(100.0))
            .unwrap_err();
        assert_eq!(
            refused,
            ClockRefused::Skew(ClockSkew {
                caller: 102.5,
                store: 100.0,
                distance: 2.5,
                bound: 2.0
            })
        );
        assert!(refused.to_string().contains("102.5") && refused.to_string().contains("100"));
    }

    #[test]
    fn commands_without_a_time_are_never_checked_or_moved() {
        let mode = ClockMode::Caller {
            max_skew: Some(Ttl::new(1.0).unwrap()),
        };
        let release = Command::Release(Owner::new("a").unwrap(), crate::values::Fence::ZERO);
        assert!(!mode.needs_clock(&release));
        assert!(!ClockMode::Store.needs_clock(&Command::Enqueue));
        assert_eq!(mode.resolve(&release, t(1e9)).unwrap(), release);
    }

    #[test]
    fn a_term_moved_to_a_store_clock_where_it_would_overflow_is_invalid_input() {
        let term = LeaseTerm::new(0.0, 1e308).unwrap();
        let refused = ClockMode::Store
            .resolve_term(term, t(f64::MAX))
            .unwrap_err();
        assert!(matches!(
            refused,
            ClockRefused::Input(InputError::UntilOverflow { .. })
        ));
    }
}

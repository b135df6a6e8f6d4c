//! Pure lease rules: who may claim, renew, complete or release a job, and the fence invariants.
//!
//! This crate has no I/O, no clock and no async: `now` is always a parameter.
//! Adapters load a job, call one `decide_*` function, and store what it returns,
//! all inside one transaction; a refusal means they write nothing.
//!
//! The invariants these rules keep, checked by the property tests:
//! - a job's fence only goes up, by one per successful claim, and is never reused;
//! - only the holder of the current fence can renew, complete or release;
//! - a done job never changes again, so a stored result survives every stale writer;
//! - a refused operation changes nothing.

mod command;
mod rules;
mod values;

pub use command::{Command, Outcome};
pub use rules::{
    ClaimRefused, Job, WriteRefused, decide_claim, decide_complete, decide_release, decide_renew,
};
pub use values::{Fence, InputError, JobId, JobResult, LeaseTerm, Owner, Timestamp, Ttl};

#[cfg(test)]
mod tests;

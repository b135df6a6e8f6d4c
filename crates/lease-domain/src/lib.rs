//! Pure lease and queue rules: who may claim, renew, complete, release, fail, cancel or retry a
//! job, which job `claim_next` leases, and the fence invariants.
//!
//! This crate has no I/O, no clock and no async: `now` is always a parameter.
//! Adapters load a job, call one `decide_*` function, and store what it returns,
//! all inside one transaction; a refusal means they write nothing.
//!
//! The invariants these rules keep, checked by the property tests:
//! - a job's fence only goes up, by one per successful claim, and is never reused;
//! - only the holder of the current fence can renew, complete or release;
//! - a done job never changes again, so a stored result survives every stale writer;
//! - a refused operation changes nothing;
//! - no job is leased before its `run_at`, a cancelled or dead job is never leased, and
//!   `claim_next` never leases a job more than its `max_attempts` times.

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

mod access;
mod attempt;
mod audit;
mod clock;
mod command;
mod control;
mod effects;
mod enqueue;
mod groups;
mod guard;
mod migrate;
mod queue;
mod rate;
mod rules;
mod schedule;
mod sealed;
mod trace;
mod turns;
mod values;
mod workflow;

pub use access::{
    Credential, KeyId, KeyRefused, MAX_LIVE_KEYS, Principal, Scope, decide_new_key,
    judge_credential, may_act_as, owner_within,
};
pub use attempt::{
    ATTEMPTS_KEPT, Attempt, AttemptEnd, Attempts, OpenAttempt, TIMED_OUT, trims_attempts,
};
pub use audit::{AuditReason, Refusal, holder_refusal, reclaim_delay, reclaim_delay_at, refusal};
pub use clock::{ClockMode, ClockRefused, ClockSkew};
pub use command::{Command, HolderWrite, Outcome};
pub use control::{
    Concurrency, Grant, Limits, Pause, QueueChange, QueueSettings, Throttle, decide_queue_change,
};
pub use effects::{Change, Decided};
pub use enqueue::{EnqueueFields, FieldRefused};
pub use groups::{GroupGate, GroupTurn};
pub use guard::{GuardRefused, decide_guard};
pub use migrate::{ImportDecision, carried_epoch, decide_import, raise_fence};
pub use queue::{
    Backoff, Ended, EnqueueSpec, ErrorText, GroupKey, OnParentFailure, Payload, ProgressText,
    QueueName, Retry, Status,
};
pub use rate::Rate;
pub use rules::{
    ClaimKey, ClaimRefused, Failed, Job, LEASE_EXPIRED, NextDecision, RELEASED_AT_LAST_ATTEMPT,
    WriteRefused, claim_order, decide_cancel, decide_checkpoint, decide_claim, decide_claim_next,
    decide_complete, decide_fail, decide_give_back, decide_hold_group, decide_progress,
    decide_release, decide_renew, decide_retry, is_purgeable, judge_holder,
};
pub use schedule::{
    CatchUp, MAX_CATCH_UP, ON_TIME, Schedule, ScheduleName, ScheduleSpec, decide_fire,
    decide_put_schedule, decide_ticks, run_job_id, tick_job_id, utc_text,
};
pub use sealed::{
    Envelope, KEY_NAME_MAX, SEALED_MAGIC, SEALED_NONCE_LEN, SEALED_PAYLOAD_RESERVED,
    SEALED_TAG_LEN, SEALED_TEXT_PREFIX, SEALED_TEXT_RESERVED, Sealed, SealedKind, is_key_name,
    payload_envelope, result_envelope, sealed_associated_data, sealed_label, sealed_payload,
    sealed_payload_header, sealed_result,
};
pub use trace::{Join, TRACESTATE_MAX, TraceContext};
pub use turns::Turn;
pub use values::{
    AccessError, Epoch, Fence, InputError, JobId, JobResult, LeaseTerm, MAX_CHECKPOINT_NAME_BYTES,
    MAX_CHECKPOINT_VALUE_BYTES, MAX_CHECKPOINTS, MAX_NAME_BYTES, MAX_PARENTS, Owner, Renewal,
    Timestamp, TokenDigest, Ttl, WorkflowRefused,
};
pub use workflow::{
    Checkpoint, CheckpointName, CheckpointValue, ChildFate, KeptCheckpoint, Propagation, Waiting,
    cancelled_by, check_workflow, checkpoint_fits, decide_child, finishes, judges_parents,
    propagate,
};

#[cfg(test)]
mod tests;

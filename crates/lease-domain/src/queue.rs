//! The work-queue values: queue names, payloads, what `enqueue` may set, job statuses, and the
//! retry policy with its backoff. All pure; `now` is always a parameter.

use std::fmt;

use crate::trace::TraceContext;
use crate::values::{InputError, JobId, Timestamp, Ttl, WorkflowRefused};

/// The queue a job waits in: any non-empty text without NUL characters; `default` by default.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct QueueName(String);

impl QueueName {
    /// The queue a job is in when `enqueue` names none.
    pub const DEFAULT: &'static str = "default";

    /// Checks and wraps a queue name.
    ///
    /// # Errors
    /// [`InputError::EmptyQueue`], [`InputError::NameTooLong`] or [`InputError::NulInText`].
    pub fn new(name: impl Into<String>) -> Result<Self, InputError> {
        let name = name.into();
        if name.len() > crate::values::MAX_NAME_BYTES {
            return Err(InputError::NameTooLong {
                what: "queue name",
                len: name.len(),
            });
        }
        Self::stored(name)
    }

    /// Wraps a queue name read back from a store (no length limit; see `JobId::stored`).
    ///
    /// # Errors
    /// [`InputError::EmptyQueue`] or [`InputError::NulInText`].
    pub fn stored(name: impl Into<String>) -> Result<Self, InputError> {
        let name = name.into();
        if name.is_empty() {
            return Err(InputError::EmptyQueue);
        }
        if name.contains('\0') {
            return Err(InputError::NulInText { what: "queue" });
        }
        Ok(Self(name))
    }

    /// The name as text.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Default for QueueName {
    fn default() -> Self {
        Self(Self::DEFAULT.to_owned())
    }
}

impl fmt::Display for QueueName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(&self.0)
    }
}

/// The group a job belongs to inside its queue (a customer, an account, an upstream API): the
/// partition key the queue's group rules count by. Any text of 1 to [`crate::MAX_NAME_BYTES`]
/// bytes without NUL characters, like a queue name; a job without one is limited by no group
/// rule (as if it were alone in its own group).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupKey(String);

impl GroupKey {
    /// Checks and wraps a group key.
    ///
    /// # Errors
    /// [`InputError::EmptyGroup`], [`InputError::NameTooLong`] or [`InputError::NulInText`].
    pub fn new(key: impl Into<String>) -> Result<Self, InputError> {
        let key = key.into();
        if key.len() > crate::values::MAX_NAME_BYTES {
            return Err(InputError::NameTooLong {
                what: "group",
                len: key.len(),
            });
        }
        Self::stored(key)
    }

    /// Wraps a group key read back from a store (no length limit; see `JobId::stored`).
    ///
    /// # Errors
    /// [`InputError::EmptyGroup`] or [`InputError::NulInText`].
    pub fn stored(key: impl Into<String>) -> Result<Self, InputError> {
        let key = key.into();
        if key.is_empty() {
            return Err(InputError::EmptyGroup);
        }
        if key.contains('\0') {
            return Err(InputError::NulInText { what: "group" });
        }
        Ok(Self(key))
    }

    /// The key as text.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for GroupKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(&self.0)
    }
}

/// A job's payload: opaque bytes up to a size limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Payload(Vec<u8>);

impl Payload {
    /// The default size limit: 1 MiB.
    pub const DEFAULT_LIMIT: usize = 1 << 20;

    /// Checks a payload as a producer gives it: its size against `limit` bytes, and that one
    /// beginning with `0xFF "lease"` is a well-formed sealed payload
    /// ([`crate::payload_envelope`]): the start is reserved, so plain bytes are never taken for
    /// a sealed value, nor a cut or unknown envelope for plain bytes.
    ///
    /// # Errors
    /// [`InputError::PayloadTooLarge`], or [`InputError::Envelope`] saying what is wrong.
    pub fn new(bytes: Vec<u8>, limit: usize) -> Result<Self, InputError> {
        if bytes.len() > limit {
            return Err(InputError::PayloadTooLarge {
                len: bytes.len(),
                limit,
            });
        }
        if let crate::Envelope::Malformed(why) = crate::payload_envelope(&bytes) {
            return Err(InputError::Envelope {
                what: "payload",
                start: "0xFF \"lease\"",
                why,
            });
        }
        Ok(Self(bytes))
    }

    /// A payload read back from where it was kept (a schedule's job): taken as it is, since it
    /// was checked when it was given.
    #[must_use]
    pub fn stored(bytes: Vec<u8>) -> Self {
        Self(bytes)
    }

    /// The bytes.
    #[must_use]
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

/// The text of a failure, kept with the job: any text without NUL characters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorText(String);

impl ErrorText {
    /// Checks and wraps an error text.
    ///
    /// # Errors
    /// [`InputError::NulInText`].
    pub fn new(text: impl Into<String>) -> Result<Self, InputError> {
        let text = text.into();
        if text.contains('\0') {
            return Err(InputError::NulInText { what: "error" });
        }
        Ok(Self(text))
    }

    /// Wraps any text, replacing NUL characters (which not every store can hold) with U+FFFD.
    #[must_use]
    pub fn lossy(text: impl Into<String>) -> Self {
        Self(text.into().replace('\0', "\u{FFFD}"))
    }

    /// The text.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// What a running job last said of its progress: a short text without NUL characters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProgressText(String);

impl ProgressText {
    /// The longest progress text, in bytes of UTF-8.
    pub const MAX_BYTES: usize = 1024;

    /// Checks and wraps a progress text.
    ///
    /// # Errors
    /// [`InputError::ProgressTooLong`] or [`InputError::NulInText`].
    pub fn new(text: impl Into<String>) -> Result<Self, InputError> {
        let text = text.into();
        if text.len() > Self::MAX_BYTES {
            return Err(InputError::ProgressTooLong(text.len()));
        }
        if text.contains('\0') {
            return Err(InputError::NulInText { what: "progress" });
        }
        Ok(Self(text))
    }

    /// The text.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// What `enqueue` stores with a new job besides the seed's defaults.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct EnqueueSpec {
    /// The queue (`default` unless given).
    pub queue: QueueName,
    /// Higher first; 0 by default.
    pub priority: i64,
    /// Not claimable before this time; `None` (the default) means due at once.
    pub run_at: Option<Timestamp>,
    /// How many times `claim_next` may lease the job; `None` means [`EnqueueSpec::DEFAULT_MAX_ATTEMPTS`].
    /// 0 and 1 both mean one attempt, no retry.
    pub max_attempts: Option<u32>,
    /// The payload, if any.
    pub payload: Option<Payload>,
    /// When the caller enqueued it (`None`: not said). Kept as the new job's `updated`, so an
    /// operator can see how long a due job has waited; `lease` and `lease serve` give it.
    pub enqueued_at: Option<Timestamp>,
    /// How long one attempt may run before its worker stops it and fails it as "timed out"
    /// (`None`: the queue's default, if it has one).
    pub timeout: Option<Ttl>,
    /// Whether an enqueue of an id whose job is done, dead or cancelled runs it again (back to
    /// pending, its attempts from 0, its fence going on and its last result kept until the new
    /// run completes). A pending or running job is never touched either way.
    pub replace_finished: bool,
    /// The job's group in its queue (`None`: no group, limited by no group rule).
    pub group: Option<GroupKey>,
    /// Debounce: the job is due this long after `enqueued_at` (and not before `run_at`), and
    /// an enqueue of its id while it still waits to start takes its payload and pushes its
    /// due time to this long from that enqueue ([`crate::Job::debounced`]). Without
    /// `enqueued_at` it has no effect.
    pub debounce: Option<Ttl>,
    /// The jobs it runs after (`--after`): it waits until they have finished, as
    /// `on_parent_failure` says. Each must be stored or in the same batch.
    pub after: Vec<JobId>,
    /// What it does when a parent ends dead or cancelled (cancel, by default).
    pub on_parent_failure: OnParentFailure,
    /// The W3C trace context of the enqueue (the producer's span), kept beside the job so its
    /// attempts join the producer's trace; set when the enqueue makes the job or runs it
    /// again ([`crate::Command::sets_trace`]).
    pub trace: Option<TraceContext>,
}

impl EnqueueSpec {
    /// The attempts a job gets when `enqueue` names none.
    pub const DEFAULT_MAX_ATTEMPTS: u32 = 5;

    /// The fields of a job as the Python package's dicts name them, its id first: the spec's
    /// own ([`crate::EnqueueFields`]), but `enqueued_at`, which the enqueuer's clock gives, and
    /// the trace context, which the current span gives.
    pub const FIELDS: [&'static str; 12] = [
        "id",
        "queue",
        "priority",
        "run_at",
        "max_attempts",
        "payload",
        "timeout",
        "replace",
        "group",
        "debounce",
        "after",
        "on_parent_failure",
    ];

    /// When a job enqueued as this spec says is due: the later of `run_at` and, with a
    /// debounce, `enqueued_at` plus it; `None`: at once.
    #[must_use]
    pub fn due(&self) -> Option<Timestamp> {
        let debounced = self
            .debounce
            .zip(self.enqueued_at)
            .and_then(|(d, at)| Timestamp::new(at.get() + d.get()).ok());
        match (self.run_at, debounced) {
            (Some(a), Some(b)) => Some(if a > b { a } else { b }),
            (a, b) => a.or(b),
        }
    }
}

/// How a job ended without completing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Ended {
    /// Out of attempts, or failed without retry.
    Dead,
    /// Cancelled.
    Cancelled,
}

impl Ended {
    /// Both ways a job ends without completing.
    pub const ALL: [Ended; 2] = [Ended::Dead, Ended::Cancelled];

    /// The stored text (`dead`, `cancelled`): the one spelling every store writes and reads.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Ended::Dead => Status::Dead.as_str(),
            Ended::Cancelled => Status::Cancelled.as_str(),
        }
    }

    /// Reads the stored text back; `None` for any other text.
    #[must_use]
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|e| e.as_str() == text)
    }
}

/// Where a job stands at a given `now`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Status {
    /// Waiting for its parents (`--after`) to finish: not claimable until they have.
    Waiting,
    /// Waiting to be claimed (due or scheduled).
    Pending,
    /// Leased: a live lease.
    Running,
    /// Completed (the seed's `done = 1`).
    Done,
    /// Out of attempts, or failed without retry.
    Dead,
    /// Cancelled.
    Cancelled,
}

impl Status {
    /// Every status, in the order they are listed.
    pub const ALL: [Status; 6] = [
        Status::Waiting,
        Status::Pending,
        Status::Running,
        Status::Done,
        Status::Dead,
        Status::Cancelled,
    ];

    /// The lowercase name (`waiting`, `pending`, `running`, `done`, `dead`, `cancelled`).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Waiting => "waiting",
            Status::Pending => "pending",
            Status::Running => "running",
            Status::Done => "done",
            Status::Dead => "dead",
            Status::Cancelled => "cancelled",
        }
    }

    /// Parses a lowercase name.
    ///
    /// # Errors
    /// [`InputError::UnknownStatus`].
    pub fn parse(name: &str) -> Result<Self, InputError> {
        Self::ALL
            .into_iter()
            .find(|s| s.as_str() == name)
            .ok_or_else(|| InputError::UnknownStatus(name.to_owned()))
    }

    /// Whether the job has finished for good unless retried (done, dead or cancelled).
    #[must_use]
    pub fn is_finished(self) -> bool {
        matches!(self, Status::Done | Status::Dead | Status::Cancelled)
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Exponential backoff with jitter, capped: attempt `n` (from 1) waits
/// `min(base * factor^(n-1), max)`, shortened by up to `jitter` of itself.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    base: f64,
    factor: f64,
    max: f64,
    jitter: f64,
}

impl Default for Backoff {
    /// 1 s, doubling, at most 1 hour, up to 25% shorter.
    fn default() -> Self {
        Self {
            base: 1.0,
            factor: 2.0,
            max: 3600.0,
            jitter: 0.25,
        }
    }
}

impl Backoff {
    /// Checks and builds a policy: `base` and `max` finite and > 0, `factor` finite and >= 1,
    /// `jitter` in `0..=1`.
    ///
    /// # Errors
    /// [`InputError::InvalidBackoff`] naming the value.
    pub fn new(base: f64, factor: f64, max: f64, jitter: f64) -> Result<Self, InputError> {
        let bad = |what: &str, value: f64| {
            Err(InputError::InvalidBackoff(format!(
                "{what} must be {}, got {value}",
                match what {
                    "factor" => "a finite number >= 1",
                    "jitter" => "between 0 and 1",
                    _ => "a finite number of seconds > 0",
                }
            )))
        };
        if !(base.is_finite() && base > 0.0) {
            return bad("base", base);
        }
        if !(factor.is_finite() && factor >= 1.0) {
            return bad("factor", factor);
        }
        if !(max.is_finite() && max > 0.0) {
            return bad("max", max);
        }
        if !(0.0..=1.0).contains(&jitter) {
            return bad("jitter", jitter);
        }
        Ok(Self {
            base,
            factor,
            max,
            jitter,
        })
    }

    /// The policy's values: `(base, factor, max, jitter)`.
    #[must_use]
    pub fn parts(&self) -> (f64, f64, f64, f64) {
        (self.base, self.factor, self.max, self.jitter)
    }

    /// The delay before the retry that follows failed attempt `attempt` (1 for the first) of
    /// job `id`. The jitter is a fixed function of the job and the attempt, so the same failure
    /// always gives the same delay (stores agree), while jobs that fail together spread out.
    #[must_use]
    pub fn delay(&self, id: &JobId, attempt: u32) -> f64 {
        let exponent = i32::try_from(attempt.saturating_sub(1)).unwrap_or(i32::MAX);
        let full = (self.base * self.factor.powi(exponent)).min(self.max);
        full * (1.0 - self.jitter * unit_fraction(id, attempt))
    }
}

/// A number in `0..1` from the job id and attempt (FNV-1a): no randomness, so decisions stay pure.
fn unit_fraction(id: &JobId, attempt: u32) -> f64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in id.as_str().bytes().chain(attempt.to_le_bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    // The top 21 bits, exactly representable.
    let top = u32::try_from(hash >> 43).unwrap_or(0);
    f64::from(top) / f64::from(1_u32 << 21)
}

/// What `fail` does with a job that has attempts left.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Retry {
    /// Back to pending after this backoff's delay.
    Backoff(Backoff),
    /// Straight to dead.
    No,
}

impl Default for Retry {
    fn default() -> Self {
        Retry::Backoff(Backoff::default())
    }
}

/// What a child does when a parent ends dead or cancelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnParentFailure {
    /// It is cancelled, with an error naming the parent (a batch's "success" callback).
    #[default]
    Cancel,
    /// It runs once every parent has finished, however each ended (a batch's "complete"
    /// callback).
    Run,
}

impl OnParentFailure {
    /// Reads `cancel` or `run`.
    ///
    /// # Errors
    /// [`WorkflowRefused::Policy`] for anything else.
    pub fn parse(text: &str) -> Result<Self, WorkflowRefused> {
        match text {
            "cancel" => Ok(Self::Cancel),
            "run" => Ok(Self::Run),
            other => Err(WorkflowRefused::Policy(other.to_owned())),
        }
    }

    /// `cancel` or `run`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Cancel => "cancel",
            Self::Run => "run",
        }
    }
}

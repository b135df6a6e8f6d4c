//! Validated value types: job ids, owners, fences, timestamps, lease terms and the digest a
//! secret is kept as.
//!
//! Every value that crosses the boundary into the lease rules is checked here once,
//! so the rules themselves never see a NaN time, an empty owner or a fence that
//! cannot round-trip through a signed 64-bit database column.

use std::fmt;

/// Why a value given by a caller was refused before any rule ran.
///
/// Each message names the value that was wrong.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum InputError {
    /// A job id was empty.
    #[error("job id is empty")]
    EmptyJobId,
    /// An owner name was empty.
    #[error("owner is empty")]
    EmptyOwner,
    /// A text value contained a NUL character, which not every store can hold.
    #[error("{what} contains a NUL character")]
    NulInText {
        /// Which value (job id, owner, result).
        what: &'static str,
    },
    /// `now` was NaN or infinite.
    #[error("now must be a finite number of seconds, got {0}")]
    NonFiniteNow(f64),
    /// `ttl` was NaN or infinite.
    #[error("ttl must be a finite number of seconds, got {0}")]
    NonFiniteTtl(f64),
    /// `ttl` was zero or negative.
    #[error("ttl must be greater than 0, got {0}")]
    NonPositiveTtl(f64),
    /// `now + ttl` rounds back to `now`, so the lease would be born expired.
    #[error("ttl {ttl} is too small to extend a lease past now {now} (now + ttl == now)")]
    TtlBelowResolution {
        /// The caller's `now`.
        now: f64,
        /// The caller's `ttl`.
        ttl: f64,
    },
    /// `now + ttl` overflows to infinity.
    #[error("now {now} + ttl {ttl} is not a finite time")]
    UntilOverflow {
        /// The caller's `now`.
        now: f64,
        /// The caller's `ttl`.
        ttl: f64,
    },
    /// A queue name was empty.
    #[error("queue name is empty")]
    EmptyQueue,
    /// A group key was empty.
    #[error("group is empty")]
    EmptyGroup,
    /// A payload over the size limit.
    #[error("payload is {len} bytes, over the limit of {limit} bytes")]
    PayloadTooLarge {
        /// Its size.
        len: usize,
        /// The limit.
        limit: usize,
    },
    /// A status name that is not one of the six.
    #[error("unknown status {0:?} (expected waiting, pending, running, done, dead or cancelled)")]
    UnknownStatus(String),
    /// A backoff policy value out of range.
    #[error("invalid backoff: {0}")]
    InvalidBackoff(String),
    /// A job id, owner or queue name longer than [`MAX_NAME_BYTES`].
    #[error("{what} is {len} bytes long, over the limit of {max} bytes", max = MAX_NAME_BYTES)]
    NameTooLong {
        /// Which value (job id, owner, queue name).
        what: &'static str,
        /// Its length in bytes.
        len: usize,
    },
    /// A fence above `i64::MAX`, which no store can hold.
    #[error("fence {0} is out of range (the largest fence is {max})", max = Fence::MAX.get())]
    FenceOutOfRange(u64),
    /// An epoch above [`Epoch::MAX`], whose fences would not fit a store.
    #[error("epoch {0} is out of range (the largest epoch is {max})", max = Epoch::MAX.get())]
    EpochOutOfRange(u64),
    /// A claim of the next jobs asked to follow a command other than a completion.
    #[error("a claim of the next jobs can follow only a completion, not {0}")]
    ClaimAfter(&'static str),
    /// A progress text longer than [`crate::ProgressText::MAX_BYTES`].
    #[error("progress is {0} bytes long, over the limit of {max} bytes", max = crate::ProgressText::MAX_BYTES)]
    ProgressTooLong(usize),
    /// A queue setting or a schedule that cannot be used, named with what is wrong with it.
    #[error("{0}")]
    InvalidSetting(String),
    /// An input the network service refused as invalid (422), in its words.
    #[error("{0}")]
    Refused(String),
    /// A workflow that cannot be stored: a missing parent, a job that names itself, a cycle,
    /// too many parents, or a bad policy or checkpoint name.
    #[error(transparent)]
    Workflow(#[from] WorkflowRefused),
    /// A W3C trace context that is not one, named with what is wrong with it.
    #[error("{0}")]
    TraceContext(String),
    /// A value a worker could not seal or open (docs/ENCRYPTION.md), in `lease-seal`'s words
    /// (which never hold a key or a plaintext).
    #[error("{0}")]
    Sealing(String),
    /// A payload or result that begins with a sealed envelope's reserved start but is not a
    /// sealed value this version reads (docs/ENCRYPTION.md).
    #[error(
        "{what} begins with the sealed envelope's reserved start ({start}) but is not a sealed {what}: {why}"
    )]
    Envelope {
        /// `payload` or `result`.
        what: &'static str,
        /// The reserved start, as text.
        start: &'static str,
        /// What is wrong with it.
        why: &'static str,
    },
}

/// The longest job id, owner or queue name every store accepts, in bytes of UTF-8: the same
/// on every store (PostgreSQL indexes refuse a key of a few kilobytes).
pub const MAX_NAME_BYTES: usize = 1024;

/// A name as given by a caller: within [`MAX_NAME_BYTES`].
fn checked_name(value: String, what: &'static str) -> Result<String, InputError> {
    if value.len() > MAX_NAME_BYTES {
        return Err(InputError::NameTooLong {
            what,
            len: value.len(),
        });
    }
    checked_text(value, what)
}

fn checked_text(value: String, what: &'static str) -> Result<String, InputError> {
    if value.contains('\0') {
        return Err(InputError::NulInText { what });
    }
    Ok(value)
}

/// The id of a job: any non-empty text without NUL characters.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct JobId(String);

impl JobId {
    /// Checks and wraps a job id.
    ///
    /// # Errors
    /// [`InputError::EmptyJobId`], [`InputError::NameTooLong`] or [`InputError::NulInText`].
    pub fn new(id: impl Into<String>) -> Result<Self, InputError> {
        let id = id.into();
        if id.is_empty() {
            return Err(InputError::EmptyJobId);
        }
        checked_name(id, "job id").map(Self)
    }

    /// Wraps a job id read back from a store: checked as [`JobId::new`] checks it but for the
    /// length, so that an id stored before the limit existed can still be read (and a
    /// migration can name it).
    ///
    /// # Errors
    /// [`InputError::EmptyJobId`] or [`InputError::NulInText`].
    pub fn stored(id: impl Into<String>) -> Result<Self, InputError> {
        let id = id.into();
        if id.is_empty() {
            return Err(InputError::EmptyJobId);
        }
        checked_text(id, "job id").map(Self)
    }

    /// The id as text.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(&self.0)
    }
}

/// The name of a worker that holds or asks for a lease: non-empty text without NUL characters.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Owner(String);

impl Owner {
    /// Checks and wraps an owner name.
    ///
    /// # Errors
    /// [`InputError::EmptyOwner`], [`InputError::NameTooLong`] or [`InputError::NulInText`].
    pub fn new(owner: impl Into<String>) -> Result<Self, InputError> {
        let owner = owner.into();
        if owner.is_empty() {
            return Err(InputError::EmptyOwner);
        }
        checked_name(owner, "owner").map(Self)
    }

    /// An owner made from a name already checked by a stricter rule (a principal's).
    pub(crate) fn from_checked(owner: String) -> Self {
        Self(owner)
    }

    /// Wraps an owner read back from a store (no length limit; see [`JobId::stored`]).
    ///
    /// # Errors
    /// [`InputError::EmptyOwner`] or [`InputError::NulInText`].
    pub fn stored(owner: impl Into<String>) -> Result<Self, InputError> {
        let owner = owner.into();
        if owner.is_empty() {
            return Err(InputError::EmptyOwner);
        }
        checked_text(owner, "owner").map(Self)
    }

    /// The owner as text.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(&self.0)
    }
}

/// A completion result: any text without NUL characters (the empty text is a valid result).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct JobResult(String);

impl JobResult {
    /// Checks and wraps a result. A result that begins with `lease-sealed:` must be a
    /// well-formed sealed result ([`crate::result_envelope`]): the start is reserved.
    ///
    /// # Errors
    /// [`InputError::NulInText`], or [`InputError::Envelope`] saying what is wrong.
    pub fn new(result: impl Into<String>) -> Result<Self, InputError> {
        let result = checked_text(result.into(), "result")?;
        if let crate::Envelope::Malformed(why) = crate::result_envelope(&result) {
            return Err(InputError::Envelope {
                what: "result",
                start: "lease-sealed:",
                why,
            });
        }
        Ok(Self(result))
    }

    /// The result as text.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A fencing token: the per-job generation number, in `0..=i64::MAX`.
///
/// The upper bound lets a fence round-trip through SQLite `INTEGER` and PostgreSQL `BIGINT`.
/// Fence 0 means "never claimed"; the first claim hands out fence 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Fence(u64);

impl Fence {
    /// The fence of a job that was never claimed.
    pub const ZERO: Fence = Fence(0);
    /// The largest fence any store can hold.
    #[allow(clippy::cast_sign_loss)] // i64::MAX is positive.
    pub const MAX: Fence = Fence(i64::MAX as u64);

    /// Checks and wraps a fence.
    ///
    /// # Errors
    /// [`InputError::FenceOutOfRange`] above `i64::MAX`.
    pub fn new(value: u64) -> Result<Self, InputError> {
        if value > Self::MAX.0 {
            return Err(InputError::FenceOutOfRange(value));
        }
        Ok(Self(value))
    }

    /// The fence as a number.
    #[must_use]
    pub const fn get(self) -> u64 {
        self.0
    }

    /// The next fence, or `None` when this is [`Fence::MAX`].
    #[must_use]
    pub fn next(self) -> Option<Fence> {
        (self.0 < Self::MAX.0).then_some(Self(self.0 + 1))
    }

    /// The fence a claim hands out after this one in a store at `epoch`: the first fence of
    /// the epoch (`epoch << 32 | 1`) when this one is below it, else this one plus one.
    /// `None` when the count of the fence's epoch would run into the next epoch's fences
    /// (after 2^32 claims of one job in one epoch) or past [`Fence::MAX`]: those fences may
    /// have been handed out by a history the store lost.
    #[must_use]
    pub fn next_in(self, epoch: Epoch) -> Option<Fence> {
        let first = epoch.first_fence();
        if self < first {
            return Some(first);
        }
        let next = self.next()?;
        (next.count() != 0).then_some(next)
    }

    /// The epoch this fence was handed out in (its high 32 bits).
    #[must_use]
    pub fn epoch(self) -> Epoch {
        // A fence is at most i64::MAX, so its high 32 bits are at most Epoch::MAX.
        Epoch(u32::try_from(self.0 >> Epoch::SHIFT).unwrap_or(Epoch::MAX.0))
    }

    /// The fence's count within its epoch (its low 32 bits).
    #[must_use]
    pub fn count(self) -> u32 {
        u32::try_from(self.0 & u64::from(u32::MAX)).unwrap_or(u32::MAX)
    }
}

/// A store's epoch: it grows whenever the history the store holds may have lost writes (a
/// PostgreSQL failover or point-in-time recovery starts a new timeline; `lease restore`
/// installs a backup), and every fence handed out in an epoch is above every fence of an
/// earlier one, lost ones included (the high 32 bits of a fence, as in ZooKeeper's zxid).
/// Epoch 0 hands out 1, 2, 3... as before epochs existed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Epoch(u32);

impl Epoch {
    /// The epoch of a store that never lost a write.
    pub const ZERO: Epoch = Epoch(0);
    /// The largest epoch: its fences still fit `i64`.
    pub const MAX: Epoch = Epoch(i32::MAX.unsigned_abs());
    /// Where an epoch sits in a fence.
    const SHIFT: u32 = 32;

    /// Checks and wraps an epoch.
    ///
    /// # Errors
    /// [`InputError::EpochOutOfRange`] above [`Epoch::MAX`].
    pub fn new(value: u64) -> Result<Self, InputError> {
        u32::try_from(value)
            .ok()
            .filter(|v| *v <= Self::MAX.0)
            .map(Self)
            .ok_or(InputError::EpochOutOfRange(value))
    }

    /// The epoch as a number.
    #[must_use]
    pub const fn get(self) -> u32 {
        self.0
    }

    /// The next epoch, or `None` at [`Epoch::MAX`].
    #[must_use]
    pub fn next(self) -> Option<Epoch> {
        (self.0 < Self::MAX.0).then_some(Self(self.0 + 1))
    }

    /// The first fence a claim hands out in this epoch.
    #[must_use]
    pub fn first_fence(self) -> Fence {
        Fence((u64::from(self.0) << Self::SHIFT) | 1)
    }
}

impl fmt::Display for Epoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl fmt::Display for Fence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl TryFrom<i64> for Fence {
    type Error = i64;

    /// A stored fence; a negative one is handed back as the error.
    fn try_from(value: i64) -> Result<Self, i64> {
        u64::try_from(value).map(Self).map_err(|_| value)
    }
}

impl From<Fence> for i64 {
    fn from(fence: Fence) -> i64 {
        // Fence::new and Fence::next keep the value at or below i64::MAX.
        i64::try_from(fence.0).unwrap_or(i64::MAX)
    }
}

/// A point in time in seconds, as the caller gave it: any finite `f64`, compared exactly.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Default)]
pub struct Timestamp(f64);

impl Timestamp {
    /// The `until` of a job that holds no lease.
    pub const ZERO: Timestamp = Timestamp(0.0);

    /// Checks and wraps a caller's `now`.
    ///
    /// # Errors
    /// [`InputError::NonFiniteNow`] for NaN and infinities.
    pub fn new(seconds: f64) -> Result<Self, InputError> {
        if seconds.is_finite() {
            Ok(Self(seconds))
        } else {
            Err(InputError::NonFiniteNow(seconds))
        }
    }

    /// The time in seconds.
    #[must_use]
    pub fn get(self) -> f64 {
        self.0
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A lease duration in seconds: finite and greater than zero.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
pub struct Ttl(f64);

impl Ttl {
    /// Checks and wraps a ttl.
    ///
    /// # Errors
    /// [`InputError::NonFiniteTtl`] or [`InputError::NonPositiveTtl`].
    pub fn new(seconds: f64) -> Result<Self, InputError> {
        if !seconds.is_finite() {
            return Err(InputError::NonFiniteTtl(seconds));
        }
        if seconds <= 0.0 {
            return Err(InputError::NonPositiveTtl(seconds));
        }
        Ok(Self(seconds))
    }

    /// The duration in seconds.
    #[must_use]
    pub fn get(self) -> f64 {
        self.0
    }
}

/// The time window of a claim or renewal: `now` and the `until = now + ttl` it would set.
///
/// Built only when `until` is finite and strictly after `now`, so a granted lease is
/// never born expired and a huge ttl never stores infinity.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LeaseTerm {
    now: Timestamp,
    until: Timestamp,
    token: Option<TokenDigest>,
    epoch: Epoch,
}

impl LeaseTerm {
    /// Checks `now` and `ttl` and computes `until = now + ttl`.
    ///
    /// # Errors
    /// Any of the `now` and `ttl` errors of [`Timestamp::new`] and [`Ttl::new`],
    /// [`InputError::UntilOverflow`] when the sum is infinite, and
    /// [`InputError::TtlBelowResolution`] when it rounds back to `now`.
    pub fn new(now: f64, ttl: f64) -> Result<Self, InputError> {
        let now = Timestamp::new(now)?;
        let ttl = Ttl::new(ttl)?;
        Self::from_parts(now, ttl)
    }

    /// Computes `until = now + ttl` from checked parts.
    ///
    /// # Errors
    /// [`InputError::UntilOverflow`] or [`InputError::TtlBelowResolution`].
    pub fn from_parts(now: Timestamp, ttl: Ttl) -> Result<Self, InputError> {
        let until = now.0 + ttl.0;
        if !until.is_finite() {
            return Err(InputError::UntilOverflow {
                now: now.0,
                ttl: ttl.0,
            });
        }
        if until <= now.0 {
            return Err(InputError::TtlBelowResolution {
                now: now.0,
                ttl: ttl.0,
            });
        }
        Ok(Self {
            now,
            until: Timestamp(until),
            token: None,
            epoch: Epoch::ZERO,
        })
    }

    /// The caller's `now`.
    #[must_use]
    pub fn now(self) -> Timestamp {
        self.now
    }

    /// The `until` this term grants.
    #[must_use]
    pub fn until(self) -> Timestamp {
        self.until
    }

    /// The same term, with the digest of the lease token that every lease it grants is bound
    /// to (the network service hands the token to the claimant and keeps only this).
    #[must_use]
    pub fn with_token(self, token: TokenDigest) -> Self {
        Self {
            token: Some(token),
            ..self
        }
    }

    /// The digest of the lease token a claim with this term stores, if any.
    #[must_use]
    pub fn token(self) -> Option<TokenDigest> {
        self.token
    }

    /// The same term in the store's `epoch`, read where the claim is decided: a claim with it
    /// hands out [`Fence::next_in`] that epoch. A caller's term is in [`Epoch::ZERO`] until
    /// the store sets it.
    #[must_use]
    pub fn in_epoch(self, epoch: Epoch) -> Self {
        Self { epoch, ..self }
    }

    /// The epoch a claim with this term hands out its fence in.
    #[must_use]
    pub fn epoch(self) -> Epoch {
        self.epoch
    }
}

/// What a progress report does to its lease: renew it for a new term, as a renewal would, or
/// leave its end where it is (`lease progress` without `--ttl`). Either way the report is a
/// holder's write, judged live at the report's `now`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Renewal {
    /// Extend the lease to the term's `until`.
    Renew(LeaseTerm),
    /// Leave the lease's `until` as it is; the time is the report's `now`.
    Keep(Timestamp),
}

impl Renewal {
    /// The report's `now`.
    #[must_use]
    pub fn now(self) -> Timestamp {
        match self {
            Renewal::Renew(term) => term.now(),
            Renewal::Keep(now) => now,
        }
    }

    /// The lease's end after the report, given its end before.
    #[must_use]
    pub fn until(self, before: Timestamp) -> Timestamp {
        match self {
            Renewal::Renew(term) => term.until(),
            Renewal::Keep(_) => before,
        }
    }

    /// The term it renews for, if it renews.
    #[must_use]
    pub fn term(self) -> Option<LeaseTerm> {
        match self {
            Renewal::Renew(term) => Some(term),
            Renewal::Keep(_) => None,
        }
    }
}

impl From<LeaseTerm> for Renewal {
    fn from(term: LeaseTerm) -> Self {
        Renewal::Renew(term)
    }
}

/// Why an access value was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AccessError {
    /// A stored digest was not 32 bytes.
    #[error("a digest is 32 bytes, this one is {0}")]
    DigestLength(usize),
    /// A scope name that is not `viewer`, `worker` or `admin`.
    #[error("scope {0:?} is not one of viewer, worker or admin")]
    UnknownScope(String),
    /// A principal name that breaks the naming rule.
    #[error(
        "principal {0:?} must be 1 to 64 characters of a-z, 0-9, '.', '_' and '-', starting with a letter or digit"
    )]
    BadPrincipal(String),
    /// A key id that breaks the naming rule.
    #[error("key id {0:?} must be 1 to 32 characters of a-z and 0-9")]
    BadKeyId(String),
}

/// The SHA-256 digest of a secret (an API key's or a lease token's): what a store keeps
/// instead of the secret. Shown redacted.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct TokenDigest([u8; 32]);

impl TokenDigest {
    /// Wraps the 32 bytes of a digest.
    #[must_use]
    pub fn new(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    /// Reads a digest as a store kept it.
    ///
    /// # Errors
    /// [`AccessError::DigestLength`] when `bytes` is not 32 bytes long.
    pub fn from_slice(bytes: &[u8]) -> Result<Self, AccessError> {
        <[u8; 32]>::try_from(bytes)
            .map(Self)
            .map_err(|_| AccessError::DigestLength(bytes.len()))
    }

    /// The 32 bytes.
    #[must_use]
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// Whether two digests are equal, in time that does not depend on where they differ
    /// (every byte is compared; the comparison is hidden from the optimiser).
    #[must_use]
    pub fn matches(&self, other: &TokenDigest) -> bool {
        let difference = self
            .0
            .iter()
            .zip(other.0.iter())
            .fold(0_u8, |acc, (a, b)| acc | std::hint::black_box(a ^ b));
        std::hint::black_box(difference) == 0
    }
}

impl fmt::Debug for TokenDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TokenDigest(..)")
    }
}

/// The most parents one job may name (the issue asks for at least 1,000).
pub const MAX_PARENTS: usize = 10_000;

/// The most checkpoints one job may keep.
pub const MAX_CHECKPOINTS: usize = 1_000;

/// The longest checkpoint name, in bytes.
pub const MAX_CHECKPOINT_NAME_BYTES: usize = 256;

/// The longest checkpoint value, in bytes: the CLI's limit on a result (a checkpoint is a
/// step's result).
pub const MAX_CHECKPOINT_VALUE_BYTES: usize = 64 << 20;

/// Why a workflow (or a checkpoint name) is refused; each names what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WorkflowRefused {
    /// A job names itself as its parent.
    #[error("job {0} names itself as its parent (--after)")]
    SelfParent(JobId),
    /// A job names a parent that is neither stored nor in the same batch.
    #[error("job {child} names parent {parent}, which does not exist (--after)")]
    MissingParent {
        /// The job.
        child: JobId,
        /// Its parent.
        parent: JobId,
    },
    /// The jobs of a batch name each other in a cycle; `0` is one of them.
    #[error("job {0} is in a cycle of parents (--after): a workflow runs each job once")]
    Cycle(JobId),
    /// A job names more parents than a job may have.
    #[error("job {child} names {count} parents (--after); at most {MAX_PARENTS}")]
    TooManyParents {
        /// The job.
        child: JobId,
        /// How many it named.
        count: usize,
    },
    /// A policy other than `cancel` or `run`.
    #[error("--on-parent-failure {0:?} is not cancel or run")]
    Policy(String),
    /// A checkpoint name that is empty, too long or holds a NUL.
    #[error("checkpoint name {0:?} is not 1 to 256 bytes without NUL (name)")]
    CheckpointName(String),
    /// A checkpoint value over [`MAX_CHECKPOINT_VALUE_BYTES`].
    #[error(
        "checkpoint value is {0} bytes long, over the limit of {MAX_CHECKPOINT_VALUE_BYTES} bytes (value)"
    )]
    CheckpointValue(usize),
    /// A new checkpoint for a job that keeps [`MAX_CHECKPOINTS`] already.
    #[error(
        "job {0} keeps {MAX_CHECKPOINTS} checkpoints, the most a job may keep: a new name is refused (name); write one of its names again instead"
    )]
    TooManyCheckpoints(JobId),
}

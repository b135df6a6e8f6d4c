//! The port's error type, with portable kinds every adapter maps its failures into.

use lease_domain::{ClockRefused, ClockSkew, InputError};

/// Why a store operation failed (as opposed to being refused by the lease rules,
/// which is an ordinary outcome and never an error).
///
/// Every kind except [`StoreError::Indeterminate`] is determinate: the operation was not applied.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// A value given by the caller was invalid; nothing was read or written.
    #[error("invalid input: {0}")]
    InvalidInput(#[from] InputError),
    /// There is no database where one must already exist.
    #[error("no lease database at {path} (create it with init)")]
    NotFound {
        /// The path that was looked at.
        path: String,
    },
    /// The target exists but is not a lease database this version can use; it was left as it is.
    #[error("{path} is not a usable lease database: {reason}")]
    Incompatible {
        /// The path that was opened.
        path: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The store could not be reached or did not answer in time (busy, I/O error, pool exhausted);
    /// the operation was not applied.
    #[error("storage unavailable: {0}")]
    Unavailable(String),
    /// The storage is full; the operation was not applied.
    #[error("storage full: {0}")]
    Full(String),
    /// The storage is read-only; the operation was not applied.
    #[error("storage is read-only: {0}")]
    ReadOnly(String),
    /// The operation may or may not have been applied (for example the commit itself failed);
    /// read the job's `state` to find out.
    #[error("outcome unknown, the write may or may not have been applied: {0}")]
    Indeterminate(String),
    /// The caller's `now` is further from the store's clock than the store's skew bound
    /// allows; nothing was read or written. Both clocks are named.
    #[error(transparent)]
    ClockSkew(#[from] ClockSkew),
    /// Stored data breaks the schema's rules (for example a negative fence).
    #[error("corrupt data: {0}")]
    Corrupt(String),
}

impl From<ClockRefused> for StoreError {
    fn from(refused: ClockRefused) -> Self {
        match refused {
            ClockRefused::Skew(skew) => StoreError::ClockSkew(skew),
            ClockRefused::Input(input) => StoreError::InvalidInput(input),
        }
    }
}

impl StoreError {
    /// Whether the operation is known not to have been applied.
    #[must_use]
    pub fn is_determinate(&self) -> bool {
        !matches!(self, StoreError::Indeterminate(_))
    }
}

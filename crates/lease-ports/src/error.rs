//! The port's error type, with portable kinds every adapter maps its failures into.

use std::error::Error;
use std::fmt;
use std::sync::Arc;

use lease_domain::{ClockRefused, ClockSkew, InputError};

/// Why a store operation failed (as opposed to being refused by the lease rules,
/// which is an ordinary outcome and never an error).
///
/// Every kind except [`StoreError::Indeterminate`] is determinate: the operation was not applied.
/// The message names what went wrong; where a library error caused it, that error is the
/// [`Error::source`], so a log can show the whole chain.
#[derive(Debug)]
#[non_exhaustive]
pub enum StoreError {
    /// A value given by the caller was invalid; nothing was read or written.
    InvalidInput(InputError),
    /// There is no database where one must already exist.
    NotFound {
        /// The path that was looked at.
        path: String,
        /// What was found there instead (no file, an empty file, an empty schema).
        reason: Detail,
    },
    /// The database server has no database of that name (a lease schema is made inside an
    /// existing database, which `init` does not create).
    NoSuchDatabase {
        /// The target that was named.
        path: String,
        /// What the server said, and the client library's error.
        reason: Detail,
    },
    /// The target exists but is not a lease database this version can use; it was left as it is.
    Incompatible {
        /// The path that was opened.
        path: String,
        /// What is wrong with it, and the library error that told, if any.
        reason: Detail,
    },
    /// The store refused the caller: a key it does not know or that was revoked, or one that
    /// may not do what was asked (the network service's 401 and 403); nothing was applied.
    Denied(Detail),
    /// The store could not be reached or did not answer in time (busy, I/O error, pool exhausted);
    /// the operation was not applied.
    Unavailable(Detail),
    /// The storage is full; the operation was not applied.
    Full(Detail),
    /// The storage is read-only; the operation was not applied.
    ReadOnly(Detail),
    /// The operation may or may not have been applied (for example the commit itself failed);
    /// read the job's `state` to find out.
    Indeterminate(Detail),
    /// The caller's `now` is further from the store's clock than the store's skew bound
    /// allows; nothing was read or written. Both clocks are named.
    ClockSkew(ClockSkew),
    /// Stored data breaks the schema's rules (for example a negative fence).
    Corrupt(Detail),
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::InvalidInput(e) => write!(f, "invalid input: {e}"),
            StoreError::NotFound { path, reason } => {
                write!(
                    f,
                    "no lease database at {path}: {reason} (create it with init)"
                )
            }
            StoreError::Denied(d) => write!(f, "{d}"),
            StoreError::NoSuchDatabase { path, reason } => write!(
                f,
                "{path}: {reason}; create the database first (createdb, or CREATE DATABASE), \
                 then run lease init"
            ),
            StoreError::Incompatible { path, reason } => {
                write!(f, "{path} is not a usable lease database: {reason}")
            }
            StoreError::Unavailable(d) => write!(f, "storage unavailable: {d}"),
            StoreError::Full(d) => write!(f, "storage full: {d}"),
            StoreError::ReadOnly(d) => write!(f, "storage is read-only: {d}"),
            StoreError::Indeterminate(d) => write!(
                f,
                "outcome unknown, the write may or may not have been applied: {d}"
            ),
            StoreError::ClockSkew(skew) => fmt::Display::fmt(skew, f),
            StoreError::Corrupt(d) => write!(f, "corrupt data: {d}"),
        }
    }
}

impl Error for StoreError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            StoreError::InvalidInput(e) => Some(e),
            StoreError::ClockSkew(skew) => skew.source(),
            StoreError::Unavailable(d)
            | StoreError::Full(d)
            | StoreError::ReadOnly(d)
            | StoreError::Indeterminate(d)
            | StoreError::Corrupt(d)
            | StoreError::Denied(d)
            | StoreError::NotFound { reason: d, .. }
            | StoreError::NoSuchDatabase { reason: d, .. }
            | StoreError::Incompatible { reason: d, .. } => d.cause(),
        }
    }
}

impl From<InputError> for StoreError {
    fn from(e: InputError) -> Self {
        StoreError::InvalidInput(e)
    }
}

impl From<ClockSkew> for StoreError {
    fn from(skew: ClockSkew) -> Self {
        StoreError::ClockSkew(skew)
    }
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

    /// The same error with `context` put before its message (for a storage failure; the other
    /// kinds name their own subject and are returned as they are).
    #[must_use]
    pub fn in_context(self, context: &str) -> Self {
        self.retold(|d| d.retold(format!("{context}: {}", d.message())))
            .unwrap_or(self)
    }

    /// A storage failure (unavailable, full, read-only, indeterminate, corrupt) told again by
    /// `tell`, its kind and cause kept: for another caller of a failed batch, or a failure
    /// put in context. `None` for the other kinds, which name their own subject.
    #[must_use]
    pub fn retold(&self, tell: impl Fn(&Detail) -> Detail) -> Option<Self> {
        Some(match self {
            StoreError::Unavailable(d) => StoreError::Unavailable(tell(d)),
            StoreError::Full(d) => StoreError::Full(tell(d)),
            StoreError::ReadOnly(d) => StoreError::ReadOnly(tell(d)),
            StoreError::Indeterminate(d) => StoreError::Indeterminate(tell(d)),
            StoreError::Corrupt(d) => StoreError::Corrupt(tell(d)),
            _ => return None,
        })
    }
}

/// What a storage failure says, and the library error behind it, if any (shared, so a failed
/// batch can answer each of its callers with the same cause).
#[derive(Clone)]
pub struct Detail {
    message: String,
    cause: Option<Arc<dyn Error + Send + Sync + 'static>>,
}

impl Detail {
    /// A message with no underlying error.
    #[must_use]
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            cause: None,
        }
    }

    /// A message caused by `cause`, which becomes the error's [`Error::source`].
    #[must_use]
    pub fn caused_by(
        message: impl Into<String>,
        cause: impl Error + Send + Sync + 'static,
    ) -> Self {
        Self {
            message: message.into(),
            cause: Some(Arc::new(cause)),
        }
    }

    /// Another message with the same cause (a failed batch tells each caller its own story
    /// of one failure).
    #[must_use]
    pub fn retold(&self, message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            cause: self.cause.clone(),
        }
    }

    /// The message.
    #[must_use]
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The underlying error.
    #[must_use]
    pub fn cause(&self) -> Option<&(dyn Error + 'static)> {
        self.cause.as_deref().map(|e| e as &(dyn Error + 'static))
    }
}

impl fmt::Debug for Detail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.cause {
            Some(cause) => write!(f, "{:?} (caused by {cause:?})", self.message),
            None => write!(f, "{:?}", self.message),
        }
    }
}

impl fmt::Display for Detail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::ops::Deref for Detail {
    type Target = str;

    fn deref(&self) -> &str {
        &self.message
    }
}

impl From<String> for Detail {
    fn from(message: String) -> Self {
        Self::new(message)
    }
}

impl From<&str> for Detail {
    fn from(message: &str) -> Self {
        Self::new(message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_stays_and_the_cause_is_the_source() {
        let io = std::io::Error::other("disk on fire");
        let err = StoreError::Unavailable(Detail::caused_by("cannot read", io));
        assert_eq!(err.to_string(), "storage unavailable: cannot read");
        let source = err.source().expect("a source");
        assert_eq!(source.to_string(), "disk on fire");
        assert!(StoreError::Corrupt("x".into()).source().is_none());
    }

    #[test]
    fn every_kind_that_names_a_target_keeps_its_cause_too() {
        let because = || Detail::caused_by("what was found", std::io::Error::other("the cause"));
        for err in [
            StoreError::NotFound {
                path: "p".into(),
                reason: because(),
            },
            StoreError::NoSuchDatabase {
                path: "p".into(),
                reason: because(),
            },
            StoreError::Incompatible {
                path: "p".into(),
                reason: because(),
            },
            StoreError::Denied(because()),
        ] {
            assert!(err.to_string().contains("what was found"), "{err}");
            let source = err.source().unwrap_or_else(|| panic!("no source: {err}"));
            assert!(source.downcast_ref::<std::io::Error>().is_some(), "{err}");
        }
    }
}

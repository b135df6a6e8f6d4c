//! Refusals of values the document cannot state (a payload's bytes, a name's bytes, a lease
//! that would end past the largest time): each names the field, never its value.

use lease_domain::InputError;

use crate::problem::Problem;

/// The problem with a name, text or number a caller gave, naming the field but not the value.
#[must_use]
pub(crate) fn bad_value(field: &str, err: &InputError) -> Problem {
    let what = match err {
        InputError::EmptyJobId | InputError::EmptyOwner | InputError::EmptyQueue => {
            "must not be empty".to_owned()
        }
        InputError::NulInText { .. } => "must not contain a NUL character".to_owned(),
        InputError::NameTooLong { .. } => format!(
            "is over the limit of {} bytes",
            lease_domain::MAX_NAME_BYTES
        ),
        InputError::PayloadTooLarge { limit, .. } => {
            format!("is over the limit of {limit} bytes")
        }
        InputError::NonPositiveTtl(_) | InputError::TtlBelowResolution { .. } => {
            "must be greater than 0 (and large enough to move the time on)".to_owned()
        }
        InputError::UntilOverflow { .. } => "is too large".to_owned(),
        InputError::FenceOutOfRange(_) => {
            format!("must be at most {}", lease_domain::Fence::MAX.get())
        }
        _ => "has a value out of range".to_owned(),
    };
    Problem::invalid(format!("field `{field}` {what}"))
}

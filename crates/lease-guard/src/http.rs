//! Carrying the fence over HTTP: a holder sends `Lease-Job` (the job id) and `Lease-Fence` (the
//! fence as a decimal integer) with every write; the service checks them with [`check`] against
//! its guard. No HTTP library is needed here: the caller passes the two header values.

use lease_domain::Fence;

use crate::{FenceGuard, GuardError};

/// The request header naming the job (the guard's key).
pub const JOB_HEADER: &str = "Lease-Job";
/// The request header carrying the holder's fence, as a decimal integer.
pub const FENCE_HEADER: &str = "Lease-Fence";

/// Why a request is refused, with the HTTP status to answer.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    /// A header is missing or malformed: 400 Bad Request.
    #[error("{0}")]
    BadRequest(String),
    /// The fence is stale: 409 Conflict.
    #[error("fence {presented} is stale (the resource has seen fence {current})")]
    Stale {
        /// The fence presented.
        presented: Fence,
        /// The highest fence seen for the job.
        current: Fence,
    },
    /// The guard's storage failed: 500 Internal Server Error.
    #[error(transparent)]
    Guard(#[from] GuardError),
}

impl Refusal {
    /// The HTTP status code to answer with.
    #[must_use]
    pub fn status(&self) -> u16 {
        match self {
            Refusal::BadRequest(_) => 400,
            Refusal::Stale { .. } => 409,
            Refusal::Guard(_) => 500,
        }
    }
}

/// The one value of header `name`, as text: every value the request carries is passed, so
/// that a repeated header is refused rather than read by its first value, and the raw bytes,
/// so that a value that is not UTF-8 is refused rather than read lossily (which would make
/// two different job ids one key).
fn one_value<'a>(name: &str, values: &[&'a [u8]]) -> Result<&'a str, Refusal> {
    match values {
        [] => Err(Refusal::BadRequest(format!("the {name} header is missing"))),
        [value] => std::str::from_utf8(value)
            .map(str::trim)
            .map_err(|_| Refusal::BadRequest(format!("the {name} header is not UTF-8 text"))),
        more => Err(Refusal::BadRequest(format!(
            "the {name} header is sent {} times; send it once",
            more.len()
        ))),
    }
}

/// Checks the header values a request carries (every value of each, as raw bytes: with
/// the `http` crate, `headers.get_all(JOB_HEADER).iter().map(|v| v.as_bytes())`) against
/// `guard`: the job id and fence of an admitted write.
///
/// # Errors
/// [`Refusal`], which says which status to answer: 400 for a header missing, repeated, not
/// UTF-8 or malformed, 409 for a stale fence.
pub fn check(
    job: &[&[u8]],
    fence: &[&[u8]],
    guard: &dyn FenceGuard,
) -> Result<(String, Fence), Refusal> {
    let job = one_value(JOB_HEADER, job)?;
    if job.is_empty() {
        return Err(Refusal::BadRequest(format!(
            "the {JOB_HEADER} header is missing"
        )));
    }
    let text = one_value(FENCE_HEADER, fence)?;
    let fence = text
        .parse::<u64>()
        .ok()
        .filter(|_| text.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|n| Fence::new(n).ok())
        .ok_or_else(|| {
            Refusal::BadRequest(format!(
                "the {FENCE_HEADER} header must be a decimal fence from 0 to {}, got {text:?}",
                Fence::MAX
            ))
        })?;
    match guard.admit(job, fence)? {
        Ok(()) => Ok((job.to_owned(), fence)),
        Err(refused) => Err(Refusal::Stale {
            presented: refused.presented,
            current: refused.current,
        }),
    }
}

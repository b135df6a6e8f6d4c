//! Every error the service answers, as `application/problem+json` (RFC 9457) with a `reason`:
//! one place maps refusals, store errors and bad requests to statuses, so every endpoint
//! answers alike. A body names the field and what is wrong with it, never a value from the
//! request (other than the fence of a stale write, which the API pins).

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use lease_domain::{ClaimRefused, WriteRefused};
use lease_ports::StoreError;
use serde::Serialize;
use serde_json::{Map, Value, json};
use utoipa::ToSchema;

/// The reason of a write whose outcome is unknown (`500`): the client maps it to its own
/// outcome-unknown error, never to a plain failure it may retry blindly.
pub const OUTCOME_UNKNOWN: &str = "outcome_unknown";

/// An error answer (boxed: it travels in every handler's `Result`).
#[derive(Debug, Clone, PartialEq)]
pub struct Problem(Box<Parts>);

#[derive(Debug, Clone, PartialEq)]
struct Parts {
    status: StatusCode,
    reason: &'static str,
    detail: String,
    extra: Map<String, Value>,
    retry_after: Option<u64>,
}

/// The body of an error answer, as the OpenAPI document shows it.
#[derive(Debug, Serialize, ToSchema)]
pub struct ProblemBody {
    /// Always `about:blank`: `title` is the status's name.
    #[serde(rename = "type")]
    pub kind: String,
    /// The name of the status.
    pub title: String,
    /// The status code.
    pub status: u16,
    /// What went wrong, in words.
    pub detail: String,
    /// A stable, machine-readable reason: `unauthorized`, `forbidden`, `bad_token`,
    /// `missing_token`, `not_found`, `stale`, `expired`, `not_owner`, `done`, `cancelled`, `dead`,
    /// `live`, `not_due`, `malformed`, `too_large`, `timeout`, `unsupported_media_type`,
    /// `invalid`, `rate_limited`, `overloaded`, `unavailable`, `outcome_unknown`, `store_error`.
    pub reason: String,
    /// With `stale`: the fence the request presented.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub presented_fence: Option<u64>,
    /// With `stale`: the job's current fence.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub current_fence: Option<u64>,
    /// With `expired` and `live`: when the lease ended or ends (Unix seconds).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub until: Option<f64>,
    /// With `done`: the fence the result was stored with.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result_fence: Option<u64>,
    /// With `not_due`: when the job comes due (Unix seconds).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_at: Option<f64>,
    /// With `live` from a retry: the job's status (`pending` or `running`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job_status: Option<String>,
}

impl Problem {
    /// A problem with this status, reason and detail.
    #[must_use]
    pub fn new(status: StatusCode, reason: &'static str, detail: impl Into<String>) -> Self {
        Self(Box::new(Parts {
            status,
            reason,
            detail: detail.into(),
            extra: Map::new(),
            retry_after: None,
        }))
    }

    /// Adds a member to the body.
    #[must_use]
    pub fn with(mut self, name: &str, value: Value) -> Self {
        self.0.extra.insert(name.to_owned(), value);
        self
    }

    /// Adds `Retry-After` (seconds).
    #[must_use]
    pub fn retry_after(mut self, seconds: u64) -> Self {
        self.0.retry_after = Some(seconds);
        self
    }

    /// The status.
    #[must_use]
    pub fn status(&self) -> StatusCode {
        self.0.status
    }

    /// The reason.
    #[must_use]
    pub fn reason(&self) -> &'static str {
        self.0.reason
    }

    /// The detail.
    #[must_use]
    pub fn detail(&self) -> &str {
        &self.0.detail
    }

    /// `400`: the body or a header could not be read.
    #[must_use]
    pub fn malformed(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "malformed", detail)
    }

    /// `422`: a field has the wrong type or a value out of range.
    #[must_use]
    pub fn invalid(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid", detail)
    }

    /// `401`: no key, or a key the store does not know (or revoked).
    #[must_use]
    pub fn unauthorized(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "unauthorized", detail)
    }

    /// `403`: the key's scope or principal does not allow this.
    #[must_use]
    pub fn forbidden(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "forbidden", detail)
    }

    /// `404`: no such job.
    #[must_use]
    pub fn no_such_job() -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", "no such job")
    }

    /// A refused holder write: `404` for a missing job, else `409` with the rule's reason.
    #[must_use]
    pub fn refused_write(refused: &WriteRefused) -> Self {
        let conflict = |reason, detail: &str| Self::new(StatusCode::CONFLICT, reason, detail);
        match refused {
            WriteRefused::Missing => Self::no_such_job(),
            // The domain's words: a fence below the current one was overtaken by a newer
            // claim, one above it was never issued; the reason is `stale` either way.
            WriteRefused::Stale { presented, current } => conflict("stale", &refused.to_string())
                .with("presented_fence", json!(presented.get()))
                .with("current_fence", json!(current.get())),
            WriteRefused::Expired { until, .. } => {
                conflict("expired", "the lease expired").with("until", json!(until.get()))
            }
            WriteRefused::NotOwner { .. } => conflict(
                "not_owner",
                "the lease is not held by an owner this key may act as",
            ),
            WriteRefused::Done { result_fence } => {
                let problem = conflict("done", "the job is done; its result is kept");
                match result_fence {
                    Some(f) => problem.with("result_fence", json!(f.get())),
                    None => problem,
                }
            }
            WriteRefused::Cancelled => conflict("cancelled", "the job was cancelled"),
            WriteRefused::Dead => conflict("dead", "the job is dead"),
            WriteRefused::TokenMissing => Self::new(
                StatusCode::BAD_REQUEST,
                "missing_token",
                "send the lease's token, once, as the Lease-Token header",
            ),
            WriteRefused::BadToken => {
                metrics::counter!("lease_server_bad_lease_tokens_total").increment(1);
                Self::new(
                    StatusCode::FORBIDDEN,
                    "bad_token",
                    "the Lease-Token is not this lease's",
                )
            }
            WriteRefused::NoGroup => conflict("no_group", "the job has no group to hold"),
            WriteRefused::Active { status } => conflict(
                "live",
                format!(
                    "the job is {status}; only dead or cancelled jobs can be retried",
                    status = status.as_str()
                )
                .as_str(),
            )
            .with("job_status", json!(status.as_str())),
        }
    }

    /// A refused claim by id: `404` for a missing job, else `409` with the rule's reason.
    #[must_use]
    pub fn refused_claim(refused: &ClaimRefused) -> Self {
        let conflict = |reason, detail: &str| Self::new(StatusCode::CONFLICT, reason, detail);
        match refused {
            ClaimRefused::Missing => Self::no_such_job(),
            ClaimRefused::Done => conflict("done", "the job is done"),
            ClaimRefused::Dead | ClaimRefused::FenceExhausted => {
                conflict("dead", "the job can never be leased again")
            }
            ClaimRefused::Cancelled => conflict("cancelled", "the job was cancelled"),
            ClaimRefused::Waiting => conflict("waiting", "the job waits for its parents to finish"),
            ClaimRefused::NotDue { run_at } => {
                conflict("not_due", "the job is not due yet").with("run_at", json!(run_at.get()))
            }
            ClaimRefused::Live { until, .. } => {
                conflict("live", "another lease of the job is live")
                    .with("until", json!(until.get()))
            }
        }
    }

    /// A store error: the caller's input (`422`); the store not reached or not able to take
    /// the request, nothing applied (`503 unavailable` with `Retry-After`: send it again); a
    /// write whose commit may or may not have happened (`500 outcome_unknown`: read the job to
    /// find out before sending it again); else `500 store_error`.
    #[must_use]
    pub fn store(err: &StoreError) -> Self {
        match err {
            // A workflow the document allows but the stored jobs refuse (a parent that does
            // not exist, a job naming itself, a cycle): a conflict with what is stored.
            StoreError::InvalidInput(e @ lease_domain::InputError::Workflow(_)) => {
                Self::new(StatusCode::CONFLICT, "workflow", e.to_string())
            }
            StoreError::InvalidInput(e) => Self::invalid(e.to_string()),
            StoreError::ClockSkew(_) => {
                Self::invalid("the time given is too far from the store's clock for its skew bound")
            }
            StoreError::Unavailable(_) | StoreError::Full(_) | StoreError::ReadOnly(_) => {
                tracing::warn!(error = %err, "the store refused a request");
                Self::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "unavailable",
                    "the store cannot take this request now",
                )
                .retry_after(1)
            }
            StoreError::Indeterminate(_) => {
                tracing::warn!(error = %err, "the store's answer to a write was lost");
                Self::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    OUTCOME_UNKNOWN,
                    "the store's answer was lost: the write may or may not have been applied; \
                     read the job to find out before sending it again",
                )
            }
            _ => {
                tracing::error!(error = %err, "the store failed a request");
                Self::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "store_error",
                    "the store failed and applied nothing",
                )
            }
        }
    }

    /// The body of the answer, as JSON.
    #[must_use]
    pub fn body(&self) -> Value {
        let mut body = Map::new();
        body.insert("type".into(), json!("about:blank"));
        body.insert(
            "title".into(),
            json!(self.0.status.canonical_reason().unwrap_or("Error")),
        );
        body.insert("status".into(), json!(self.0.status.as_u16()));
        body.insert("detail".into(), json!(self.0.detail));
        body.insert("reason".into(), json!(self.0.reason));
        for (k, v) in &self.0.extra {
            body.insert(k.clone(), v.clone());
        }
        Value::Object(body)
    }
}

/// A store error as its problem, so a handler writes `store.call().await?`.
impl From<StoreError> for Problem {
    fn from(err: StoreError) -> Self {
        Problem::store(&err)
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let mut response = (self.0.status, self.body().to_string()).into_response();
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        if self.0.status == StatusCode::UNAUTHORIZED {
            headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        if let Some(seconds) = self.0.retry_after {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_store_error_is_a_status_the_client_can_act_on() {
        let unavailable = Problem::store(&StoreError::Unavailable("connection reset".into()));
        assert_eq!(
            (
                unavailable.status(),
                unavailable.reason(),
                unavailable.0.retry_after
            ),
            (StatusCode::SERVICE_UNAVAILABLE, "unavailable", Some(1))
        );
        let lost = Problem::store(&StoreError::Indeterminate("commit lost".into()));
        assert_eq!(
            (lost.status(), lost.reason(), lost.0.retry_after),
            (StatusCode::INTERNAL_SERVER_ERROR, OUTCOME_UNKNOWN, None)
        );
        assert!(
            lost.detail().contains("may or may not"),
            "{}",
            lost.detail()
        );
        let corrupt = Problem::store(&StoreError::Corrupt("a negative fence".into()));
        assert_eq!(
            (corrupt.status(), corrupt.reason()),
            (StatusCode::INTERNAL_SERVER_ERROR, "store_error")
        );
        // No store text reaches the client: it may name the database.
        for problem in [unavailable, lost, corrupt] {
            for secret in ["connection reset", "commit lost", "negative fence"] {
                assert!(!problem.detail().contains(secret), "{}", problem.detail());
            }
        }
    }
}

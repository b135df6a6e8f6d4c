//! Every request's body is read whole before anything answers it, so that an early answer
//! (a `429` from the rate limit, a `503` from load shedding or the timeout, a `401`, a `422`
//! from a parameter) leaves the keep-alive connection ready for the client's next request.
//!
//! hyper reuses an HTTP/1.1 connection only when the request's body was read to its end by
//! the time the answer goes out; otherwise it closes the connection under the answer, without
//! saying `Connection: close`, and a client that sends its next request on it sees a broken
//! pipe or a reset instead of an answer. This layer runs outside every limit and reads the
//! body (up to the body limit, within the request timeout) into memory, so every layer and
//! handler under it meets a body that is already complete. A body over the limit is read on
//! and dropped, up to [`DRAIN_FACTOR`] times the limit, so that its `413` also keeps the
//! connection; past that, or when the body does not arrive in time, the answer says
//! `Connection: close`, as it must when the rest of the request is never read.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures::StreamExt;

use crate::App;
use crate::problem::Problem;

/// How much of a body over the limit is read and dropped, as a multiple of the limit, so
/// that its `413` keeps the connection open.
pub(crate) const DRAIN_FACTOR: usize = 8;

/// What reading a body came to.
enum Read {
    /// The whole body, within the limit.
    Whole(Vec<u8>),
    /// Over the limit; `drained` says whether the rest was read to its end.
    TooLarge { drained: bool },
    /// The body broke off (the client went away or sent a malformed chunk).
    Broken,
}

/// Reads `body` whole if it fits in `limit` bytes; past the limit, reads on and drops up to
/// `DRAIN_FACTOR * limit` bytes in all.
async fn read(body: Body, limit: usize, declared: Option<u64>) -> Read {
    let drain = limit.saturating_mul(DRAIN_FACTOR);
    if declared.is_some_and(|n| usize::try_from(n).map_or(true, |n| n > drain)) {
        return Read::TooLarge { drained: false };
    }
    let mut stream = body.into_data_stream();
    let mut kept = Vec::with_capacity(
        declared.map_or(0, |n| usize::try_from(n).map_or(limit, |n| n.min(limit))),
    );
    let mut seen = 0usize;
    while let Some(chunk) = stream.next().await {
        let Ok(chunk) = chunk else {
            return Read::Broken;
        };
        seen = seen.saturating_add(chunk.len());
        if seen > drain {
            return Read::TooLarge { drained: false };
        }
        if seen <= limit {
            kept.extend_from_slice(&chunk);
        }
    }
    if seen > limit {
        Read::TooLarge { drained: true }
    } else {
        Read::Whole(kept)
    }
}

/// The answer to a request whose body could not be read whole; `close` adds
/// `Connection: close` (the rest of the request was not read, so the connection cannot carry
/// another one).
fn refuse(problem: Problem, close: bool) -> Response {
    let mut response = problem.into_response();
    if close {
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

/// The layer's function (see the module documentation).
pub(crate) async fn read_whole(
    State(app): State<Arc<App>>,
    request: Request,
    next: Next,
) -> Response {
    let (parts, body) = request.into_parts();
    if axum::body::HttpBody::is_end_stream(&body) {
        return next.run(Request::from_parts(parts, body)).await;
    }
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let limit = app.config.body_limit;
    let reading = tokio::time::timeout(app.config.request_timeout, read(body, limit, declared));
    match reading.await {
        Ok(Read::Whole(bytes)) => {
            next.run(Request::from_parts(parts, Body::from(bytes)))
                .await
        }
        Ok(Read::TooLarge { drained }) => refuse(
            Problem::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "too_large",
                "the body is over the size limit",
            ),
            !drained,
        ),
        Ok(Read::Broken) => refuse(Problem::malformed("the body could not be read"), true),
        Err(_) => refuse(
            Problem::new(
                StatusCode::REQUEST_TIMEOUT,
                "timeout",
                "the body did not arrive within the request timeout",
            ),
            true,
        ),
    }
}

//! Handlers from declarations: the caller and its scope as extractors (one per route group),
//! and request bodies and parameters checked against the served OpenAPI document before they
//! are read into their types. Auth extractors go first in a handler's arguments, so a request
//! without a usable key is answered `401`/`403` before its body is read.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{FromRequest, FromRequestParts, MatchedPath, RawPathParams, Request};
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use lease_domain::{Scope, TokenDigest};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::App;
use crate::auth::{Caller, authenticate, authenticate_holder, lease_token};
use crate::problem::Problem;

/// A caller with at least a viewer key (reads).
#[derive(Debug)]
pub(crate) struct Viewer;

/// A caller with at least a worker key (enqueues and claims), and who it is.
#[derive(Debug)]
pub(crate) struct Worker(pub(crate) Caller);

/// A caller with an admin key (cancel, retry, purge).
#[derive(Debug)]
pub(crate) struct Admin;

/// Each is the caller of a request whose key has at least its scope.
macro_rules! from_key {
    ($name:ident, $scope:expr, $make:expr) => {
        impl FromRequestParts<Arc<App>> for $name {
            type Rejection = Problem;

            async fn from_request_parts(
                parts: &mut Parts,
                app: &Arc<App>,
            ) -> Result<Self, Self::Rejection> {
                authenticate(app, &parts.headers, $scope).await.map($make)
            }
        }
    };
}

from_key!(Viewer, Scope::Viewer, |_| Viewer);
from_key!(Worker, Scope::Worker, Worker);
from_key!(Admin, Scope::Admin, |_| Admin);

/// A lease holder writing its lease (a worker key), counted in the holder's own rate-limit
/// bucket so that claims and reads never starve renewals, and the digest of the request's one
/// `Lease-Token` (for the store to judge).
#[derive(Debug)]
pub(crate) struct Holder {
    pub(crate) caller: Caller,
    pub(crate) token: Option<TokenDigest>,
}

impl FromRequestParts<Arc<App>> for Holder {
    type Rejection = Problem;

    async fn from_request_parts(
        parts: &mut Parts,
        app: &Arc<App>,
    ) -> Result<Self, Self::Rejection> {
        let caller = authenticate_holder(app, &parts.headers).await?;
        Ok(Holder {
            caller,
            token: lease_token(&parts.headers),
        })
    }
}

/// The route of a request (its path template), after its path and query parameters were
/// checked against the document; and its path parameters' values.
async fn checked_params(
    parts: &mut Parts,
    app: &Arc<App>,
) -> Result<Vec<(String, String)>, Problem> {
    let path = parts
        .extensions
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_default();
    let params: Vec<(String, String)> = RawPathParams::from_request_parts(parts, app)
        .await
        .map(|raw| {
            raw.iter()
                .map(|(name, value)| (name.to_owned(), value.to_owned()))
                .collect()
        })
        .map_err(|_| Problem::malformed("the path is not valid UTF-8 after percent-decoding"))?;
    app.contract
        .check_params(&parts.method, &path, &params, parts.uri.query())?;
    Ok(params)
}

/// A request's path and query parameters, checked against the document (for a route without
/// a path parameter).
#[derive(Debug)]
pub(crate) struct Params;

impl FromRequestParts<Arc<App>> for Params {
    type Rejection = Problem;

    async fn from_request_parts(
        parts: &mut Parts,
        app: &Arc<App>,
    ) -> Result<Self, Self::Rejection> {
        checked_params(parts, app).await.map(|_| Params)
    }
}

/// The one path parameter of a route (a job id or a queue name), percent-decoded, after the
/// request's parameters were checked against the document.
#[derive(Debug)]
pub(crate) struct Param(pub(crate) String);

impl FromRequestParts<Arc<App>> for Param {
    type Rejection = Problem;

    async fn from_request_parts(
        parts: &mut Parts,
        app: &Arc<App>,
    ) -> Result<Self, Self::Rejection> {
        let mut params = checked_params(parts, app).await?;
        match (params.pop(), params.is_empty()) {
            (Some((_, value)), true) => Ok(Param(value)),
            _ => Err(Problem::malformed("the path could not be read")),
        }
    }
}

/// The two path parameters of a route (a queue and one of its groups), percent-decoded, in
/// path order, after the request's parameters were checked against the document.
#[derive(Debug)]
pub(crate) struct TwoParams(pub(crate) String, pub(crate) String);

impl FromRequestParts<Arc<App>> for TwoParams {
    type Rejection = Problem;

    async fn from_request_parts(
        parts: &mut Parts,
        app: &Arc<App>,
    ) -> Result<Self, Self::Rejection> {
        let params = checked_params(parts, app).await?;
        match <[(String, String); 2]>::try_from(params) {
            Ok([(_, first), (_, second)]) => Ok(TwoParams(first, second)),
            Err(_) => Err(Problem::malformed("the path could not be read")),
        }
    }
}

/// A JSON body read into `T` after it was checked against the document (the handler's
/// `Param` or `Params` checks the parameters): `415` unless it is `application/json`, `413` over the body limit, `400`
/// unless it is JSON, `422` naming the field when the document does not allow it. An empty
/// body where the document's body is optional reads as `{}`.
#[derive(Debug)]
pub(crate) struct Checked<T>(pub(crate) T);

impl<T: DeserializeOwned> FromRequest<Arc<App>> for Checked<T> {
    type Rejection = Problem;

    async fn from_request(request: Request, app: &Arc<App>) -> Result<Self, Self::Rejection> {
        let (parts, body) = request.into_parts();
        let path = parts
            .extensions
            .get::<MatchedPath>()
            .map(|p| p.as_str().to_owned())
            .unwrap_or_default();
        let optional = !app.contract.body_required(&parts.method, &path);
        let json = parts
            .headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/json"));
        let request = Request::from_parts(parts, body);
        let method = request.method().clone();
        let bytes =
            Bytes::from_request(request, app)
                .await
                .map_err(|rejection: BytesRejection| {
                    if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                        Problem::new(
                            StatusCode::PAYLOAD_TOO_LARGE,
                            "too_large",
                            "the body is over the size limit",
                        )
                    } else {
                        Problem::malformed("the body could not be read")
                    }
                })?;
        let value = if bytes.is_empty() && optional {
            Value::Object(serde_json::Map::new())
        } else {
            if !json {
                return Err(Problem::new(
                    StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    "unsupported_media_type",
                    "the body must be sent as Content-Type: application/json",
                ));
            }
            if !crate::validate::integers_fit(&bytes) {
                return Err(Problem::invalid(
                    "a whole number in the body is outside the 64-bit range the document allows",
                ));
            }
            serde_json::from_slice(&bytes).map_err(|e| {
                Problem::malformed(format!(
                    "the body is not valid JSON (line {}, column {})",
                    e.line(),
                    e.column()
                ))
            })?
        };
        // An optional body sent as JSON `null` says nothing, as an empty one does.
        let value = if value.is_null() && optional {
            Value::Object(serde_json::Map::new())
        } else {
            value
        };
        let mut value = value;
        app.contract.check_body(&method, &path, &value)?;
        crate::validate::whole_numbers(&mut value);
        serde_json::from_value(value)
            .map(Checked)
            .map_err(|_| Problem::invalid("the body does not match what this endpoint takes"))
    }
}

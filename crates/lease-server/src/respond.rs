//! What every handler shares: the state and answer types, the clock a request is decided at,
//! query and count parsing, JSON answers, a holder's credential and write, and the bodies and
//! views more than one resource uses.

use crate::App;
use crate::extract::Holder;
use crate::fields::{Name, Time, Ttl};
use crate::input::bad_value;
use crate::problem::Problem;
use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use lease_domain::{Command, Credential, JobId, LeaseTerm, Owner, Timestamp};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use utoipa::ToSchema;

pub(crate) type AppState = State<Arc<App>>;

pub(crate) type Answer = Result<Response, Problem>;

/// The time a request is decided at: the server's clock, or the caller's `now` when the
/// server trusts caller clocks (a test setting; otherwise the document has no `now` and a body
/// that sends one is refused before this).
pub(crate) fn now(app: &App, given: Option<&Time>) -> Result<Timestamp, Problem> {
    match given {
        Some(_) if !app.config.client_clock => Err(Problem::invalid(
            "`now` is taken only by a server started to trust caller clocks",
        )),
        Some(t) => t.at("now"),
        None => Ok((app.config.clock)()),
    }
}

/// The time a query string's `now` names (checked as a number by the contract), if any.
pub(crate) fn query_now(app: &App, text: Option<&str>) -> Result<Timestamp, Problem> {
    let given = text
        .map(|t| t.parse::<f64>().map(Time))
        .transpose()
        .map_err(|_| Problem::invalid("parameter `now` must be a number"))?;
    now(app, given.as_ref())
}

/// A query string, read after the contract checked it.
pub(crate) fn query<T>(query: Result<Query<T>, QueryRejection>) -> Result<T, Problem> {
    query
        .map(|Query(q)| q)
        .map_err(|_| Problem::malformed("the query string could not be read"))
}

/// A count the contract checked, or `default` when absent.
pub(crate) fn count(text: Option<&str>, name: &str, default: usize) -> Result<usize, Problem> {
    text.map_or(Ok(default), |t| {
        t.parse()
            .map_err(|_| Problem::invalid(format!("parameter `{name}` must be a whole number")))
    })
}

pub(crate) fn term(now: Timestamp, ttl: &Ttl) -> Result<LeaseTerm, Problem> {
    LeaseTerm::new(now.get(), ttl.0).map_err(|e| bad_value("ttl", &e))
}

pub(crate) fn json_response(status: StatusCode, body: impl Serialize) -> Response {
    (status, Json(body)).into_response()
}

pub(crate) fn no_store(mut response: Response) -> Response {
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// What a lease holder's write proves, for the store to judge in its own transaction (the
/// whole pinned order: no such job, stale, done/cancelled/dead, not the owner, no token or the
/// wrong one, expired): the key's principal and scope, the owner the request named, and the
/// digest of its one `Lease-Token`. The server decides nothing of the job; it only refuses a
/// named owner this key may never act as (`403`), which reads nothing.
pub(crate) fn credential(holder: Holder, named: Option<Name>) -> Result<Credential, Problem> {
    let named = named.map(Name::owner).transpose()?;
    if let Some(owner) = &named {
        if !holder.caller.may_act_as(owner) {
            return Err(holder.caller.not_as_owner());
        }
    }
    Ok(Credential {
        principal: holder.caller.principal,
        scope: holder.caller.scope,
        named,
        token: holder.token,
    })
}

/// A holder's write as the store takes it: `write` made as the credential's writer (a
/// stand-in the store replaces with the lease's owner once the credential passes).
pub(crate) fn as_holder(credential: Credential, write: impl FnOnce(Owner) -> Command) -> Command {
    let stand_in = credential.writer();
    Command::AsHolder(credential, Box::new(write(stand_in)))
}

/// Runs a holder's write in the store and maps a refusal to its status.
pub(crate) async fn holder_write<T: lease_ports::FromOutcome>(
    app: &App,
    id: &JobId,
    command: Command,
) -> Result<T, Problem> {
    let outcome = app.store.apply(id, command, None).await?.outcome;
    Ok(lease_ports::outcome_as(outcome)?)
}

/// A payload as a view shows it: as text when it is UTF-8, else as base64; a sealed payload
/// (docs/ENCRYPTION.md) as base64 with the name of its key, so that a worker can open it and a
/// reader is told it is encrypted instead of being shown bytes.
#[derive(Debug, Default, Serialize, ToSchema)]
pub(crate) struct PayloadView {
    /// The payload as text, when it is UTF-8 (never when it is sealed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) payload: Option<String>,
    /// The payload as base64, when it is not UTF-8 (a sealed payload's sealed bytes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) payload_base64: Option<String>,
    /// Present when the payload is sealed: the name of the key it opens with. The server holds
    /// no key and cannot read it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) payload_encrypted: Option<EncryptedView>,
}

/// What a sealed value says of itself without its key.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct EncryptedView {
    /// The name of the key it was sealed with.
    pub(crate) key: String,
}

impl PayloadView {
    pub(crate) fn of(payload: Option<&[u8]>) -> Self {
        let Some(bytes) = payload else {
            return Self::default();
        };
        if let Some(sealed) = lease_domain::sealed_payload(bytes) {
            return Self {
                payload: None,
                payload_base64: Some(STANDARD.encode(bytes)),
                payload_encrypted: Some(EncryptedView {
                    key: sealed.key.to_owned(),
                }),
            };
        }
        match std::str::from_utf8(bytes) {
            Ok(text) => Self {
                payload: Some(text.to_owned()),
                ..Self::default()
            },
            Err(_) => Self {
                payload_base64: Some(STANDARD.encode(bytes)),
                ..Self::default()
            },
        }
    }
}

/// Done.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct OkBody {
    /// Always `true`.
    pub(crate) ok: bool,
}

/// A body that is empty or `{}`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({}))]
pub(crate) struct EmptyBody {}

//! Who is calling: the API key in `Authorization: Bearer`, looked up by its id in the store
//! and checked against its digest in constant time; and what that caller may do.

use axum::http::{HeaderMap, HeaderName, header};
use lease_domain::{KeyId, Owner, Principal, Scope, TokenDigest, may_act_as};
use lease_ports::keys::KeyRecord;

use crate::App;
use crate::limits::Class;
use crate::problem::Problem;
use crate::secrets;
use crate::session;

/// The header that carries a lease's token.
pub const LEASE_TOKEN: HeaderName = HeaderName::from_static("lease-token");

/// An authenticated caller.
#[derive(Debug, Clone)]
pub(crate) struct Caller {
    /// Who holds the key.
    pub(crate) principal: Principal,
    /// What the key may do.
    pub(crate) scope: Scope,
}

impl Caller {
    /// `403` for a request that names an owner outside the key's namespace. The principal is
    /// the key's own, not a value from the request, so naming it repeats nothing sent.
    pub(crate) fn not_as_owner(&self) -> Problem {
        let p = &self.principal;
        Problem::forbidden(format!(
            "this key (principal {p}) may act only as {p} or {p}/..."
        ))
    }

    /// The owner a request that names none acts as: the principal itself.
    ///
    /// # Errors
    /// Never for a checked principal; a `500` otherwise.
    pub(crate) fn default_owner(&self) -> Result<Owner, Problem> {
        Owner::new(self.principal.as_str()).map_err(|_| {
            Problem::new(
                axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                "store_error",
                "the key's principal is not a valid owner",
            )
        })
    }

    /// Whether this caller may act as `owner`.
    #[must_use]
    pub(crate) fn may_act_as(&self, owner: &Owner) -> bool {
        may_act_as(self.scope, &self.principal, owner)
    }
}

/// Keys read from the store, each trusted for `ServiceConfig::key_cache` (a key is read
/// once a second, not on every request; a revocation reaches every server within that time).
#[derive(Debug, Default)]
pub(crate) struct KeyCache {
    keys: std::sync::Mutex<std::collections::HashMap<KeyId, (KeyRecord, tokio::time::Instant)>>,
}

/// The most keys kept; past it, the cache starts over.
const MAX_CACHED_KEYS: usize = 10_000;

impl KeyCache {
    async fn key(&self, app: &App, id: &KeyId) -> Result<Option<KeyRecord>, Problem> {
        let ttl = app.config.key_cache;
        if !ttl.is_zero() {
            let keys = self.keys.lock().unwrap_or_else(|p| p.into_inner());
            if let Some((record, read)) = keys.get(id) {
                if read.elapsed() < ttl {
                    return Ok(Some(record.clone()));
                }
            }
        }
        let record = app.store.key(id).await?;
        if let (Some(found), false) = (&record, ttl.is_zero()) {
            let mut keys = self.keys.lock().unwrap_or_else(|p| p.into_inner());
            if keys.len() >= MAX_CACHED_KEYS {
                keys.clear();
            }
            keys.insert(id.clone(), (found.clone(), tokio::time::Instant::now()));
        }
        Ok(record)
    }
}

/// Authenticates the request and checks that its key's scope allows `needed`.
///
/// # Errors
/// `401` (with `WWW-Authenticate: Bearer`) without a key, or for one the store does not
/// know, has revoked, or whose secret does not match; `403` for a scope below `needed`.
pub(crate) async fn authenticate(
    app: &App,
    headers: &HeaderMap,
    needed: Scope,
) -> Result<Caller, Problem> {
    authenticate_as(app, headers, needed, Class::Other).await
}

/// [`authenticate`] for a lease holder's write, counted in the holder's own rate-limit bucket
/// so that claims and reads never starve renewals.
///
/// # Errors
/// As [`authenticate`].
pub(crate) async fn authenticate_holder(app: &App, headers: &HeaderMap) -> Result<Caller, Problem> {
    authenticate_as(app, headers, Scope::Worker, Class::Holder).await
}

/// The live key a request authenticates with: `Authorization: Bearer <key>`, else the
/// session cookie of the operator page.
async fn key_of(app: &App, headers: &HeaderMap) -> Result<KeyRecord, Problem> {
    let mut values = headers.get_all(header::AUTHORIZATION).iter();
    match (values.next(), values.next()) {
        (Some(value), None) => {
            let presented = value
                .to_str()
                .ok()
                .and_then(|v| v.strip_prefix("Bearer "))
                .map(str::trim)
                .ok_or_else(|| {
                    Problem::unauthorized("send the API key as Authorization: Bearer <key>")
                })?;
            check_key(app, presented).await
        }
        (None, _) => match session::Cookie::of(headers) {
            Some(cookie) => session_key(app, &cookie?).await,
            None => Err(Problem::unauthorized(
                "send one API key as Authorization: Bearer <key>",
            )),
        },
        (Some(_), Some(_)) => Err(Problem::unauthorized(
            "send one API key as Authorization: Bearer <key>",
        )),
    }
}

/// The live key whose text is `presented`.
///
/// # Errors
/// `401` for a key that is malformed, unknown, wrong or revoked (all alike).
pub(crate) async fn check_key(app: &App, presented: &str) -> Result<KeyRecord, Problem> {
    let unknown = || Problem::unauthorized("the API key is not known, or was revoked");
    let (id, secret) = secrets::parse_key(presented).ok_or_else(unknown)?;
    let record = app.keys.key(app, &id).await?.ok_or_else(unknown)?;
    if !secrets::same(&secrets::digest(secret), &record.digest) || record.revoked.is_some() {
        return Err(unknown());
    }
    Ok(record)
}

/// The live session a request carries: its key, when it ends and its CSRF token; `None`
/// without a cookie, or for one that is malformed, ended or no longer signed by a live key.
pub(crate) async fn session_of(app: &App, headers: &HeaderMap) -> Option<(KeyRecord, u64, String)> {
    let cookie = session::Cookie::of(headers)?.ok()?;
    let record = session_key(app, &cookie).await.ok()?;
    Some((record, cookie.expires, cookie.csrf()))
}

/// The live key of a session cookie that its key signed and that has not ended.
async fn session_key(app: &App, cookie: &session::Cookie<'_>) -> Result<KeyRecord, Problem> {
    let ended = || Problem::unauthorized("the session ended or its key was revoked; sign in again");
    let record = app.keys.key(app, &cookie.key).await?.ok_or_else(ended)?;
    if !cookie.signed_by(&record.digest) || record.revoked.is_some() {
        return Err(ended());
    }
    let ends = u32::try_from(cookie.expires).map_or(f64::MAX, f64::from);
    if (app.config.clock)().get() >= ends {
        return Err(ended());
    }
    Ok(record)
}

async fn authenticate_as(
    app: &App,
    headers: &HeaderMap,
    needed: Scope,
    class: Class,
) -> Result<Caller, Problem> {
    let record = key_of(app, headers).await?;
    if !record.scope.allows(needed) {
        return Err(Problem::forbidden(format!(
            "a {} key may not do this; it needs a {} key",
            record.scope, needed
        )));
    }
    app.limits
        .admit(&record.principal, class)
        .map_err(|seconds| {
            Problem::new(
                axum::http::StatusCode::TOO_MANY_REQUESTS,
                "rate_limited",
                "this key's principal is over its rate limit; try again",
            )
            .retry_after(seconds)
        })?;
    Ok(Caller {
        principal: record.principal,
        scope: record.scope,
    })
}

/// The digest of the request's `Lease-Token`, when it sent exactly one that is text; `None`
/// otherwise (the store then refuses the write as `missing_token`, in its place in the pinned
/// order).
pub(crate) fn lease_token(headers: &HeaderMap) -> Option<TokenDigest> {
    let mut values = headers.get_all(LEASE_TOKEN).iter();
    let (Some(value), None) = (values.next(), values.next()) else {
        return None;
    };
    let token = value.to_str().ok()?;
    Some(secrets::digest(token.trim()))
}

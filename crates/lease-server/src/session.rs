//! Sessions for the operator page: an API key pasted once is exchanged for a cookie, so the
//! key never sits in the page, a URL or browser storage.
//!
//! The cookie is `lease_session=<key id>.<expires>.<nonce>.<mac>`: the key it stands for, when
//! it ends (Unix seconds), 128 random bits, and an HMAC-SHA256 of the three keyed with the
//! key's stored digest. Every server over the same store can check it (no session table, no
//! shared secret to configure), and revoking the key ends every session made with it.
//! A state-changing request that authenticates by the cookie must also carry the header
//! `X-Lease-CSRF` with the session's CSRF token (a digest of the nonce, handed to the page by
//! `POST /v1/sessions` and `GET /v1/session`, which another origin cannot read), and must not
//! be marked `Sec-Fetch-Site: cross-site`.

use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, header};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, KeyInit, Mac};
use lease_domain::{KeyId, TokenDigest};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::problem::Problem;

/// The session cookie's name.
pub const COOKIE: &str = "lease_session";

/// The header that carries a session's CSRF token.
pub const CSRF: HeaderName = HeaderName::from_static("x-lease-csrf");

/// A session cookie, read but not yet checked against its key.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Cookie<'a> {
    pub(crate) key: KeyId,
    pub(crate) expires: u64,
    nonce: &'a str,
    mac: &'a str,
}

impl<'a> Cookie<'a> {
    /// The session cookie of a request, if it sends one (and only one).
    pub(crate) fn of(headers: &'a HeaderMap) -> Option<Result<Self, Problem>> {
        let mut found = headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|pair| pair.trim().strip_prefix(COOKIE)?.strip_prefix('='));
        let value = found.next()?;
        if found.next().is_some() {
            return Some(Err(Problem::unauthorized(
                "more than one session cookie; sign in again",
            )));
        }
        Some(Self::parse(value).ok_or_else(|| {
            Problem::unauthorized("the session cookie is not one this server made; sign in again")
        }))
    }

    fn parse(value: &'a str) -> Option<Self> {
        let mut parts = value.split('.');
        let (id, expires, nonce, mac) =
            (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() || nonce.is_empty() || mac.is_empty() {
            return None;
        }
        Some(Self {
            key: KeyId::new(id).ok()?,
            expires: expires.parse().ok()?,
            nonce,
            mac,
        })
    }

    /// Whether the MAC is the one `digest` gives (compared in constant time).
    pub(crate) fn signed_by(&self, digest: &TokenDigest) -> bool {
        let expected = mac(digest, &self.key, self.expires, self.nonce);
        expected.as_bytes().ct_eq(self.mac.as_bytes()).into()
    }

    /// The CSRF token of this session.
    pub(crate) fn csrf(&self) -> String {
        csrf(self.nonce)
    }
}

fn mac(digest: &TokenDigest, key: &KeyId, expires: u64, nonce: &str) -> String {
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(digest.as_bytes()) else {
        // HMAC takes a key of any length; this cannot happen.
        return String::new();
    };
    mac.update(format!("lease-session\0{key}.{expires}.{nonce}").as_bytes());
    URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes())
}

fn csrf(nonce: &str) -> String {
    URL_SAFE_NO_PAD.encode(Sha256::digest(format!("lease-csrf\0{nonce}").as_bytes()))
}

/// A new session for the key `key` (whose stored digest is `digest`), ending at `expires`:
/// the cookie's value and the CSRF token.
pub(crate) fn issue(
    key: &KeyId,
    digest: &TokenDigest,
    expires: u64,
) -> Result<(String, String), Problem> {
    let nonce = crate::secrets::new_session_nonce().map_err(|_| {
        Problem::new(
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            "the OS random source failed; try again",
        )
    })?;
    let value = format!(
        "{key}.{expires}.{nonce}.{}",
        mac(digest, key, expires, &nonce)
    );
    Ok((value, csrf(&nonce)))
}

/// The `Set-Cookie` value for `value`, living `max_age` seconds (0 removes it).
pub(crate) fn set_cookie(value: &str, max_age: u64, secure: bool) -> HeaderValue {
    let secure = if secure { "; Secure" } else { "" };
    HeaderValue::from_str(&format!(
        "{COOKIE}={value}; Path=/; Max-Age={max_age}; HttpOnly; SameSite=Strict{secure}"
    ))
    .unwrap_or_else(|_| HeaderValue::from_static("lease_session=; Path=/; Max-Age=0"))
}

/// The CSRF rule for a request that authenticates by the session cookie: a method that may
/// change something needs the session's token in `X-Lease-CSRF`, and nothing marked
/// cross-site is taken. Requests with an `Authorization` header or no cookie are not
/// affected, and neither is signing in (`POST /v1/sessions` takes a key, not the cookie).
pub(crate) fn check_csrf(method: &Method, path: &str, headers: &HeaderMap) -> Result<(), Problem> {
    if matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
        || headers.contains_key(header::AUTHORIZATION)
        || (*method == Method::POST && path == "/v1/sessions")
    {
        return Ok(());
    }
    let Some(cookie) = Cookie::of(headers) else {
        return Ok(());
    };
    let cookie = cookie?;
    let refused = |detail: &str| {
        Err(Problem::new(
            axum::http::StatusCode::FORBIDDEN,
            "csrf",
            detail.to_owned(),
        ))
    };
    if headers
        .get("sec-fetch-site")
        .is_some_and(|v| v.as_bytes() == b"cross-site")
    {
        return refused("a request from another site may not use this session");
    }
    let presented = headers
        .get(CSRF)
        .map(HeaderValue::as_bytes)
        .unwrap_or_default();
    if bool::from(presented.ct_eq(cookie.csrf().as_bytes())) {
        Ok(())
    } else {
        refused("a request that changes something must carry the session's X-Lease-CSRF token")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> KeyId {
        KeyId::new("0123456789abcdef").unwrap()
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        map
    }

    #[test]
    fn a_cookie_is_signed_by_its_keys_digest_only_and_names_its_key_and_end() {
        let digest = TokenDigest::new([7; 32]);
        let (value, csrf) = issue(&key(), &digest, 1_000).unwrap();
        let sent = headers(&[("cookie", &format!("theme=dark; {COOKIE}={value}"))]);
        let cookie = Cookie::of(&sent).unwrap().unwrap();
        assert_eq!((cookie.key.clone(), cookie.expires), (key(), 1_000));
        assert!(cookie.signed_by(&digest));
        assert!(!cookie.signed_by(&TokenDigest::new([8; 32])));
        assert_eq!(cookie.csrf(), csrf);
        // A changed end time breaks the MAC.
        let moved = value.replacen(".1000.", ".9999.", 1);
        let sent = headers(&[("cookie", &format!("{COOKIE}={moved}"))]);
        assert!(!Cookie::of(&sent).unwrap().unwrap().signed_by(&digest));
    }

    #[test]
    fn malformed_or_doubled_cookies_are_unauthorized_and_absent_ones_are_none() {
        assert!(Cookie::of(&headers(&[("cookie", "other=1")])).is_none());
        for bad in [
            "x",
            "0123456789abcdef.soon.n.m",
            "Not-An-Id.1.n.m",
            "0123456789abcdef.1.n",
        ] {
            let sent = headers(&[("cookie", &format!("{COOKIE}={bad}"))]);
            let err = Cookie::of(&sent).unwrap().unwrap_err();
            assert_eq!(err.status(), axum::http::StatusCode::UNAUTHORIZED, "{bad}");
        }
        let twice = headers(&[
            ("cookie", &format!("{COOKIE}=a")),
            ("cookie", &format!("{COOKIE}=b")),
        ]);
        assert!(Cookie::of(&twice).unwrap().is_err());
    }

    #[test]
    fn a_cookie_request_that_changes_something_needs_the_token_and_no_cross_site_mark() {
        let (value, csrf) = issue(&key(), &TokenDigest::new([1; 32]), 1_000).unwrap();
        let cookie = format!("{COOKIE}={value}");
        let post = Method::POST;
        let path = "/v1/jobs/j/cancel";
        let err = check_csrf(&post, path, &headers(&[("cookie", &cookie)])).unwrap_err();
        assert_eq!((err.status().as_u16(), err.reason()), (403, "csrf"));
        let wrong = headers(&[("cookie", &cookie), ("x-lease-csrf", "guess")]);
        assert!(check_csrf(&post, path, &wrong).is_err());
        let right = headers(&[("cookie", &cookie), ("x-lease-csrf", &csrf)]);
        assert!(check_csrf(&post, path, &right).is_ok());
        let cross = headers(&[
            ("cookie", &cookie),
            ("x-lease-csrf", &csrf),
            ("sec-fetch-site", "cross-site"),
        ]);
        assert!(check_csrf(&post, path, &cross).is_err());
        // Reading, a bearer key, no cookie, and signing in are not affected.
        assert!(check_csrf(&Method::GET, path, &headers(&[("cookie", &cookie)])).is_ok());
        let bearer = headers(&[("cookie", &cookie), ("authorization", "Bearer k")]);
        assert!(check_csrf(&post, path, &bearer).is_ok());
        assert!(check_csrf(&post, path, &HeaderMap::new()).is_ok());
        assert!(check_csrf(&post, "/v1/sessions", &headers(&[("cookie", &cookie)])).is_ok());
    }
}

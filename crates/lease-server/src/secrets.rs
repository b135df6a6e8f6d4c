//! The service's secrets: API keys (`lk_<id>_<secret>`) and lease tokens (`lst_<secret>`),
//! each with at least 256 bits from the operating system's random source, kept by the store
//! only as SHA-256 digests and compared in constant time.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use lease_domain::{KeyId, TokenDigest};
use sha2::{Digest as _, Sha256};
use subtle::ConstantTimeEq as _;

/// The operating system's random source failed.
#[derive(Debug, thiserror::Error)]
#[error("the operating system's random source failed: {0}")]
pub struct RandomUnavailable(String);

fn random<const N: usize>() -> Result<[u8; N], RandomUnavailable> {
    let mut bytes = [0u8; N];
    getrandom::fill(&mut bytes).map_err(|e| RandomUnavailable(e.to_string()))?;
    Ok(bytes)
}

/// The SHA-256 digest of a secret's text.
#[must_use]
pub fn digest(secret: &str) -> TokenDigest {
    TokenDigest::new(Sha256::digest(secret.as_bytes()).into())
}

/// Whether two digests are equal, in time that does not depend on where they differ.
#[must_use]
pub fn same(a: &TokenDigest, b: &TokenDigest) -> bool {
    a.as_bytes().ct_eq(b.as_bytes()).into()
}

/// A new API key, shown once: its id, the whole key, and the digest the store keeps.
#[derive(Debug)]
pub struct NewKey {
    /// The public id (16 hex digits).
    pub id: KeyId,
    /// `lk_<id>_<secret>`: the secret is 32 random bytes, base64url.
    pub key: String,
    /// The SHA-256 digest of the secret part.
    pub digest: TokenDigest,
}

impl NewKey {
    /// What the store keeps of this key for `principal`, live from `created`.
    #[must_use]
    pub fn record(
        &self,
        principal: lease_domain::Principal,
        scope: lease_domain::Scope,
        created: lease_domain::Timestamp,
    ) -> lease_ports::keys::KeyRecord {
        lease_ports::keys::KeyRecord {
            id: self.id.clone(),
            principal,
            scope,
            digest: self.digest,
            created,
            revoked: None,
        }
    }
}

/// Makes a new API key.
///
/// # Errors
/// [`RandomUnavailable`].
pub fn new_key() -> Result<NewKey, RandomUnavailable> {
    let id: String = random::<8>()?.iter().map(|b| format!("{b:02x}")).collect();
    let secret = URL_SAFE_NO_PAD.encode(random::<32>()?);
    let digest = digest(&secret);
    let id = KeyId::new(id).map_err(|e| RandomUnavailable(e.to_string()))?;
    Ok(NewKey {
        key: format!("lk_{id}_{secret}"),
        id,
        digest,
    })
}

/// Splits a presented key into its id and secret; `None` unless it has the shape
/// `lk_<id>_<secret>` (the secret may itself hold `_`).
#[must_use]
pub fn parse_key(key: &str) -> Option<(KeyId, &str)> {
    let rest = key.strip_prefix("lk_")?;
    let (id, secret) = rest.split_once('_')?;
    if secret.is_empty() {
        return None;
    }
    Some((KeyId::new(id).ok()?, secret))
}

/// A new lease token (`lst_` and 32 random bytes, base64url) and the digest the store keeps.
///
/// # Errors
/// [`RandomUnavailable`].
pub fn new_lease_token() -> Result<(String, TokenDigest), RandomUnavailable> {
    let token = format!("lst_{}", URL_SAFE_NO_PAD.encode(random::<32>()?));
    let digest = digest(&token);
    Ok((token, digest))
}

/// A session's nonce: 128 bits from the OS, base64url.
///
/// # Errors
/// [`RandomUnavailable`].
pub fn new_session_nonce() -> Result<String, RandomUnavailable> {
    Ok(URL_SAFE_NO_PAD.encode(random::<16>()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_key_parses_back_to_its_id_and_its_secret_digests_to_what_is_stored() {
        let made = new_key().unwrap();
        let (id, secret) = parse_key(&made.key).unwrap();
        assert_eq!(id, made.id);
        assert!(same(&digest(secret), &made.digest));
        // 32 bytes of secret, base64url without padding.
        assert_eq!(secret.len(), 43);
        assert_ne!(new_key().unwrap().key, made.key);
    }

    #[test]
    fn only_keys_of_the_right_shape_parse() {
        assert!(
            parse_key("lk_0a_s_e_c").is_some_and(|(id, s)| id.as_str() == "0a" && s == "s_e_c")
        );
        for bad in [
            "", "lk_", "lk_0a", "lk_0a_", "LK_0a_s", "lk_0A_s", "lk__s", "lst_abc",
        ] {
            assert!(parse_key(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn lease_tokens_are_fresh_and_digest_to_what_is_stored() {
        let (a, da) = new_lease_token().unwrap();
        let (b, db) = new_lease_token().unwrap();
        assert!(a.starts_with("lst_") && a.len() == 4 + 43);
        assert_ne!(a, b);
        assert!(same(&digest(&a), &da));
        assert!(!same(&da, &db));
    }
}

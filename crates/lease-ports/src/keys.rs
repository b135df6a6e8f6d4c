//! The API keys of the network service, kept in the store so that every server over one
//! database sees the same ones: each key's id, principal and scope in clear, its secret only
//! as a SHA-256 digest.

use async_trait::async_trait;
use lease_domain::{KeyId, KeyRefused, Principal, Scope, Timestamp, TokenDigest};

use crate::StoreError;

/// One API key as a store keeps it (never the secret).
#[derive(Debug, Clone, PartialEq)]
pub struct KeyRecord {
    /// Its public id.
    pub id: KeyId,
    /// Who holds it.
    pub principal: Principal,
    /// What it may do.
    pub scope: Scope,
    /// The SHA-256 digest of its secret.
    pub digest: TokenDigest,
    /// When it was made.
    pub created: Timestamp,
    /// When it was revoked; `None` while it is live.
    pub revoked: Option<Timestamp>,
}

/// A store of API keys.
///
/// # Contract
/// `add_key` decides with [`lease_domain::decide_new_key`] over the principal's live keys and
/// adds the key atomically with that decision, so two concurrent adds never give a principal
/// more live keys than the rule allows. A refusal changes nothing.
#[async_trait]
pub trait KeyStore: Send + Sync {
    /// Adds a live key, or says why the rules refuse it.
    async fn add_key(&self, key: &KeyRecord) -> Result<Result<(), KeyRefused>, StoreError>;

    /// The key with this id (live or revoked), or `None`.
    async fn key(&self, id: &KeyId) -> Result<Option<KeyRecord>, StoreError>;

    /// Every key, live and revoked, in id order.
    async fn keys(&self) -> Result<Vec<KeyRecord>, StoreError>;

    /// Revokes the key at `now`; `false` when there is no such key. Revoking a revoked key
    /// keeps its first revocation time and answers `true`.
    async fn revoke_key(&self, id: &KeyId, now: Timestamp) -> Result<bool, StoreError>;
}

/// Reads a stored key's columns, each checked: anything no store could have written is
/// [`StoreError::Corrupt`] naming the key and the column.
///
/// # Errors
/// [`StoreError::Corrupt`].
pub fn decode_key(
    id: String,
    principal: String,
    scope: &str,
    digest: &[u8],
    created: f64,
    revoked: Option<f64>,
) -> Result<KeyRecord, StoreError> {
    let corrupt = |what: String| StoreError::Corrupt(format!("key {id:?}: {what}").into());
    let time = |value: f64, column: &str| {
        Timestamp::new(value).map_err(|_| corrupt(format!("stored {column} {value} is not finite")))
    };
    Ok(KeyRecord {
        principal: Principal::new(principal).map_err(|e| corrupt(format!("stored {e}")))?,
        scope: Scope::parse(scope).map_err(|e| corrupt(format!("stored {e}")))?,
        digest: TokenDigest::from_slice(digest).map_err(|e| corrupt(format!("stored {e}")))?,
        created: time(created, "created")?,
        revoked: revoked.map(|t| time(t, "revoked")).transpose()?,
        id: KeyId::new(id.clone()).map_err(|e| corrupt(format!("stored {e}")))?,
    })
}

/// The scopes of a principal's live keys, as [`lease_domain::decide_new_key`] takes them.
#[must_use]
pub fn live_scopes<'a>(
    keys: impl IntoIterator<Item = &'a KeyRecord>,
    principal: &Principal,
) -> Vec<Scope> {
    keys.into_iter()
        .filter(|k| &k.principal == principal && k.revoked.is_none())
        .map(|k| k.scope)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stored_key_with_a_value_no_store_writes_is_corrupt_and_named() {
        let ok = decode_key("k1".into(), "ci".into(), "worker", &[1; 32], 5.0, None).unwrap();
        assert_eq!(ok.scope, Scope::Worker);
        for (principal, scope, digest, created, what) in [
            ("CI", "worker", &[1u8; 32][..], 5.0, "principal"),
            ("ci", "root", &[1; 32], 5.0, "scope"),
            ("ci", "worker", &[1; 31], 5.0, "digest"),
            ("ci", "worker", &[1; 32], f64::NAN, "created"),
        ] {
            let err = decode_key("k1".into(), principal.into(), scope, digest, created, None)
                .unwrap_err();
            assert!(
                matches!(err, StoreError::Corrupt(_)) && err.to_string().contains("\"k1\""),
                "{what}: {err}"
            );
        }
    }
}

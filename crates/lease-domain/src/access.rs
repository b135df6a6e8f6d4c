//! Who may do what through the network service: API key scopes, principals and the owners
//! they may act as, and a holder's write judged by its key and lease token.
//!
//! The secrets themselves (keys and lease tokens) are made and hashed outside this crate; the
//! rules only ever see their digests, so nothing here can leak one.

use std::fmt;

use crate::rules::{Job, WriteRefused, judge_holder};
use crate::values::{AccessError, Fence, Owner, TokenDigest};

/// Who writes a holder's write through the network service, and what it proves: the store
/// judges the whole write with it, in its own transaction ([`judge_credential`]), so the
/// service makes no decision of its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credential {
    /// The key's principal.
    pub principal: Principal,
    /// The key's scope.
    pub scope: Scope,
    /// The owner the request named, if it named one (it must be the lease's owner).
    pub named: Option<Owner>,
    /// The digest of the `Lease-Token` the request sent, if it sent exactly one.
    pub token: Option<TokenDigest>,
}

impl Credential {
    /// The owner the writer is known as: the one it named, else its principal.
    #[must_use]
    pub fn writer(&self) -> Owner {
        self.named
            .clone()
            .unwrap_or_else(|| self.principal.as_owner())
    }
}

/// Judges a holder's write through the network service in the order every client sees: no
/// such job; a fence other than the current one (stale, whoever sends it); the job done,
/// cancelled or dead; the lease's owner outside what the key may act as (or not the one the
/// request named); no lease token, then a token that is not the lease's (a lease granted
/// without one has none that matches). On success, the lease's owner, as which the write is
/// then decided (the lease's liveness last).
///
/// # Errors
/// The [`WriteRefused`] reason.
pub fn judge_credential(
    current: Option<&Job>,
    fence: Fence,
    credential: &Credential,
) -> Result<Owner, WriteRefused> {
    let may_write_as = |owner: &Owner| {
        may_act_as(credential.scope, &credential.principal, owner)
            && credential.named.as_ref().is_none_or(|named| named == owner)
    };
    let owner = judge_holder(current, fence, &credential.writer(), may_write_as)?;
    let kept = current.and_then(|job| job.token.as_ref());
    match (&credential.token, kept) {
        (None, _) => Err(WriteRefused::TokenMissing),
        (Some(sent), Some(kept)) if sent.matches(kept) => Ok(owner),
        (Some(_), _) => Err(WriteRefused::BadToken),
    }
}

/// What a key may do. Each scope may do everything the ones before it may.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scope {
    /// Reads: jobs, stats, refusals, metrics.
    Viewer,
    /// Also enqueues, claims and writes its own leases.
    Worker,
    /// Also cancels, retries and purges, and acts as any owner.
    Admin,
}

impl Scope {
    /// The scope's name: `viewer`, `worker` or `admin`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Viewer => "viewer",
            Scope::Worker => "worker",
            Scope::Admin => "admin",
        }
    }

    /// Reads [`Scope::as_str`].
    ///
    /// # Errors
    /// [`AccessError::UnknownScope`].
    pub fn parse(text: &str) -> Result<Self, AccessError> {
        [Scope::Viewer, Scope::Worker, Scope::Admin]
            .into_iter()
            .find(|s| s.as_str() == text)
            .ok_or_else(|| AccessError::UnknownScope(text.to_owned()))
    }

    /// Whether a key of this scope may do what `needed` allows.
    #[must_use]
    pub fn allows(self, needed: Scope) -> bool {
        self >= needed
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Who holds a key: the namespace of owners its leases may have.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Principal(String);

impl Principal {
    /// The longest principal name, in bytes.
    pub const MAX_LEN: usize = 64;

    /// Checks a principal name: 1 to 64 of `a-z`, `0-9`, `.`, `_`, `-`, starting with a letter
    /// or digit (so it can never hold the `/` that separates an owner's parts).
    ///
    /// # Errors
    /// [`AccessError::BadPrincipal`].
    pub fn new(name: impl Into<String>) -> Result<Self, AccessError> {
        let name = name.into();
        let first_ok = name
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
        let all_ok = name.bytes().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'_' || b == b'-'
        });
        if first_ok && all_ok && name.len() <= Self::MAX_LEN {
            Ok(Self(name))
        } else {
            Err(AccessError::BadPrincipal(name))
        }
    }

    /// The principal as an owner (every principal is a valid owner: its rule is stricter).
    #[must_use]
    pub fn as_owner(&self) -> Owner {
        Owner::from_checked(self.0.clone())
    }

    /// The name.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Whether `owner` lies in the namespace of `principal`: the principal itself, or
/// `principal/` followed by anything (`p/worker-1`), never another name that starts the same
/// way (`px`).
#[must_use]
pub fn owner_within(principal: &Principal, owner: &Owner) -> bool {
    let owner = owner.as_str();
    match owner.strip_prefix(principal.as_str()) {
        Some("") => true,
        Some(rest) => rest.starts_with('/'),
        None => false,
    }
}

/// Whether a caller with `scope` for `principal` may act as (claim for, or write the lease
/// of) `owner`: an admin may act as anyone, a worker within its namespace, a viewer never.
#[must_use]
pub fn may_act_as(scope: Scope, principal: &Principal, owner: &Owner) -> bool {
    match scope {
        Scope::Admin => true,
        Scope::Worker => owner_within(principal, owner),
        Scope::Viewer => false,
    }
}

/// A key's public id (the part of `lk_<id>_<secret>` that names its record).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KeyId(String);

impl KeyId {
    /// Checks a key id: 1 to 32 of `a-z` and `0-9`.
    ///
    /// # Errors
    /// [`AccessError::BadKeyId`].
    pub fn new(id: impl Into<String>) -> Result<Self, AccessError> {
        let id = id.into();
        if !id.is_empty()
            && id.len() <= 32
            && id
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        {
            Ok(Self(id))
        } else {
            Err(AccessError::BadKeyId(id))
        }
    }

    /// The id.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// How many live (unrevoked) keys one principal may hold: two, so a key can be rotated
/// without downtime (make the new one, move the workers, revoke the old one).
pub const MAX_LIVE_KEYS: usize = 2;

/// Why a new key was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyRefused {
    /// The principal already holds [`MAX_LIVE_KEYS`] live keys.
    #[error(
        "principal {principal} already holds {live} live keys (at most {MAX_LIVE_KEYS}); revoke one first"
    )]
    TooManyKeys {
        /// The principal.
        principal: Principal,
        /// How many live keys it holds.
        live: usize,
    },
    /// A key with this id exists.
    #[error("a key with id {0} exists")]
    IdTaken(KeyId),
    /// The principal already has keys of another scope: one principal, one scope.
    #[error("principal {principal} holds {held} keys; a {asked} key needs another principal")]
    ScopeDiffers {
        /// The principal.
        principal: Principal,
        /// The scope of its keys.
        held: Scope,
        /// The scope asked for.
        asked: Scope,
    },
}

/// Decides whether a key may be added, given the principal's live keys (their scopes) and
/// whether the id is taken.
///
/// # Errors
/// The [`KeyRefused`] reason; the store must then add nothing.
pub fn decide_new_key(
    id: &KeyId,
    id_taken: bool,
    principal: &Principal,
    scope: Scope,
    live_scopes: &[Scope],
) -> Result<(), KeyRefused> {
    if id_taken {
        return Err(KeyRefused::IdTaken(id.clone()));
    }
    if let Some(held) = live_scopes.iter().copied().find(|s| *s != scope) {
        return Err(KeyRefused::ScopeDiffers {
            principal: principal.clone(),
            held,
            asked: scope,
        });
    }
    if live_scopes.len() >= MAX_LIVE_KEYS {
        return Err(KeyRefused::TooManyKeys {
            principal: principal.clone(),
            live: live_scopes.len(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::Ended;

    fn p(name: &str) -> Principal {
        Principal::new(name).unwrap()
    }

    fn o(name: &str) -> Owner {
        Owner::new(name).unwrap()
    }

    #[test]
    fn an_owner_is_within_its_principal_or_below_a_slash_and_nowhere_else() {
        assert!(owner_within(&p("ci"), &o("ci")));
        assert!(owner_within(&p("ci"), &o("ci/")));
        assert!(owner_within(&p("ci"), &o("ci/host-1/slot 3")));
        assert!(!owner_within(&p("ci"), &o("cix")));
        assert!(!owner_within(&p("ci"), &o("c")));
        assert!(!owner_within(&p("ci"), &o("other/ci")));
        assert!(!owner_within(&p("ci"), &o("CI")));
    }

    #[test]
    fn only_an_admin_acts_outside_its_namespace_and_a_viewer_never_acts() {
        assert!(may_act_as(Scope::Admin, &p("ops"), &o("anyone")));
        assert!(may_act_as(Scope::Worker, &p("ci"), &o("ci/1")));
        assert!(!may_act_as(Scope::Worker, &p("ci"), &o("cd/1")));
        assert!(!may_act_as(Scope::Viewer, &p("ci"), &o("ci")));
    }

    #[test]
    fn scopes_are_ordered_viewer_worker_admin_and_read_back_from_their_names() {
        assert!(Scope::Admin.allows(Scope::Worker));
        assert!(Scope::Worker.allows(Scope::Viewer));
        assert!(Scope::Worker.allows(Scope::Worker));
        assert!(!Scope::Viewer.allows(Scope::Worker));
        assert!(!Scope::Worker.allows(Scope::Admin));
        for scope in [Scope::Viewer, Scope::Worker, Scope::Admin] {
            assert_eq!(Scope::parse(scope.as_str()), Ok(scope));
        }
        assert_eq!(
            Scope::parse("root"),
            Err(AccessError::UnknownScope("root".to_owned()))
        );
    }

    #[test]
    fn principal_names_are_checked_and_can_never_hold_a_slash() {
        for good in ["a", "ci", "build-7", "svc.payments_v2", &"x".repeat(64)] {
            assert!(Principal::new(good).is_ok(), "{good}");
        }
        for bad in ["", "a/b", "Ab", "-a", ".a", "a b", "é", &"x".repeat(65)] {
            assert_eq!(
                Principal::new(bad),
                Err(AccessError::BadPrincipal(bad.to_owned()))
            );
        }
    }

    #[test]
    fn key_ids_are_lowercase_letters_and_digits_only() {
        assert!(KeyId::new("0a9z").is_ok());
        for bad in ["", "A1", "a_b", "a-b", &"a".repeat(33)] {
            assert_eq!(KeyId::new(bad), Err(AccessError::BadKeyId(bad.to_owned())));
        }
    }

    #[test]
    fn a_principal_holds_at_most_two_live_keys_of_one_scope_and_ids_are_unique() {
        let id = KeyId::new("k1").unwrap();
        let ci = p("ci");
        assert_eq!(decide_new_key(&id, false, &ci, Scope::Worker, &[]), Ok(()));
        assert_eq!(
            decide_new_key(&id, false, &ci, Scope::Worker, &[Scope::Worker]),
            Ok(())
        );
        assert_eq!(
            decide_new_key(&id, false, &ci, Scope::Worker, &[Scope::Worker; 2]),
            Err(KeyRefused::TooManyKeys {
                principal: ci.clone(),
                live: 2
            })
        );
        assert_eq!(
            decide_new_key(&id, false, &ci, Scope::Admin, &[Scope::Worker]),
            Err(KeyRefused::ScopeDiffers {
                principal: ci.clone(),
                held: Scope::Worker,
                asked: Scope::Admin
            })
        );
        assert_eq!(
            decide_new_key(&id, true, &ci, Scope::Worker, &[]),
            Err(KeyRefused::IdTaken(id.clone()))
        );
    }

    #[test]
    fn a_holder_write_is_judged_missing_then_stale_then_ended_then_not_owner() {
        let f = |n| Fence::new(n).unwrap();
        let me = o("ci/1");
        let mine = |owner: &Owner| owner_within(&p("ci"), owner);
        let held = Job {
            owner: Some(o("ci/1")),
            fence: f(3),
            ..Job::new()
        };
        assert_eq!(
            judge_holder(None, f(3), &me, mine),
            Err(WriteRefused::Missing)
        );
        assert_eq!(judge_holder(Some(&held), f(3), &me, mine), Ok(o("ci/1")));
        // Stale comes before everything else about the job, whoever sends it.
        let theirs = Job {
            owner: Some(o("cd/1")),
            done: true,
            ..held.clone()
        };
        assert_eq!(
            judge_holder(Some(&theirs), f(2), &me, mine),
            Err(WriteRefused::Stale {
                presented: f(2),
                current: f(3)
            })
        );
        assert_eq!(
            judge_holder(Some(&theirs), f(3), &me, mine),
            Err(WriteRefused::Done { result_fence: None })
        );
        for (ended, refused) in [
            (Ended::Cancelled, WriteRefused::Cancelled),
            (Ended::Dead, WriteRefused::Dead),
        ] {
            let job = Job {
                owner: Some(o("cd/1")),
                ended: Some(ended),
                ..held.clone()
            };
            assert_eq!(judge_holder(Some(&job), f(3), &me, mine), Err(refused));
        }
        let foreign = Job {
            owner: Some(o("cd/1")),
            ..held.clone()
        };
        assert_eq!(
            judge_holder(Some(&foreign), f(3), &me, mine),
            Err(WriteRefused::NotOwner {
                presented: me.clone(),
                current: Some(o("cd/1"))
            })
        );
        let released = Job {
            owner: None,
            ..held.clone()
        };
        assert!(matches!(
            judge_holder(Some(&released), f(3), &me, |_| true),
            Err(WriteRefused::NotOwner { current: None, .. })
        ));
    }

    #[test]
    fn a_digest_is_exactly_32_bytes_and_never_shown() {
        assert_eq!(
            TokenDigest::from_slice(&[7; 31]),
            Err(AccessError::DigestLength(31))
        );
        let digest = TokenDigest::from_slice(&[7; 32]).unwrap();
        assert_eq!(digest.as_bytes(), &[7; 32]);
        assert_eq!(format!("{digest:?}"), "TokenDigest(..)");
    }
}

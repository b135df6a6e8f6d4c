//! Clock edge cases: `now` going backwards, a ttl beyond f64 precision, and a ttl too small to
//! move `until` past `now`. The rules: times are compared exactly as given; a backwards clock
//! is the caller's business but can never revive a stale fence; a ttl whose `now + ttl` is not
//! finite, or rounds back to `now`, is an invalid-input error that changes nothing.

use std::path::PathBuf;

use lease_domain::InputError;
use lease_sqlite::{Error, claim, complete, enqueue, init_db, release, renew, state};
use tempfile::TempDir;

fn fresh_job() -> (TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("clock.db");
    init_db(&path).unwrap();
    enqueue(&path, "j").unwrap();
    (dir, path)
}

#[test]
fn a_stale_writer_whose_clock_runs_backwards_is_still_rejected() {
    let (_dir, path) = fresh_job();
    let a = claim(&path, "j", "A", 100.0, 10.0).unwrap().unwrap();
    let b = claim(&path, "j", "B", 200.0, 10.0).unwrap().unwrap();
    // A's clock says 105: inside its old lease. The fence still gives it away.
    assert!(!renew(&path, "j", "A", a, 105.0, 10.0).unwrap());
    assert!(!complete(&path, "j", "A", a, 105.0, "late").unwrap());
    assert!(!release(&path, "j", "A", a).unwrap());
    let s = state(&path, "j").unwrap().unwrap();
    assert_eq!((s.owner.as_deref(), s.fence, s.done), (Some("B"), b, false));
}

#[test]
fn a_backwards_clock_never_reissues_a_fence() {
    let (_dir, path) = fresh_job();
    let mut fences = Vec::new();
    for now in [1000.0, 500.0, 10.0, 0.0] {
        let f = claim(&path, "j", "A", now, 1.0).unwrap().unwrap();
        assert!(release(&path, "j", "A", f).unwrap());
        fences.push(f);
    }
    assert_eq!(fences, [1, 2, 3, 4]);
}

#[test]
fn a_lease_looks_live_to_a_clock_that_went_backwards() {
    let (_dir, path) = fresh_job();
    claim(&path, "j", "A", 100.0, 10.0).unwrap().unwrap();
    // Another worker at 200 could take it, but one whose clock reads 50 sees a live lease.
    assert_eq!(claim(&path, "j", "B", 50.0, 10.0).unwrap(), None);
}

#[test]
fn a_ttl_beyond_f64_range_is_an_error_and_changes_nothing() {
    let (_dir, path) = fresh_job();
    let before = state(&path, "j").unwrap();
    let err = claim(&path, "j", "A", f64::MAX, f64::MAX).unwrap_err();
    assert!(
        matches!(err, Error::InvalidInput(InputError::UntilOverflow { .. })),
        "{err}"
    );
    assert_eq!(state(&path, "j").unwrap(), before);
    // A huge but representable until is fine, and exact.
    assert_eq!(claim(&path, "j", "A", 1.0, 1e300).unwrap(), Some(1));
    assert_eq!(state(&path, "j").unwrap().unwrap().until, 1.0 + 1e300);
}

#[test]
fn a_ttl_below_the_resolution_of_now_is_an_error_and_changes_nothing() {
    let (_dir, path) = fresh_job();
    let f = claim(&path, "j", "A", 1e9, 5.0).unwrap().unwrap();
    let before = state(&path, "j").unwrap();
    let err = renew(&path, "j", "A", f, 1e9, 1e-9).unwrap_err();
    assert!(
        matches!(
            err,
            Error::InvalidInput(InputError::TtlBelowResolution { .. })
        ),
        "{err}"
    );
    let err = claim(&path, "j", "B", 1e20, 1.0).unwrap_err();
    assert!(
        matches!(
            err,
            Error::InvalidInput(InputError::TtlBelowResolution { .. })
        ),
        "{err}"
    );
    assert_eq!(state(&path, "j").unwrap(), before);
}

#[test]
fn times_are_compared_exactly_not_rounded() {
    let (_dir, path) = fresh_job();
    let until = 0.1 + 0.2; // 0.30000000000000004
    claim(&path, "j", "A", 0.1, 0.2).unwrap().unwrap();
    assert_eq!(state(&path, "j").unwrap().unwrap().until, until);
    assert_eq!(
        claim(&path, "j", "B", 0.3, 1.0).unwrap(),
        None,
        "0.3 < until by one ulp"
    );
    assert_eq!(claim(&path, "j", "B", until, 1.0).unwrap(), Some(2));
}

#[test]
fn a_released_job_looks_leased_until_zero_to_a_negative_clock() {
    // release stores until = 0 (the contract), and until > now is a live lease, exactly.
    let (_dir, path) = fresh_job();
    let f = claim(&path, "j", "A", 5.0, 1.0).unwrap().unwrap();
    assert!(release(&path, "j", "A", f).unwrap());
    assert_eq!(claim(&path, "j", "B", -1.0, 1.0).unwrap(), None);
    assert_eq!(claim(&path, "j", "B", 0.0, 1.0).unwrap(), Some(2));
}

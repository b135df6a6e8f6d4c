//! The SQLite store's clock modes: in store mode the writing host's clock decides `now` (a
//! caller whose clock runs ahead cannot take a live lease early), and in caller mode with a
//! skew bound a caller too far from the host's clock is refused, changing nothing.

use std::time::{SystemTime, UNIX_EPOCH};

use lease_domain::{ClaimRefused, ClockMode, JobId, LeaseTerm, Owner, QueueName, Ttl};
use lease_ports::{LeaseStore, StoreError};
use lease_sqlite::{SqliteLeaseStore, SqliteOptions};

fn host_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

fn store(dir: &tempfile::TempDir, clock: ClockMode) -> SqliteLeaseStore {
    let options = SqliteOptions {
        clock,
        ..SqliteOptions::default()
    };
    SqliteLeaseStore::open_with(dir.path().join("clock.db"), options).unwrap()
}

fn term(now: f64, ttl: f64) -> LeaseTerm {
    LeaseTerm::new(now, ttl).unwrap()
}

#[tokio::test]
async fn in_store_mode_a_fast_caller_clock_cannot_take_a_live_lease() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir, ClockMode::Store);
    let job = JobId::new("j").unwrap();
    store.enqueue(&job).await.unwrap();
    let now = host_now();
    store
        .claim(&job, &Owner::new("A").unwrap(), term(now - 3600.0, 30.0))
        .await
        .unwrap()
        .unwrap();
    let stolen = store
        .claim(&job, &Owner::new("B").unwrap(), term(now + 3600.0, 30.0))
        .await
        .unwrap();
    assert!(
        matches!(stolen, Err(ClaimRefused::Live { .. })),
        "{stolen:?}"
    );
    let state = store.state(&job).await.unwrap().unwrap();
    assert_eq!(state.owner.as_deref(), Some("A"));
    assert!(
        (state.until - (now + 30.0)).abs() < 5.0,
        "until {}",
        state.until
    );
}

#[tokio::test]
async fn with_a_skew_bound_a_skewed_caller_is_refused_and_nothing_changes() {
    let dir = tempfile::tempdir().unwrap();
    let bound = ClockMode::Caller {
        max_skew: Some(Ttl::new(5.0).unwrap()),
    };
    let store = store(&dir, bound);
    let job = JobId::new("j").unwrap();
    store.enqueue(&job).await.unwrap();
    let now = host_now();
    let err = store
        .claim(&job, &Owner::new("B").unwrap(), term(now + 60.0, 30.0))
        .await
        .unwrap_err();
    let StoreError::ClockSkew(skew) = &err else {
        panic!("expected a clock skew, got {err}")
    };
    assert!((skew.store - now).abs() < 5.0 && skew.caller == now + 60.0);
    let err = store
        .claim_next(
            &QueueName::default(),
            &Owner::new("B").unwrap(),
            term(now - 60.0, 30.0),
            1,
        )
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::ClockSkew(_)), "{err}");
    assert_eq!(store.state(&job).await.unwrap().unwrap().fence, 0);
    // Within the bound the caller is served.
    let fence = store
        .claim(&job, &Owner::new("B").unwrap(), term(now + 1.0, 30.0))
        .await
        .unwrap();
    assert!(fence.is_ok(), "{fence:?}");
}

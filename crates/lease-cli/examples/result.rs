//! A job's result written to any guarded resource under the job's fence: claim a job from a
//! lease store, write its result with `put` (refused if a newer holder wrote there), read it
//! back with its fence.
//!
//! ```sh
//! cargo run -p lease-cli --example result -- \
//!     redis://127.0.0.1:6379          # or s3://BUCKET/PREFIX, file:///DIR, nats://HOST:PORT/BUCKET, mysql://...
//! ```

use lease_guard::open;
use lease_guard::value::{GuardKey, PutOptions};
use lease_ports::{JobId, LeaseStore, LeaseTerm, Owner};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::args()
        .nth(1)
        .ok_or("usage: result URL (redis://, s3://, file:///, nats://, mysql://)")?;
    let dir = tempfile::tempdir()?;
    let store = lease_sqlite::SqliteLeaseStore::open(dir.path().join("jobs.db"))?;
    let job = JobId::new("report-42")?;
    store.enqueue(&job).await?;
    let fence = store
        .claim(&job, &Owner::new("worker-1")?, LeaseTerm::new(0.0, 60.0)?)
        .await?
        .map_err(|refused| format!("not claimed: {refused}"))?;

    let guard = open(&url).await?;
    let key = GuardKey::new(format!("results/{job}"))?;
    let options = PutOptions {
        job: Some(job.to_string()),
        ..PutOptions::default()
    };
    match guard.put(&key, b"the report", fence, &options).await? {
        Ok(()) => println!("wrote {key} under fence {fence}"),
        Err(refused) => println!("a newer holder wrote {key}: {refused}"),
    }
    if let Some(stored) = guard.get(&key).await? {
        println!(
            "{key} holds {:?} written under fence {}",
            String::from_utf8_lossy(&stored.value),
            stored.fence
        );
    }
    Ok(())
}

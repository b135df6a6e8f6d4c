//! The guard contract suite against memory and against every real resource on this machine:
//! Redis (127.0.0.1:6379), an S3 API (moto, started here), a directory, NATS JetStream
//! key-value (127.0.0.1:4222) and MariaDB (127.0.0.1:3306). Each check gets a fresh guard over
//! a key prefix, bucket or database of its own, removed when it is done; and each real
//! resource is also cut off mid-test (a TCP relay) to show that a write it cannot finish is an
//! error, never an admission.

use crate::support;

use std::net::SocketAddr;
use std::sync::Arc;

use lease_guard::contract;
use lease_guard::value::{MemoryValueGuard, ValueGuard};

use support::{Owned, Relay, block_on, unique};

const REDIS: &str = "127.0.0.1:6379";
const NATS: &str = "127.0.0.1:4222";
const MARIADB: &str = "127.0.0.1:3306";

fn addr(text: &str) -> SocketAddr {
    text.parse().unwrap()
}

mod memory {
    use super::*;

    async fn guard() -> Arc<dyn ValueGuard> {
        Arc::new(MemoryValueGuard::new())
    }

    lease_guard::guard_contract_tests!(|_prefix: String| guard());

    /// Every refusal is counted as `lease_guard_refusals_total{resource}`.
    #[test]
    fn a_refusal_is_counted_by_resource() {
        use lease_guard::value::{GuardKey, PutOptions};
        let recorder = metrics_util::debugging::DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        let guard = MemoryValueGuard::new();
        let key = GuardKey::new("k").unwrap();
        let fence = |n| lease_guard::Fence::new(n).unwrap();
        let refused = metrics::with_local_recorder(&recorder, || {
            block_on(async {
                guard
                    .put(&key, b"new", fence(2), &PutOptions::default())
                    .await
                    .unwrap()
                    .unwrap();
                guard
                    .put(&key, b"old", fence(1), &PutOptions::default())
                    .await
                    .unwrap()
            })
        });
        assert!(refused.is_err());
        let counted: Vec<_> = snapshotter
            .snapshot()
            .into_vec()
            .into_iter()
            .filter(|(key, ..)| key.key().name() == lease_guard::GUARD_REFUSALS)
            .map(|(key, _, _, value)| {
                (
                    key.key()
                        .labels()
                        .map(|l| (l.key().to_owned(), l.value().to_owned()))
                        .collect::<Vec<_>>(),
                    format!("{value:?}"),
                )
            })
            .collect();
        assert_eq!(
            counted,
            [(
                vec![("resource".to_owned(), "memory".to_owned())],
                "Counter(1)".to_owned()
            )]
        );
    }
}

mod redis {
    use super::*;
    use lease_guard::redis::RedisGuard;

    pub(super) async fn guard_at(server: &str) -> RedisGuard {
        let guard = RedisGuard::connect(&format!("redis://{server}"))
            .await
            .unwrap_or_else(|e| panic!("Redis must run on {server}: {e}"));
        guard.install().await.unwrap();
        guard
    }

    /// The guard over the machine's Redis; the keys a check made under `prefix` (values and
    /// fences) are deleted after it.
    async fn guard_under(prefix: String) -> Arc<dyn ValueGuard> {
        let guard = guard_at(REDIS).await;
        Owned::wrap(Arc::new(guard), move || {
            let _ = std::process::Command::new("sh")
                .arg("-c")
                .arg(format!(
                    "redis-cli --scan --pattern '*{prefix}*' | xargs -r redis-cli del >/dev/null"
                ))
                .status();
        })
    }

    lease_guard::guard_contract_tests!(guard_under);

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn keys_whose_slot_a_fence_key_cannot_share_are_refused() {
        let guard = guard_under(contract::unique_prefix()).await;
        contract::bad_keys_are_refused_before_anything_is_written(&*guard, "", &["a}b", "{}x"])
            .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn redis_going_away_mid_test_is_an_error_never_an_admission() {
        let relay = Relay::start(addr(REDIS)).await;
        let guard = guard_at(&relay.addr.to_string()).await;
        relay.cut();
        contract::an_unreachable_resource_is_an_error_never_an_admission(&guard).await;
    }
}

mod s3 {
    use super::*;
    use lease_guard::contract::Moto;
    use lease_guard::object::ObjectGuard;
    use object_store::aws::AmazonS3Builder;

    pub(super) fn guard_at(endpoint: &str, bucket: &str) -> ObjectGuard {
        let store = AmazonS3Builder::new()
            .with_bucket_name(bucket)
            .with_endpoint(endpoint)
            .with_allow_http(true)
            .with_region("us-east-1")
            .with_access_key_id("test")
            .with_secret_access_key("test")
            .with_retry(object_store::RetryConfig {
                max_retries: 1,
                retry_timeout: std::time::Duration::from_secs(2),
                ..object_store::RetryConfig::default()
            })
            .build()
            .unwrap();
        ObjectGuard::new(
            Arc::new(store),
            object_store::path::Path::from("results"),
            "s3",
        )
    }

    /// A moto server of the check's own, with a bucket; stopped when the check is done.
    async fn guard() -> Arc<dyn ValueGuard> {
        let moto = Moto::start();
        let bucket = unique("lease").replace('_', "-");
        moto.bucket(&bucket);
        let guard = guard_at(&moto.endpoint, &bucket);
        Owned::wrap(Arc::new(guard), move || drop(moto))
    }

    lease_guard::guard_contract_tests!(|_prefix: String| guard());

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn keys_that_are_not_clean_object_paths_are_refused() {
        let guard = guard().await;
        contract::bad_keys_are_refused_before_anything_is_written(
            &*guard,
            "",
            &["a//b", "/a", "a/../b", "a/"],
        )
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_object_store_going_away_mid_test_is_an_error_never_an_admission() {
        let moto = Moto::start();
        moto.bucket("cut");
        let relay = Relay::start(moto.addr).await;
        let guard = guard_at(&format!("http://{}", relay.addr), "cut");
        relay.cut();
        contract::an_unreachable_resource_is_an_error_never_an_admission(&guard).await;
    }
}

mod dir {
    use super::*;
    use lease_guard::dir::DirGuard;

    async fn guard() -> Arc<dyn ValueGuard> {
        let dir = tempfile::tempdir().unwrap();
        let guard = DirGuard::open(dir.path()).unwrap();
        Owned::wrap(Arc::new(guard), move || drop(dir))
    }

    lease_guard::guard_contract_tests!(|_prefix: String| guard());

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn keys_that_are_not_plain_relative_paths_are_refused() {
        let guard = guard().await;
        contract::bad_keys_are_refused_before_anything_is_written(
            &*guard,
            "",
            &[
                "../escape",
                "/etc/passwd",
                "a/./b",
                "a//b",
                "a/",
                ".lease-fence",
                "x.lease-lock",
            ],
        )
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_directory_that_goes_away_is_an_error_never_an_admission() {
        let dir = tempfile::tempdir().unwrap();
        let guard =
            DirGuard::open(dir.path().join("..").join(dir.path().file_name().unwrap())).unwrap();
        // The directory becomes a file: nothing can be written under it.
        std::fs::remove_dir(dir.path()).unwrap();
        std::fs::write(dir.path(), b"not a directory").unwrap();
        contract::an_unreachable_resource_is_an_error_never_an_admission(&guard).await;
        std::fs::remove_file(dir.path()).unwrap();
    }
}

mod nats {
    use super::*;
    use lease_guard::nats::NatsGuard;

    pub(super) async fn guard_at(server: &str, bucket: &str) -> NatsGuard {
        let url = format!("nats://{server}/{bucket}");
        install(&url, server).await;
        NatsGuard::connect(&url).await.unwrap()
    }

    /// Makes the bucket `url` names. The checks run at once, each making and deleting a
    /// bucket of its own: when one deletes the server's last stream, the server removes its
    /// streams directory, and a bucket made at that moment fails with "error creating store
    /// for stream" (10049; the server logs that the directory is gone). Made again a moment
    /// later, it is made.
    async fn install(url: &str, server: &str) {
        let mut tries = 0;
        loop {
            match NatsGuard::install(url).await {
                Ok(_) => return,
                Err(e) if tries < 5 && e.to_string().contains("10049") => {
                    tries += 1;
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
                Err(e) => panic!("NATS with JetStream must run on {server}: {e}"),
            }
        }
    }

    /// A bucket of the check's own, deleted when it is done.
    async fn guard() -> Arc<dyn ValueGuard> {
        let bucket = unique("lease");
        let guard = guard_at(NATS, &bucket).await;
        Owned::wrap(Arc::new(guard), move || {
            block_on(async {
                if let Ok(client) = async_nats::connect(format!("nats://{NATS}")).await {
                    let _ = async_nats::jetstream::new(client)
                        .delete_key_value(&bucket)
                        .await;
                }
            });
        })
    }

    lease_guard::guard_contract_tests!(|_prefix: String| guard());

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn nats_going_away_mid_test_is_an_error_never_an_admission() {
        let bucket = unique("lease");
        let relay = Relay::start(addr(NATS)).await;
        let url = format!("nats://{}/{bucket}", relay.addr);
        install(&url, NATS).await;
        let guard = NatsGuard::connect_with_timeout(&url, std::time::Duration::from_secs(1))
            .await
            .unwrap();
        relay.cut();
        contract::an_unreachable_resource_is_an_error_never_an_admission(&guard).await;
        if let Ok(client) = async_nats::connect(format!("nats://{NATS}")).await {
            let _ = async_nats::jetstream::new(client)
                .delete_key_value(&bucket)
                .await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn keys_nats_cannot_take_are_refused() {
        let guard = guard().await;
        contract::bad_keys_are_refused_before_anything_is_written(
            &*guard,
            "",
            &["a b", ".a", "a.", "a*", "a>"],
        )
        .await;
    }
}

mod mariadb {
    use super::*;
    use lease_guard::mysql::{MysqlGuard, install};
    use mysql_async::prelude::Queryable;

    async fn admin(sql: String) {
        let pool = mysql_async::Pool::from_url(format!("mysql://root@{MARIADB}/test")).unwrap();
        let mut conn = pool
            .get_conn()
            .await
            .unwrap_or_else(|e| panic!("MariaDB must run on {MARIADB}: {e}"));
        conn.query_drop(sql).await.unwrap();
        drop(conn);
        pool.disconnect().await.unwrap();
    }

    pub(super) async fn guard_at(server: &str, database: &str) -> MysqlGuard {
        let url = format!("mysql://root@{server}/{database}");
        install(&url).await.unwrap();
        MysqlGuard::connect(&url).unwrap()
    }

    /// A database of the check's own, with the guard installed; dropped when it is done.
    async fn guard() -> Arc<dyn ValueGuard> {
        let database = unique("lease_guard");
        admin(format!("CREATE DATABASE {database}")).await;
        let guard = guard_at(MARIADB, &database).await;
        Owned::wrap(Arc::new(guard), move || {
            block_on(admin(format!("DROP DATABASE IF EXISTS {database}")));
        })
    }

    lease_guard::guard_contract_tests!(|_prefix: String| guard());

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn mariadb_going_away_mid_test_is_an_error_never_an_admission() {
        let database = unique("lease_guard");
        admin(format!("CREATE DATABASE {database}")).await;
        install(&format!("mysql://root@{MARIADB}/{database}"))
            .await
            .unwrap();
        let relay = Relay::start(addr(MARIADB)).await;
        let guard =
            MysqlGuard::connect(&format!("mysql://root@{}/{database}", relay.addr)).unwrap();
        relay.cut();
        contract::an_unreachable_resource_is_an_error_never_an_admission(&guard).await;
        admin(format!("DROP DATABASE {database}")).await;
    }
}

//! What a guarded write costs against a plain one, on each resource of this machine: Redis,
//! an S3 API (moto, started here), a directory, NATS key-value and MariaDB. One caller; the
//! plain write and the guarded write alternate run by run, so drift hits both.

use std::path::Path;
use std::sync::Arc;

use lease_guard::Fence;
use lease_guard::value::{GuardKey, PutOptions, ValueGuard};
use mysql_async::prelude::Queryable;
use tokio::runtime::Handle;

use crate::harness::{Paired, Plan, Row, timed};

type Run<'a> = Box<dyn Fn(u64) + Sync + 'a>;

/// One resource: its plain write and its guarded write of a 100-byte value.
struct Pair<'a> {
    name: &'static str,
    plain_label: &'static str,
    plain: Run<'a>,
    guarded: Arc<dyn ValueGuard>,
}

const VALUE: [u8; 100] = [b'r'; 100];

fn unique(prefix: &str) -> String {
    format!("{prefix}_{}", std::process::id())
}

/// The rows, or a note on the resources that are not running.
pub(crate) fn rows(plan: &Plan, dir: &Path, rows: &mut Vec<Row>) -> Option<String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let rt = runtime.handle();
    let mut missing = Vec::new();
    let mut pairs: Vec<Pair<'_>> = Vec::new();
    match redis(rt) {
        Some(pair) => pairs.push(pair),
        None => missing.push("Redis"),
    }
    let moto = std::panic::catch_unwind(lease_guard::contract::Moto::start).ok();
    match &moto {
        Some(moto) => pairs.push(s3(rt, moto)),
        None => missing.push("moto_server"),
    }
    pairs.push(directory(dir));
    let bucket = unique("lease_bench");
    match nats(rt, &bucket) {
        Some(pair) => pairs.push(pair),
        None => missing.push("NATS"),
    }
    let database = unique("lease_bench");
    let maria_admin = match mariadb(rt, &database) {
        Some((pair, admin)) => {
            pairs.push(pair);
            Some(admin)
        }
        None => {
            missing.push("MariaDB");
            None
        }
    };
    measure(plan, rt, &pairs, rows);

    // Clean up what the rows made.
    rt.block_on(async {
        if let Ok(client) = async_nats::connect("nats://127.0.0.1:4222").await {
            let _ = async_nats::jetstream::new(client)
                .delete_key_value(&bucket)
                .await;
        }
        if let Some(admin) = maria_admin {
            if let Ok(mut conn) = admin.get_conn().await {
                let _ = conn
                    .query_drop(format!("DROP DATABASE IF EXISTS {database}"))
                    .await;
            }
        }
    });
    let _ = std::process::Command::new("sh")
        .arg("-c")
        .arg("redis-cli --scan --pattern '*bench*' | xargs -r redis-cli del >/dev/null")
        .status();
    drop(moto);
    (!missing.is_empty()).then(|| format!("not running, so not measured: {}", missing.join(", ")))
}

/// Each pair measured, the plain write and the guarded one alternating run by run.
fn measure(plan: &Plan, rt: &Handle, pairs: &[Pair<'_>], rows: &mut Vec<Row>) {
    let mut paired = Paired {
        plan,
        raw_runs: Vec::new(),
    };
    let mut baselines = Vec::new();
    for pair in pairs {
        let key = GuardKey::new(format!("bench/guarded-{}", std::process::id())).expect("key");
        // Fences rise across runs (each run's calls count from 0 again).
        let next = std::sync::atomic::AtomicU64::new(1);
        let guarded = |_, _| {
            let n = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let fence = Fence::new(n).expect("fence");
            timed(|| {
                rt.block_on(
                    pair.guarded
                        .put(&key, &VALUE, fence, &PutOptions::default()),
                )
                .expect("guarded put")
                .expect("admitted");
            })
        };
        let plain = |_, i: u64| timed(|| (pair.plain)(i));
        let plain_name: &'static str = Box::leak(format!("{} plain", pair.name).into_boxed_str());
        rows.push(paired.measure(
            &format!("{}: guarded put (lease guard)", pair.name),
            &guarded,
            false,
            plain_name,
            &plain,
        ));
        baselines.push((
            plain_name,
            format!("{}: plain {}", pair.name, pair.plain_label),
        ));
    }
    let labels: Vec<(&'static str, &str)> =
        baselines.iter().map(|(n, l)| (*n, l.as_str())).collect();
    rows.extend(paired.baseline_rows(&labels));
}

/// Redis: SET against FCALL lease_set.
fn redis(rt: &Handle) -> Option<Pair<'_>> {
    let redis_conn = rt.block_on(async {
        let client = redis::Client::open("redis://127.0.0.1:6379").ok()?;
        client.get_multiplexed_async_connection().await.ok()
    });
    let redis_guard = rt.block_on(lease_guard::redis::RedisGuard::connect(
        "redis://127.0.0.1:6379",
    ));
    let (Some(conn), Ok(guard)) = (redis_conn, redis_guard) else {
        return None;
    };
    rt.block_on(guard.install())
        .expect("install the Redis library");
    let key = unique("bench-plain");
    Some(Pair {
        name: "redis",
        plain_label: "SET",
        plain: Box::new(move |_| {
            let mut conn = conn.clone();
            rt.block_on(async {
                redis::cmd("SET")
                    .arg(&key)
                    .arg(&VALUE[..])
                    .query_async::<()>(&mut conn)
                    .await
            })
            .expect("SET");
        }),
        guarded: Arc::new(guard),
    })
}

/// S3 (moto): an unconditional PUT against HEAD + conditional PUT with metadata.
fn s3<'a>(rt: &'a Handle, moto: &lease_guard::contract::Moto) -> Pair<'a> {
    moto.bucket("bench");
    let store: Arc<dyn object_store::ObjectStore> = Arc::new(
        object_store::aws::AmazonS3Builder::new()
            .with_bucket_name("bench")
            .with_endpoint(&moto.endpoint)
            .with_allow_http(true)
            .with_region("us-east-1")
            .with_access_key_id("test")
            .with_secret_access_key("test")
            .build()
            .expect("S3 client"),
    );
    let guard = lease_guard::object::ObjectGuard::new(
        Arc::clone(&store),
        object_store::path::Path::from("guarded"),
        "s3",
    );
    let path = object_store::path::Path::from("plain/object");
    Pair {
        name: "s3 (moto)",
        plain_label: "PUT",
        plain: Box::new(move |_| {
            rt.block_on(store.put_opts(
                &path,
                VALUE.to_vec().into(),
                object_store::PutOptions::default(),
            ))
            .expect("PUT");
        }),
        guarded: Arc::new(guard),
    }
}

/// A directory: a synced temporary file renamed into place, the directory synced, against the
/// same under the guard's lock with its sidecar.
fn directory(dir: &Path) -> Pair<'static> {
    let files = dir.join("guarded-files");
    std::fs::create_dir_all(&files).expect("directory");
    let plain_dir = files.clone();
    Pair {
        name: "directory",
        plain_label: "write, fsync, rename, fsync dir",
        plain: Box::new(move |_| {
            use std::io::Write as _;
            let tmp = plain_dir.join(".plain.tmp");
            let mut file = std::fs::File::create(&tmp).expect("create");
            file.write_all(&VALUE).expect("write");
            file.sync_all().expect("fsync");
            std::fs::rename(&tmp, plain_dir.join("plain")).expect("rename");
            std::fs::File::open(&plain_dir)
                .and_then(|d| d.sync_all())
                .expect("fsync dir");
        }),
        guarded: Arc::new(lease_guard::dir::DirGuard::open(&files).expect("dir guard")),
    }
}

/// NATS key-value: put against read-last + conditional publish with the fence header.
fn nats<'a>(rt: &'a Handle, bucket: &str) -> Option<Pair<'a>> {
    let nats_url = format!("nats://127.0.0.1:4222/{bucket}");
    let nats = rt.block_on(async {
        lease_guard::nats::NatsGuard::install(&nats_url)
            .await
            .ok()?;
        let guard = lease_guard::nats::NatsGuard::connect(&nats_url)
            .await
            .ok()?;
        let client = async_nats::connect("nats://127.0.0.1:4222").await.ok()?;
        let kv = async_nats::jetstream::new(client)
            .get_key_value(bucket)
            .await
            .ok()?;
        Some((guard, kv))
    });
    let (guard, kv) = nats?;
    Some(Pair {
        name: "nats key-value",
        plain_label: "put",
        plain: Box::new(move |_| {
            rt.block_on(kv.put("plain", VALUE.to_vec().into()))
                .expect("put");
        }),
        guarded: Arc::new(guard),
    })
}

/// MariaDB: a transaction writing the value, against the same with CALL lease_admit_fence;
/// with the pool that made the database, to drop it.
fn mariadb<'a>(rt: &'a Handle, database: &str) -> Option<(Pair<'a>, mysql_async::Pool)> {
    let maria = rt.block_on(async {
        let admin = mysql_async::Pool::from_url("mysql://root@127.0.0.1:3306/test").ok()?;
        let mut conn = admin.get_conn().await.ok()?;
        conn.query_drop(format!("CREATE DATABASE IF NOT EXISTS {database}"))
            .await
            .ok()?;
        drop(conn);
        let url = format!("mysql://root@127.0.0.1:3306/{database}");
        lease_guard::mysql::install(&url).await.ok()?;
        let pool = mysql_async::Pool::from_url(url.as_str()).ok()?;
        Some((
            admin,
            pool,
            lease_guard::mysql::MysqlGuard::connect(&url).ok()?,
        ))
    });
    let (admin, pool, guard) = maria?;
    let pair = Pair {
        name: "mariadb",
        plain_label: "BEGIN; INSERT ... ON DUPLICATE KEY UPDATE; COMMIT",
        plain: Box::new(move |_| {
            rt.block_on(async {
                let mut conn = pool.get_conn().await?;
                let mut tx = conn
                    .start_transaction(mysql_async::TxOpts::default())
                    .await?;
                tx.exec_drop(
                    "INSERT INTO lease_guarded (value_key, value) VALUES ('plain', ?) \
                     ON DUPLICATE KEY UPDATE value = VALUES(value)",
                    (VALUE.to_vec(),),
                )
                .await?;
                tx.commit().await
            })
            .expect("plain transaction");
        }),
        guarded: Arc::new(guard),
    };
    Some((pair, admin))
}

//! `lease guard` as a shell program uses it from `lease work`: the stale-worker story on every
//! resource (Redis, S3 through moto, a directory, NATS key-value, MariaDB), the fence and job
//! taken from `LEASE_FENCE` and `LEASE_JOB`, the exit codes (0 admitted, 3 refused or absent,
//! 1 an error, 2 usage), values that are not text, and `install` twice.

use crate::reaped;
use reaped::Reaped;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use lease_guard::contract::Moto;
use serde_json::{Value, json};

fn lease() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_lease"));
    command
        .env_remove("LEASE_DB")
        .env_remove("LEASE_FENCE")
        .env_remove("LEASE_JOB");
    command
}

fn guard(args: &[&str], env: &[(&str, &str)]) -> Output {
    lease()
        .arg("guard")
        .args(args)
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

fn json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {} / {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

fn unique(prefix: &str) -> String {
    format!(
        "{prefix}_{}_{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    )
}

/// One resource's URL and the environment its client needs.
struct Resource {
    url: String,
    env: Vec<(String, String)>,
}

/// The story on one resource: B holds the job (fence 2) and its program, run by `lease work`,
/// writes its result with `lease guard put` (fence and job from the environment); A, whose
/// lease (fence 1) ran out, writes late and is refused with exit 3; B's value stands.
fn the_story(db: &Path, resource: &Resource, key: &str) {
    let env: Vec<(&str, &str)> = resource
        .env
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let install = guard(&["install", &resource.url], &env);
    assert_eq!(
        install.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&install.stderr)
    );
    let run = |args: &[&str]| {
        let out = lease().arg("--db").arg(db).args(args).output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run(&["enqueue", key, "--queue", key]);
    // A claims, then stalls past its lease.
    run(&["claim", key, "--owner", "A", "--ttl", "0.2"]);
    std::thread::sleep(std::time::Duration::from_millis(300));
    // B's worker takes the job and writes through the guard.
    let program = format!(
        "\"$LEASE\" guard put '{}' '{key}' --value \"result of $LEASE_JOB from B at fence $LEASE_FENCE\" --json",
        resource.url
    );
    let work = lease()
        .arg("--db")
        .arg(db)
        .args([
            "work",
            "--queue",
            key,
            "--owner",
            "B",
            "--ttl",
            "30",
            "--exit-when-empty",
            "--json",
            "--",
        ])
        .args(["sh", "-c", &program])
        .env("LEASE", env!("CARGO_BIN_EXE_lease"))
        .envs(env.iter().copied())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert_eq!(
        json(&work)["completed"],
        1,
        "{}",
        String::from_utf8_lossy(&work.stderr)
    );
    // The program's stdout (the guard's answer) is B's result.
    let b_state = lease()
        .arg("--db")
        .arg(db)
        .args(["state", key, "--json"])
        .output()
        .unwrap();
    let b_answer = json(&b_state)["result"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert_eq!(
        serde_json::from_str::<Value>(&b_answer).unwrap(),
        json!({"ok": true, "fence": 2})
    );
    // A wakes up and writes its late result with its old fence: refused, exit 3.
    let late_env: Vec<(&str, &str)> = env
        .iter()
        .copied()
        .chain([("LEASE_FENCE", "1"), ("LEASE_JOB", key)])
        .collect();
    let late = guard(
        &[
            "put",
            &resource.url,
            key,
            "--value",
            "late, from A",
            "--json",
        ],
        &late_env,
    );
    assert_eq!(
        late.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&late.stderr)
    );
    assert_eq!(
        json(&late),
        json!({"ok": false, "reason": "stale", "presented": 1, "current": 2})
    );
    let stored = guard(&["get", &resource.url, key, "--json"], &env);
    assert_eq!(stored.status.code(), Some(0));
    assert_eq!(
        json(&stored),
        json!({"key": key, "fence": 2, "value": format!("result of {key} from B at fence 2")})
    );
    let plain = guard(&["get", &resource.url, key], &env);
    assert_eq!(
        plain.stdout,
        format!("result of {key} from B at fence 2").into_bytes()
    );
    // A's late delete, in the shape of its put (LEASE_JOB and LEASE_FENCE): refused.
    let late_delete = guard(&["delete", &resource.url, key], &late_env);
    assert_eq!(
        late_delete.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&late_delete.stderr)
    );
    // B deletes under its fence, naming its job as put does; the fence stays, so A is still
    // refused.
    let deleted = guard(
        &["delete", &resource.url, key, "--job", key, "--fence", "2"],
        &env,
    );
    assert_eq!(
        deleted.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&deleted.stderr)
    );
    assert!(
        String::from_utf8_lossy(&deleted.stdout).contains(&format!("for job {key}")),
        "{}",
        String::from_utf8_lossy(&deleted.stdout)
    );
    let absent = guard(&["get", &resource.url, key, "--json"], &env);
    assert_eq!(absent.status.code(), Some(3));
    assert_eq!(
        json(&absent),
        json!({"key": key, "fence": null, "value": null})
    );
    assert_eq!(
        guard(&["put", &resource.url, key, "--value", "again"], &late_env)
            .status
            .code(),
        Some(3)
    );
}

#[test]
fn a_stale_worker_s_late_write_is_refused_on_every_resource_and_the_new_value_stands() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("lease.db");
    assert_eq!(
        lease()
            .arg("--db")
            .arg(&db)
            .arg("init")
            .status()
            .unwrap()
            .code(),
        Some(0)
    );
    let files = tempfile::tempdir().unwrap();
    let moto = Moto::start();
    let bucket = unique("lease-cli").replace('_', "-");
    moto.bucket(&bucket);
    let nats_bucket = unique("lease_cli");
    let database = unique("lease_cli");
    mariadb(&format!("CREATE DATABASE {database}"));
    let s3_env = vec![
        ("AWS_ENDPOINT_URL".to_owned(), moto.endpoint.clone()),
        ("AWS_ACCESS_KEY_ID".to_owned(), "test".to_owned()),
        ("AWS_SECRET_ACCESS_KEY".to_owned(), "test".to_owned()),
        ("AWS_REGION".to_owned(), "us-east-1".to_owned()),
    ];
    let resources = [
        (
            "redis",
            Resource {
                url: "redis://127.0.0.1:6379".into(),
                env: vec![],
            },
        ),
        (
            "s3",
            Resource {
                url: format!("s3://{bucket}/results"),
                env: s3_env,
            },
        ),
        (
            "file",
            Resource {
                url: format!("file://{}", files.path().display()),
                env: vec![],
            },
        ),
        (
            "nats",
            Resource {
                url: format!("nats://127.0.0.1:4222/{nats_bucket}"),
                env: vec![],
            },
        ),
        (
            "mariadb",
            Resource {
                url: format!("mariadb://root@127.0.0.1:3306/{database}"),
                env: vec![],
            },
        ),
    ];
    for (name, resource) in &resources {
        let key = unique(&format!("report_{name}"));
        the_story(&db, resource, &key);
        if *name == "redis" {
            let _ = Command::new("redis-cli")
                .args(["del", &key, &format!("{{{key}}}:lease-fence")])
                .output();
        }
    }
    mariadb(&format!("DROP DATABASE {database}"));
    delete_nats_bucket(&nats_bucket);
}

/// Removes a key-value bucket a test made.
fn delete_nats_bucket(bucket: &str) {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            let client = async_nats::connect("nats://127.0.0.1:4222").await.unwrap();
            async_nats::jetstream::new(client)
                .delete_key_value(bucket)
                .await
                .unwrap();
        });
}

fn mariadb(sql: &str) {
    let out = Command::new("mariadb")
        .args(["-h", "127.0.0.1", "-u", "root", "-e", sql])
        .output()
        .unwrap_or_else(|e| panic!("the mariadb client is needed: {e}"));
    assert!(
        out.status.success(),
        "{sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn exit_codes_say_admitted_refused_absent_error_and_usage() {
    let files = tempfile::tempdir().unwrap();
    let url = format!("file://{}", files.path().display());
    let put = |args: &[&str]| guard(&[&["put", url.as_str(), "k"][..], args].concat(), &[]);
    assert_eq!(
        put(&["--value", "v", "--fence", "5"]).status.code(),
        Some(0)
    );
    assert_eq!(
        put(&["--value", "v", "--fence", "4"]).status.code(),
        Some(3)
    );
    let no_fence = put(&["--value", "v"]);
    assert_eq!(
        no_fence.status.code(),
        Some(2),
        "no fence and no LEASE_FENCE is usage"
    );
    assert!(String::from_utf8_lossy(&no_fence.stderr).contains("--fence"));
    let absent = guard(&["get", &url, "nothing-here"], &[]);
    assert_eq!(absent.status.code(), Some(3));
    let unknown = guard(&["get", "ftp://somewhere/x", "k"], &[]);
    assert_eq!(unknown.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("not a resource this build guards"));
    let bad_key = put(&["--value", "v", "--fence", "9", "--json"]);
    assert_eq!(bad_key.status.code(), Some(0));
    let escape = guard(
        &["put", &url, "../escape", "--value", "v", "--fence", "1"],
        &[],
    );
    assert_eq!(escape.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&escape.stderr).contains("invalid key"));
    assert!(!files.path().parent().unwrap().join("escape").exists());
    let too_big = guard(
        &[
            "put",
            &url,
            "k",
            "--value",
            "v",
            "--fence",
            "9223372036854775808",
        ],
        &[],
    );
    assert_eq!(too_big.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&too_big.stderr).contains("--fence"));
}

#[test]
fn a_value_that_is_not_text_goes_in_by_file_or_stdin_and_comes_back_byte_for_byte() {
    let files = tempfile::tempdir().unwrap();
    let url = format!("file://{}", files.path().display());
    let bytes: Vec<u8> = (0..=255).collect();
    let source = files.path().join("source.bin");
    std::fs::write(&source, &bytes).unwrap();
    let put = guard(
        &[
            "put",
            &url,
            "blob",
            "--file",
            source.to_str().unwrap(),
            "--fence",
            "1",
        ],
        &[],
    );
    assert_eq!(
        put.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&put.stderr)
    );
    let got = guard(&["get", &url, "blob"], &[]);
    assert_eq!(got.stdout, bytes);
    let as_json = json(&guard(&["get", &url, "blob", "--json"], &[]));
    assert_eq!(as_json["value"], Value::Null);
    assert!(
        as_json["value_base64"]
            .as_str()
            .is_some_and(|b| b.starts_with("AAECAwQF"))
    );
    let mut child = lease()
        .args(["guard", "put", &url, "piped", "--fence", "1"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .map(Reaped::new)
        .unwrap();
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), b"from stdin").unwrap();
    drop(child.stdin.take());
    assert_eq!(child.wait_with_output().unwrap().status.code(), Some(0));
    assert_eq!(guard(&["get", &url, "piped"], &[]).stdout, b"from stdin");
}

#[test]
fn install_is_idempotent_and_says_what_it_did() {
    let bucket = unique("lease_install");
    let url = format!("nats://127.0.0.1:4222/{bucket}");
    let first = json(&guard(&["install", &url, "--json"], &[]));
    let second = json(&guard(&["install", &url, "--json"], &[]));
    delete_nats_bucket(&bucket);
    assert_eq!(
        (first["installed"].clone(), second["installed"].clone()),
        (json!(true), json!(false))
    );
    let database = unique("lease_install");
    mariadb(&format!("CREATE DATABASE {database}"));
    let url = format!("mysql://root@127.0.0.1:3306/{database}");
    let first = json(&guard(&["install", &url, "--json"], &[]));
    let second = json(&guard(&["install", &url, "--json"], &[]));
    mariadb(&format!("DROP DATABASE {database}"));
    assert_eq!(
        (first["installed"].clone(), second["installed"].clone()),
        (json!(true), json!(false))
    );
}

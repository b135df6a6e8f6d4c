//! TLS to PostgreSQL: each `sslmode` against a server of the machine's PostgreSQL that speaks
//! TCP only over TLS (`hostssl` lines only), with a certificate for `localhost` signed by a CA
//! the test makes. The cluster is the test's own (`initdb` in a temporary directory, run as the
//! `postgres` user on a free port), so the machine's shared server is never reconfigured.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lease_domain::{JobId, JobResult, LeaseTerm, Owner, QueueName, Timestamp};
use lease_ports::signal::EnqueueSignal;
use lease_ports::{LeaseStore, StoreError};
use lease_postgres::{PgLeaseStore, PgOptions};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};

/// A CA and its key, to sign a server certificate or to be trusted.
struct Authority {
    cert: rcgen::Certificate,
    key: KeyPair,
}

impl Authority {
    fn new(name: &str) -> Self {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let cert = params.self_signed(&key).unwrap();
        Self { cert, key }
    }

    /// A certificate for `names` and its key, both PEM.
    fn issue(&self, names: &[&str]) -> (String, String) {
        let key = KeyPair::generate().unwrap();
        let names = names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>();
        let cert = CertificateParams::new(names)
            .unwrap()
            .signed_by(&key, &self.cert, &self.key)
            .unwrap();
        (cert.pem(), key.serialize_pem())
    }

    fn write(&self, dir: &Path, name: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, self.cert.pem()).unwrap();
        path
    }
}

/// A PostgreSQL cluster of the test's own, stopped and removed on drop.
struct Cluster {
    dir: tempfile::TempDir,
    bin: PathBuf,
    port: u16,
}

fn run(what: &str, command: &mut Command) {
    let out = command.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn as_postgres(bin: &Path, program: &str) -> Command {
    let mut command = Command::new("runuser");
    command
        .args(["-u", "postgres", "--"])
        .arg(bin.join(program));
    command
}

impl Cluster {
    /// Starts a cluster serving `cert`/`key` whose TCP lines in pg_hba.conf are all `hostssl`.
    fn start(cert: &str, key: &str) -> Self {
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .expect("PostgreSQL's binaries under /usr/lib/postgresql")
            .filter_map(Result::ok)
            .map(|e| e.path().join("bin"))
            .filter(|p| p.join("initdb").is_file())
            .max()
            .expect("an initdb under /usr/lib/postgresql/*/bin");
        let dir = tempfile::tempdir().unwrap();
        run(
            "chown",
            Command::new("chown").args(["postgres:"]).arg(dir.path()),
        );
        let data = dir.path().join("data");
        run(
            "initdb",
            as_postgres(&bin, "initdb").arg("-D").arg(&data).args([
                "-A",
                "trust",
                "-U",
                "postgres",
                "--no-sync",
            ]),
        );
        std::fs::write(data.join("server.crt"), cert).unwrap();
        std::fs::write(data.join("server.key"), key).unwrap();
        std::fs::write(
            data.join("pg_hba.conf"),
            "local all all trust\n\
             hostssl all all 127.0.0.1/32 trust\n\
             hostssl all all ::1/128 trust\n",
        )
        .unwrap();
        run(
            "chown",
            Command::new("chown").args(["-R", "postgres:"]).arg(&data),
        );
        run(
            "chmod",
            Command::new("chmod")
                .arg("600")
                .arg(data.join("server.key")),
        );
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let options = format!(
            "-p {port} -k {} -c listen_addresses=127.0.0.1 -c ssl=on",
            dir.path().display()
        );
        run(
            "pg_ctl start",
            as_postgres(&bin, "pg_ctl")
                .arg("-D")
                .arg(&data)
                .arg("-l")
                .arg(dir.path().join("log"))
                .args(["-w", "-o", &options, "start"]),
        );
        Self { dir, bin, port }
    }

    fn url(&self, host: &str, params: &str) -> String {
        format!(
            "postgres://postgres@{host}:{}/postgres?connect_timeout=5&{params}",
            self.port
        )
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = as_postgres(&self.bin, "pg_ctl")
            .arg("-D")
            .arg(self.dir.path().join("data"))
            .args(["-m", "immediate", "-w", "stop"])
            .output();
    }
}

fn options() -> PgOptions {
    PgOptions {
        pool_size: 2,
        wait_timeout: Duration::from_secs(5),
        ..PgOptions::default()
    }
}

async fn open(url: &str) -> Result<PgLeaseStore, StoreError> {
    PgLeaseStore::init(url, options()).await
}

/// A claim and its completion, so a pooled connection did real work over TLS.
async fn a_job_runs(store: &PgLeaseStore, id: &str) {
    let job = JobId::new(id).unwrap();
    assert!(store.enqueue(&job).await.unwrap());
    let me = Owner::new("w").unwrap();
    let term = LeaseTerm::new(10.0, 30.0).unwrap();
    let leases = store
        .claim_next(&QueueName::default(), &me, term, 1)
        .await
        .unwrap();
    assert_eq!(leases.len(), 1);
    let result = JobResult::new("ok").unwrap();
    store
        .complete(
            &job,
            &me,
            leases[0].fence,
            Timestamp::new(11.0).unwrap(),
            &result,
        )
        .await
        .unwrap()
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_full_connects_to_the_name_its_ca_signed_and_the_signal_listener_uses_tls_too() {
    let ca = Authority::new("lease test CA");
    let (cert, key) = ca.issue(&["localhost"]);
    let cluster = Cluster::start(&cert, &key);
    let root = ca.write(cluster.dir.path(), "ca.pem");
    let url = cluster.url(
        "localhost",
        &format!("sslmode=verify-full&sslrootcert={}", root.display()),
    );
    let store = open(&url).await.unwrap();
    a_job_runs(&store, "over-tls").await;

    // The listening connection is made outside the pool; over plain TCP this server would
    // refuse it and no signal would ever arrive.
    let heard = Arc::new(Mutex::new(Vec::new()));
    let into = Arc::clone(&heard);
    assert!(store.watch(Arc::new(move |queue: &str, jobs: usize| {
        into.lock().unwrap().push((queue.to_owned(), jobs));
    })));
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while heard.lock().unwrap().is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "no signal came back over TLS within 10 s"
        );
        store.signal("mail", 3);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(heard.lock().unwrap()[0], ("mail".to_owned(), 3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_full_refuses_another_name_and_another_ca_and_verify_ca_skips_only_the_name() {
    let ca = Authority::new("lease test CA");
    let (cert, key) = ca.issue(&["localhost"]);
    let cluster = Cluster::start(&cert, &key);
    let root = ca.write(cluster.dir.path(), "ca.pem");
    let stranger = Authority::new("some other CA").write(cluster.dir.path(), "other.pem");

    // 127.0.0.1 is not a name the certificate holds.
    let by_address = cluster.url(
        "127.0.0.1",
        &format!("sslmode=verify-full&sslrootcert={}", root.display()),
    );
    let err = open(&by_address).await.unwrap_err().to_string();
    assert!(err.to_lowercase().contains("certificate"), "{err}");

    let untrusted = cluster.url(
        "localhost",
        &format!("sslmode=verify-full&sslrootcert={}", stranger.display()),
    );
    let err = open(&untrusted).await.unwrap_err().to_string();
    assert!(err.to_lowercase().contains("certificate"), "{err}");
    // `require` with a root checks the chain as well.
    let untrusted = cluster.url(
        "localhost",
        &format!("sslmode=require&sslrootcert={}", stranger.display()),
    );
    assert!(open(&untrusted).await.is_err());

    let chain_only = cluster.url(
        "127.0.0.1",
        &format!("sslmode=verify-ca&sslrootcert={}", root.display()),
    );
    a_job_runs(&open(&chain_only).await.unwrap(), "verify-ca").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn require_encrypts_without_a_root_and_plain_tcp_is_refused_by_a_tls_only_server() {
    let (cert, key) = Authority::new("unknown CA").issue(&["db.example"]);
    let cluster = Cluster::start(&cert, &key);
    let store = open(&cluster.url("127.0.0.1", "sslmode=require"))
        .await
        .unwrap();
    a_job_runs(&store, "required").await;
    let store = open(&cluster.url("127.0.0.1", "sslmode=prefer"))
        .await
        .unwrap();
    a_job_runs(&store, "preferred").await;

    // The same server over plain TCP: pg_hba.conf has no line for it. This is what proves
    // the connections above were encrypted.
    for plain in ["sslmode=disable", "application_name=plain"] {
        let err = open(&cluster.url("127.0.0.1", plain))
            .await
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("pg_hba.conf") || err.contains("no encryption"),
            "{plain}: {err}"
        );
    }
}

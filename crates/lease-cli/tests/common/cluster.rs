//! PostgreSQL clusters of a test's own, beside the machine's: a primary made with `initdb`, a
//! streaming standby made from it with `pg_basebackup`, each on a free port in a temporary
//! directory, run as the `postgres` user (`initdb` refuses root). Killed with SIGKILL, promoted,
//! restored to a point in time, and stopped and removed on drop.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// The newest PostgreSQL's programs (`/usr/lib/postgresql/<version>/bin`).
fn bin(program: &str) -> PathBuf {
    let version = std::fs::read_dir("/usr/lib/postgresql")
        .expect("/usr/lib/postgresql lists the installed versions")
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .max_by_key(|v| v.parse::<u32>().unwrap_or(0))
        .expect("one PostgreSQL version");
    PathBuf::from(format!("/usr/lib/postgresql/{version}/bin/{program}"))
}

/// Runs a PostgreSQL program as the `postgres` user; panics with its output if it fails.
fn as_postgres(program: &str, args: &[&str]) -> Output {
    let out = Command::new("runuser")
        .args(["-u", "postgres", "--"])
        .arg(bin(program))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program} runs: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// A directory the `postgres` user owns, removed on drop.
pub struct Place {
    dir: tempfile::TempDir,
}

impl Place {
    pub fn new() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("lease-cluster-")
            .tempdir_in("/tmp")
            .expect("a temporary directory");
        let status = Command::new("chown")
            .args(["postgres:postgres"])
            .arg(dir.path())
            .status()
            .expect("chown runs");
        assert!(status.success());
        Self { dir }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A directory `name` in the place, owned by `postgres`.
    pub fn directory(&self, name: &str) -> PathBuf {
        let path = self.path(name);
        std::fs::create_dir(&path).expect("the directory is made");
        let status = Command::new("chown")
            .args(["postgres:postgres"])
            .arg(&path)
            .status()
            .expect("chown runs");
        assert!(status.success());
        path
    }
}

/// One running (or killed) server.
pub struct Server {
    pub data: PathBuf,
    pub port: u16,
    stopped: bool,
}

/// How commits wait for the standby.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replication {
    /// The default: a commit is acknowledged once it is on the primary's disk.
    Asynchronous,
    /// `synchronous_standby_names = '*'`: a commit is acknowledged once the standby has it.
    Synchronous,
}

impl Server {
    /// `initdb` and start a primary that can stream to a standby and archives its WAL into
    /// `archive` when given.
    pub fn primary(place: &Place, archive: Option<&Path>) -> Self {
        let data = place.path("primary");
        let data_text = data.to_string_lossy().into_owned();
        as_postgres(
            "initdb",
            &["-D", &data_text, "-U", "postgres", "--auth=trust", "-N"],
        );
        let mut conf = String::from(
            "listen_addresses = '127.0.0.1'\nwal_level = replica\nmax_wal_senders = 5\n\
             hot_standby = on\nwal_keep_size = '256MB'\n\
             log_min_messages = warning\n",
        );
        conf.push_str(&format!(
            "unix_socket_directories = '{}'\n",
            place.path("").display()
        ));
        if let Some(archive) = archive {
            // Copied under a temporary name and renamed, so a segment appears in the archive
            // only whole: a restore (or `archive_all`) that sees it never reads half a copy.
            conf.push_str(&format!(
                "archive_mode = on\narchive_command = 'cp %p {0}/%f.part && mv {0}/%f.part {0}/%f'\n",
                archive.display()
            ));
        }
        append(&data.join("postgresql.conf"), &conf);
        let server = Self {
            data,
            port: free_port(),
            stopped: true,
        };
        server.start();
        server.running()
    }

    /// A streaming standby of `primary`, made with `pg_basebackup -R`.
    pub fn standby(place: &Place, primary: &Server, replication: Replication) -> Self {
        let data = base_backup_into(primary, &place.path("standby"), &["-R"]);
        // Its own archive setting off: only the primary archives.
        append(
            &data.join("postgresql.conf"),
            "archive_mode = off\nprimary_slot_name = ''\n",
        );
        let standby = Self {
            data,
            port: free_port(),
            stopped: true,
        };
        standby.start();
        let standby = standby.running();
        if replication == Replication::Synchronous {
            primary.sql("ALTER SYSTEM SET synchronous_standby_names = '*'");
            primary.sql("SELECT pg_reload_conf()");
            let deadline = Instant::now() + Duration::from_secs(30);
            while primary.sql("SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'")
                != "1"
            {
                assert!(
                    Instant::now() < deadline,
                    "the standby never became synchronous"
                );
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        standby
    }

    pub fn start(&self) {
        let port = format!("-p {}", self.port);
        let log = self.data.with_extension("log");
        as_postgres(
            "pg_ctl",
            &[
                "-D",
                &self.data.to_string_lossy(),
                "-l",
                &log.to_string_lossy(),
                "-o",
                &port,
                "-w",
                "-t",
                "60",
                "start",
            ],
        );
    }

    /// Runs `sql` with psql and answers its output (unaligned, tuples only), trimmed.
    pub fn sql(&self, sql: &str) -> String {
        let port = self.port.to_string();
        let out = as_postgres(
            "psql",
            &[
                "-h",
                "127.0.0.1",
                "-p",
                &port,
                "-U",
                "postgres",
                "-d",
                "postgres",
                "-XAtq",
                "-v",
                "ON_ERROR_STOP=1",
                "-c",
                sql,
            ],
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// The primary's current WAL position.
    pub fn lsn(&self) -> String {
        self.sql("SELECT pg_current_wal_lsn()")
    }

    /// Switches to a new WAL file and waits until `archive` holds the one it ended.
    pub fn archive_all(&self, archive: &Path) {
        let ended = self.sql("SELECT pg_walfile_name(pg_switch_wal())");
        let deadline = Instant::now() + Duration::from_secs(30);
        while !archive.join(&ended).exists() {
            assert!(Instant::now() < deadline, "{ended} was never archived");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits until this standby has replayed `lsn`.
    pub fn wait_replayed(&self, lsn: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        let check = format!("SELECT pg_last_wal_replay_lsn() >= '{lsn}'::pg_lsn");
        while self.sql(&check) != "t" {
            assert!(
                Instant::now() < deadline,
                "the standby never replayed {lsn}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Cuts this standby off from its primary (it reconnects to a port where nothing
    /// listens), as a lagging asynchronous standby is: what the primary commits from now on
    /// does not reach it.
    pub fn cut_off(&self) {
        self.sql(&format!(
            "ALTER SYSTEM SET primary_conninfo = 'host=127.0.0.1 port={} user=postgres'",
            free_port()
        ));
        self.sql("SELECT pg_reload_conf()");
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.sql("SELECT count(*) FROM pg_stat_wal_receiver WHERE status = 'streaming'")
            != "0"
        {
            assert!(Instant::now() < deadline, "the standby kept streaming");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGKILL to the postmaster and every process it started, as a machine that dies.
    pub fn kill(&mut self) {
        let pid_file = std::fs::read_to_string(self.data.join("postmaster.pid"))
            .expect("the server's pid file");
        let pid = pid_file.lines().next().expect("a pid").trim().to_owned();
        let children = Command::new("pgrep")
            .args(["-P", &pid])
            .output()
            .expect("pgrep runs");
        let mut all = vec![pid];
        all.extend(
            String::from_utf8_lossy(&children.stdout)
                .split_whitespace()
                .map(str::to_owned),
        );
        let status = Command::new("kill")
            .arg("-9")
            .args(&all)
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill -9 {all:?}");
        self.stopped = true;
    }

    /// Promotes this standby to a primary (a new timeline) and waits until it takes writes.
    pub fn promote(&self) {
        as_postgres(
            "pg_ctl",
            &[
                "-D",
                &self.data.to_string_lossy(),
                "-w",
                "-t",
                "60",
                "promote",
            ],
        );
        assert_eq!(self.sql("SELECT pg_is_in_recovery()"), "f");
    }

    /// The server's timeline.
    pub fn timeline(&self) -> u32 {
        let file = self.sql("SELECT pg_walfile_name(pg_current_wal_lsn())");
        u32::from_str_radix(&file[..8], 16).expect("a timeline in the WAL file's name")
    }

    /// Stops the server (fast) if it runs.
    pub fn stop(&mut self) {
        if !self.stopped {
            let _ = Command::new("runuser")
                .args(["-u", "postgres", "--"])
                .arg(bin("pg_ctl"))
                .args([
                    "-D",
                    &self.data.to_string_lossy(),
                    "-m",
                    "immediate",
                    "-w",
                    "stop",
                ])
                .output();
            self.stopped = true;
        }
    }

    /// Marks the server as running (after [`Server::start`]), so that the drop stops it.
    fn running(mut self) -> Self {
        self.stopped = false;
        self
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

fn append(path: &Path, text: &str) {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .unwrap_or_else(|e| panic!("{} opens: {e}", path.display()));
    file.write_all(text.as_bytes())
        .expect("the configuration is written");
}

/// Restores `base` (a `pg_basebackup` copy) into a new data directory and recovers it from
/// `archive` up to `lsn`, then promotes it (a new timeline), as a point-in-time restore does.
pub fn restore_to(place: &Place, base: &Path, archive: &Path, lsn: &str) -> Server {
    let data = place.path("restored");
    let status = Command::new("cp")
        .arg("-a")
        .arg(base)
        .arg(&data)
        .status()
        .expect("cp runs");
    assert!(status.success());
    append(
        &data.join("postgresql.conf"),
        &format!(
            "archive_mode = off\nrestore_command = 'cp {}/%f %p'\nrecovery_target_lsn = '{lsn}'\n\
             recovery_target_action = 'promote'\n",
            archive.display()
        ),
    );
    std::fs::write(data.join("recovery.signal"), "").expect("recovery.signal");
    let status = Command::new("chown")
        .args(["-R", "postgres:postgres"])
        .arg(&data)
        .status()
        .expect("chown runs");
    assert!(status.success());
    let server = Server {
        data,
        port: free_port(),
        stopped: true,
    };
    server.start();
    let server = server.running();
    let deadline = Instant::now() + Duration::from_secs(60);
    while server.sql("SELECT pg_is_in_recovery()") != "f" {
        assert!(
            Instant::now() < deadline,
            "the restore never finished its recovery"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    server
}

/// Takes a base backup of `primary` into `place`'s `base` directory.
pub fn base_backup(place: &Place, primary: &Server) -> PathBuf {
    base_backup_into(primary, &place.path("base"), &[])
}

/// `pg_basebackup` of `primary` into `data`, with `extra` arguments (`-R`: a standby's).
fn base_backup_into(primary: &Server, data: &Path, extra: &[&str]) -> PathBuf {
    let port = primary.port.to_string();
    let data_text = data.to_string_lossy().into_owned();
    let mut args = vec![
        "-h",
        "127.0.0.1",
        "-p",
        &port,
        "-U",
        "postgres",
        "-D",
        &data_text,
        "-X",
        "stream",
        "--no-sync",
        "--checkpoint=fast",
    ];
    args.extend(extra);
    as_postgres("pg_basebackup", &args);
    data.to_path_buf()
}

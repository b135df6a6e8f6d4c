//! What the tests need beyond the Rust toolchain, in one list: `cargo xtask test` gets each
//! thing that is missing when it can (Debian packages as root, Python packages with pip, the
//! machine's services started with their own commands), and otherwise says exactly what is
//! missing and how to get it, before any test runs.

use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How to tell whether a need is met.
enum Check {
    /// A program on the PATH.
    Program(&'static str),
    /// A module `python3` can import.
    PythonModule(&'static str),
    /// A service answering TCP on a loopback port.
    Listening(u16),
    /// A directory that exists.
    Directory(&'static str),
}

/// How to meet a need that is not met.
enum Get {
    /// A Debian package, installed with apt-get (as root).
    Apt(&'static str),
    /// A Python package, installed with pip.
    Pip(&'static str),
    /// A shell command that starts a service (as root), then a wait for its port.
    Start(&'static str),
}

/// One thing the tests need.
struct Need {
    /// What it is, and which tests use it.
    what: &'static str,
    check: Check,
    get: Get,
}

/// Everything the workspace's tests need beyond cargo, in the order they are got.
const NEEDS: &[Need] = &[
    Need {
        what: "python3 (the SQLite write-lock holder of the busy-store tests, the OpenAPI check)",
        check: Check::Program("python3"),
        get: Get::Apt("python3"),
    },
    Need {
        what: "the Python venv module (the Python package's tests run in a fresh virtual environment)",
        check: Check::PythonModule("venv"),
        get: Get::Apt("python3-venv"),
    },
    Need {
        what: "psql and pg_dump (the Python and TypeScript tests make their PostgreSQL databases with psql; the TypeScript tests search a store's pg_dump for plaintext)",
        check: Check::Program("psql"),
        get: Get::Apt("postgresql-client"),
    },
    Need {
        what: "PostgreSQL's server programs, initdb, pg_ctl and pg_basebackup (the failover and \
               restore tests make a primary and a standby of their own: \
               crates/lease-cli/tests/failover.rs)",
        check: Check::Directory("/usr/lib/postgresql"),
        get: Get::Apt("postgresql"),
    },
    Need {
        what: "runuser (the failover tests run initdb and pg_ctl as the postgres user)",
        check: Check::Program("runuser"),
        get: Get::Apt("util-linux"),
    },
    Need {
        what: "bindfs (the FUSE test: crates/lease-cli/tests/unverified_fs.rs)",
        check: Check::Program("bindfs"),
        get: Get::Apt("bindfs"),
    },
    Need {
        what: "strace (kills at each step of a commit: crates/lease-cli/tests/unverified_fs.rs)",
        check: Check::Program("strace"),
        get: Get::Apt("strace"),
    },
    Need {
        what: "node (another language following docs/ENCRYPTION.md: crates/lease-seal/tests/seal.rs)",
        check: Check::Program("node"),
        get: Get::Apt("nodejs"),
    },
    Need {
        what: "npm (the TypeScript client's tests: clients/typescript)",
        check: Check::Program("npm"),
        get: Get::Apt("npm"),
    },
    Need {
        what: "chromium (the operator page's browser tests: crates/lease-cli/tests/operator_page.rs)",
        check: Check::Program("chromium"),
        get: Get::Apt("chromium"),
    },
    Need {
        what: "openapi-spec-validator (crates/lease-server/tests/openapi.rs)",
        check: Check::PythonModule("openapi_spec_validator"),
        get: Get::Pip("openapi-spec-validator"),
    },
    Need {
        what: "schemathesis 4.32.5 (the API against its document: crates/lease-cli/tests/schemathesis.rs)",
        check: Check::Program("schemathesis"),
        get: Get::Pip("schemathesis==4.32.5"),
    },
    Need {
        what: "moto_server, an S3 API the tests start (crates/lease-guard/tests/value_guards.rs)",
        check: Check::Program("moto_server"),
        get: Get::Pip("moto[server]"),
    },
    Need {
        what: "redis-cli (the Redis guard's tests remove their keys with it)",
        check: Check::Program("redis-cli"),
        get: Get::Apt("redis-tools"),
    },
    Need {
        what: "Redis on 127.0.0.1:6379 (the Redis guard's tests)",
        check: Check::Listening(6379),
        get: Get::Start(
            "redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save '' \
             --appendonly no --dir /var/lib/redis --logfile /var/log/redis/ci.log",
        ),
    },
    Need {
        what: "MariaDB on 127.0.0.1:3306 (the MariaDB guard's tests)",
        check: Check::Listening(3306),
        get: Get::Start(
            "start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd",
        ),
    },
    Need {
        what: "NATS with JetStream on 127.0.0.1:4222 (the NATS key-value guard's tests)",
        check: Check::Listening(4222),
        get: Get::Start(
            "start-stop-daemon --start --oknodo --background --exec /usr/sbin/nats-server -- \
             -a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server -l /var/log/nats-server.log",
        ),
    },
    Need {
        what: "PostgreSQL on 127.0.0.1:5432 (lease-postgres and the CLI's PostgreSQL tests)",
        check: Check::Listening(5432),
        get: Get::Start(
            "pg_ctlcluster --skip-systemctl-redirect \"$(ls /etc/postgresql | sort | tail -1)\" main start",
        ),
    },
];

/// Meets every need, or says what is still missing and how to get it.
///
/// # Errors
/// One line per need that is still unmet, with the command that would meet it.
pub(crate) fn ensure() -> Result<(), String> {
    let root = is_root();
    let mut apt_updated = false;
    let mut missing = Vec::new();
    for need in NEEDS {
        if met(&need.check) {
            continue;
        }
        eprintln!("xtask: missing {}: getting it", need.what);
        let got = match &need.get {
            Get::Apt(package) if root => {
                if !apt_updated {
                    apt_updated = quiet("apt-get", &["update", "-qq"]);
                }
                quiet_env(
                    "apt-get",
                    &["install", "-y", "-qq", "--no-install-recommends", package],
                    &[("DEBIAN_FRONTEND", "noninteractive")],
                )
            }
            Get::Pip(package) => pip_install(package),
            Get::Start(command) if root => {
                quiet("sh", &["-c", command]) && listening_within(&need.check, 60)
            }
            Get::Apt(_) | Get::Start(_) => false,
        };
        if !got || !met(&need.check) {
            missing.push(format!("- {}: {}", need.what, how_to_get(&need.get)));
        }
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "the tests need what this machine lacks and xtask could not get{}:\n{}",
            if root { "" } else { " (it is not root)" },
            missing.join("\n")
        ))
    }
}

fn how_to_get(get: &Get) -> String {
    match get {
        Get::Apt(package) => format!("sudo apt-get install {package}"),
        Get::Pip(package) => format!("python3 -m pip install {package}"),
        Get::Start(command) => format!("start it: sudo sh -c '{command}'"),
    }
}

fn met(check: &Check) -> bool {
    match check {
        Check::Program(name) => quiet("sh", &["-c", &format!("command -v {name}")]),
        Check::PythonModule(module) => quiet("python3", &["-c", &format!("import {module}")]),
        Check::Listening(port) => {
            let addr = SocketAddr::from(([127, 0, 0, 1], *port));
            TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_ok()
        }
        Check::Directory(path) => std::path::Path::new(path).is_dir(),
    }
}

fn listening_within(check: &Check, seconds: u64) -> bool {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    while Instant::now() < deadline {
        if met(check) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    false
}

/// pip as the machine allows it: a Debian Python refuses system-wide installs without
/// `--break-system-packages`, which older pips do not know.
fn pip_install(package: &str) -> bool {
    quiet(
        "python3",
        &[
            "-m",
            "pip",
            "install",
            "--quiet",
            "--break-system-packages",
            package,
        ],
    ) || quiet("python3", &["-m", "pip", "install", "--quiet", package])
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
}

fn quiet(program: &str, args: &[&str]) -> bool {
    quiet_env(program, args, &[])
}

/// Runs a program with its output discarded (errors still reach stderr); whether it succeeded.
fn quiet_env(program: &str, args: &[&str], env: &[(&str, &str)]) -> bool {
    Command::new(program)
        .args(args)
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

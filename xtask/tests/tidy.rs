//! Tidy checks: the layering rules of docs/ARCHITECTURE.md, enforced on the real dependency graph
//! and the source tree.

use std::path::{Path, PathBuf};
use std::process::Command;

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The normal (non-dev) dependency tree of one package, one crate name per line.
fn dependency_names(package: &str) -> Vec<String> {
    let out = Command::new(env!("CARGO"))
        .args([
            "tree", "--edges", "normal", "--prefix", "none", "--format", "{p}", "-p", package,
        ])
        .current_dir(workspace_root())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| line.split_whitespace().next().map(str::to_owned))
        .collect()
}

#[test]
fn the_domain_depends_on_no_database_runtime_or_async_crate() {
    let deps = dependency_names("lease-domain");
    assert!(
        deps.contains(&"thiserror".to_owned()),
        "cargo tree gave {deps:?}"
    );
    for forbidden in [
        "rusqlite",
        "r2d2",
        "r2d2_sqlite",
        "tokio",
        "tokio-util",
        "async-trait",
        "futures",
        "lease-ports",
    ] {
        assert!(
            !deps.iter().any(|d| d == forbidden),
            "lease-domain depends on {forbidden}"
        );
    }
}

#[test]
fn the_port_names_no_database() {
    let deps = dependency_names("lease-ports");
    assert!(
        deps.contains(&"lease-domain".to_owned()),
        "cargo tree gave {deps:?}"
    );
    for forbidden in [
        "rusqlite",
        "r2d2",
        "r2d2_sqlite",
        "lease-sqlite",
        "tokio-postgres",
        "lease-postgres",
    ] {
        assert!(
            !deps.iter().any(|d| d == forbidden),
            "lease-ports depends on {forbidden}"
        );
    }
}

#[test]
fn only_the_postgres_adapter_and_the_cli_depend_on_a_postgres_client() {
    assert!(dependency_names("lease-postgres").contains(&"tokio-postgres".to_owned()));
    for package in [
        "lease-domain",
        "lease-ports",
        "lease-sqlite",
        "lease-worker",
        "lease-guard",
    ] {
        let deps = dependency_names(package);
        for forbidden in ["tokio-postgres", "postgres-protocol", "deadpool-postgres"] {
            assert!(
                !deps.iter().any(|d| d == forbidden),
                "{package} depends on {forbidden}"
            );
        }
    }
}

fn rust_files(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy();
        if path.is_dir() && name != "target" && !name.starts_with('.') {
            rust_files(&path, found);
        } else if name.ends_with(".rs") {
            found.push(path);
        }
    }
}

#[test]
fn every_rust_file_starts_with_a_module_doc_line() {
    let mut files = Vec::new();
    for top in ["crates", "xtask", "benches"] {
        rust_files(&workspace_root().join(top), &mut files);
    }
    assert!(files.len() > 10, "found only {files:?}");
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(
            text.starts_with("//! "),
            "{} does not start with a //! line",
            file.display()
        );
    }
}

#[test]
fn only_the_cli_main_the_worker_clock_and_the_sqlite_store_clock_read_the_clock() {
    let mut files = Vec::new();
    rust_files(&workspace_root().join("crates"), &mut files);
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let allowed = file.ends_with("lease-cli/src/main.rs")
            || file.ends_with("lease-worker/src/clock.rs")
            || file.ends_with("lease-sqlite/src/clock.rs");
        if !allowed && !file.to_string_lossy().contains("/tests/") {
            assert!(
                !text.contains("SystemTime::now"),
                "{} reads the clock",
                file.display()
            );
        }
    }
}

#[test]
fn unsafe_code_is_allowed_only_in_the_crash_simulating_vfs_and_the_errno_read() {
    let mut files = Vec::new();
    for top in ["crates", "xtask", "benches"] {
        rust_files(&workspace_root().join(top), &mut files);
    }
    let allowing: Vec<_> = files
        .iter()
        .filter(|f| {
            std::fs::read_to_string(f)
                .unwrap()
                .contains(concat!("allow(", "unsafe_code)"))
        })
        .map(|f| f.strip_prefix(workspace_root()).unwrap().to_path_buf())
        .collect();
    let mut allowing = allowing;
    allowing.sort();
    assert_eq!(
        allowing,
        [
            // One call, sqlite3_system_errno, which rusqlite does not wrap: it tells a full
            // file system from other I/O errors.
            PathBuf::from("crates/lease-sqlite/src/error.rs"),
            PathBuf::from("crates/lease-sqlite/tests/power_loss/crash_vfs.rs"),
        ]
    );
}

#[test]
fn the_worker_runtime_names_no_database() {
    let deps = dependency_names("lease-worker");
    assert!(
        deps.contains(&"lease-ports".to_owned()),
        "cargo tree gave {deps:?}"
    );
    for forbidden in ["rusqlite", "r2d2", "lease-sqlite", "clap"] {
        assert!(
            !deps.iter().any(|d| d == forbidden),
            "lease-worker depends on {forbidden}"
        );
    }
}

#[test]
fn the_guard_kit_carries_no_http_or_postgres_library() {
    let deps = dependency_names("lease-guard");
    assert!(
        deps.contains(&"lease-domain".to_owned()),
        "cargo tree gave {deps:?}"
    );
    for forbidden in ["hyper", "axum", "reqwest", "tokio-postgres", "postgres"] {
        assert!(
            !deps.iter().any(|d| d == forbidden),
            "lease-guard depends on {forbidden}"
        );
    }
}

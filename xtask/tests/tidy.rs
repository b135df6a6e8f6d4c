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
        "lease-schedule",
        "lease-guard",
        "lease-server",
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
    let files = all_rust_files();
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
    let files = all_rust_files();
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
fn no_code_blocks_its_own_task_in_place() {
    let needle = ["block", "_in_place("].concat();
    let offenders: Vec<_> = all_rust_files()
        .into_iter()
        .filter(|f| std::fs::read_to_string(f).unwrap().contains(&needle))
        .collect();
    assert!(
        offenders.is_empty(),
        "{needle} hides every other branch of the caller's select! (a deadline, a timeout, a \
         shutdown) while it blocks: {offenders:?}"
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
fn the_scheduler_names_no_database() {
    let deps = dependency_names("lease-schedule");
    assert!(
        deps.contains(&"lease-ports".to_owned()) && deps.contains(&"croner".to_owned()),
        "cargo tree gave {deps:?}"
    );
    for forbidden in [
        "rusqlite",
        "r2d2",
        "lease-sqlite",
        "lease-postgres",
        "clap",
        "reqwest",
    ] {
        assert!(
            !deps.iter().any(|d| d == forbidden),
            "lease-schedule depends on {forbidden}"
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

#[test]
fn the_server_depends_on_the_port_and_no_adapter() {
    let deps = dependency_names("lease-server");
    assert!(
        deps.contains(&"lease-ports".to_owned()) && deps.contains(&"axum".to_owned()),
        "cargo tree gave {deps:?}"
    );
    for forbidden in ["lease-sqlite", "lease-postgres", "rusqlite", "r2d2", "clap"] {
        assert!(
            !deps.iter().any(|d| d == forbidden),
            "lease-server depends on {forbidden}"
        );
    }
    // And no crate below the CLI carries the HTTP server.
    for package in [
        "lease-domain",
        "lease-ports",
        "lease-sqlite",
        "lease-postgres",
        "lease-worker",
        "lease-schedule",
    ] {
        let deps = dependency_names(package);
        for forbidden in ["axum", "tower-http", "utoipa"] {
            assert!(
                !deps.iter().any(|d| d == forbidden),
                "{package} depends on {forbidden}"
            );
        }
    }
}

/// Every Rust file of the workspace (crates, xtask, benches).
fn all_rust_files() -> Vec<PathBuf> {
    let mut files = Vec::new();
    for top in ["crates", "xtask", "benches"] {
        rust_files(&workspace_root().join(top), &mut files);
    }
    files
}

#[test]
fn the_domains_only_runtime_dependency_is_thiserror() {
    let out = Command::new(env!("CARGO"))
        .args([
            "tree",
            "--edges",
            "normal",
            "--prefix",
            "none",
            "--format",
            "{p}",
            "--depth",
            "1",
            "-p",
            "lease-domain",
        ])
        .current_dir(workspace_root())
        .output()
        .unwrap();
    assert!(out.status.success());
    let direct: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .filter(|name| name != "lease-domain")
        .collect();
    assert_eq!(direct, ["thiserror"]);
}

#[test]
fn no_test_is_ignored_or_expects_a_panic() {
    let (ignore, should_panic) = (concat!("#[", "ignore"), concat!("#[", "should_panic"));
    for file in all_rust_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(
            !text.contains(ignore) && !text.contains(should_panic),
            "{} ignores a test or expects a panic: assert the Err instead",
            file.display()
        );
    }
}

/// The lints an `allow` may name: those the workspace enables (its lint table, clippy's
/// default groups that the code has met, and the library-only run of `.ci/run`), so that an
/// `allow` never silences a lint that could not fire.
const ENABLED: [&str; 13] = [
    "unsafe_code",
    "missing_docs",
    "unreachable_pub",
    "clippy::cast_possible_truncation",
    "clippy::cast_possible_wrap",
    "clippy::cast_sign_loss",
    "clippy::dbg_macro",
    "clippy::unwrap_used",
    "clippy::expect_used",
    "clippy::panic",
    "clippy::too_many_arguments",
    "clippy::useless_conversion",
    "clippy::large_enum_variant",
];

#[test]
fn every_lint_allowed_is_enabled_and_the_exception_is_justified_in_place() {
    let attribute = concat!("allow", "(");
    for file in all_rust_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let code = line.split("//").next().unwrap_or_default();
            let Some(start) = code.find(attribute) else {
                continue;
            };
            if !code.trim_start().starts_with("#") {
                continue;
            }
            let inside = &code[start + attribute.len()..];
            let names = inside.split(')').next().unwrap_or_default();
            for name in names.split(',').map(str::trim).filter(|n| !n.is_empty()) {
                assert!(
                    ENABLED.contains(&name),
                    "{}:{}: allows {name}, which is never enabled",
                    file.display(),
                    i + 1
                );
            }
            let commented = line.contains("//")
                || i.checked_sub(1)
                    .and_then(|p| lines.get(p))
                    .is_some_and(|p| p.trim_start().starts_with("//"));
            assert!(
                commented,
                "{}:{}: say why the lint is allowed, on the line or the line above",
                file.display(),
                i + 1
            );
        }
    }
}

/// Every backticked path `docs/ARCHITECTURE.md` names exists: relative to the workspace, to
/// the crate whose section names it, or (a bare file name) somewhere in that crate.
#[test]
fn every_path_the_architecture_names_exists() {
    let root = workspace_root();
    let text = std::fs::read_to_string(root.join("docs/ARCHITECTURE.md")).unwrap();
    let mut section = root.clone();
    let mut checked = 0;
    for line in text.lines() {
        if let Some(heading) = line.strip_prefix("### `") {
            section = root.join(heading.trim_end_matches('`'));
        }
        // The test list names each crate at the start of its line: "- lease-sqlite: ...".
        if let Some(first) = line
            .strip_prefix("- ")
            .and_then(|l| l.split([' ', ':']).next())
            .filter(|name| name.starts_with("lease-"))
        {
            section = root.join("crates").join(first);
        }
        for (k, token) in line.split('`').enumerate() {
            let looks_like_path = k % 2 == 1
                && !token.contains(' ')
                && !token.contains("::")
                && !token.contains("://")
                // What a command writes (target/...) is not in the tree.
                && !token.starts_with("target/")
                && (token.ends_with(".rs")
                    || token.ends_with(".md")
                    || token.ends_with(".sql")
                    || token.ends_with('/'));
            if !looks_like_path {
                continue;
            }
            checked += 1;
            assert!(
                path_exists(&root, &section, token),
                "ARCHITECTURE.md names {token}, which does not exist"
            );
        }
    }
    assert!(checked > 20, "only {checked} paths found");
}

/// Spelled-out counts, as the architecture writes them.
const COUNTS: [&str; 21] = [
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
    "twenty",
];

#[test]
fn the_architecture_counts_each_store_s_migrations_as_its_folder_holds_them() {
    let root = workspace_root();
    let text = std::fs::read_to_string(root.join("docs/ARCHITECTURE.md")).unwrap();
    let mut stated = std::collections::BTreeMap::new();
    let mut section = String::new();
    for line in text.lines() {
        if let Some(heading) = line.strip_prefix("### `") {
            section = heading.trim_end_matches('`').to_owned();
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        for pair in words.windows(3) {
            if pair[1] == "frozen" && pair[2] == "migrations" {
                if let Some(n) = COUNTS.iter().position(|w| w.eq_ignore_ascii_case(pair[0])) {
                    stated.insert(section.clone(), n);
                }
            }
        }
    }
    let mut checked = 0;
    for entry in std::fs::read_dir(root.join("crates")).unwrap() {
        let dir = entry.unwrap().path();
        let Ok(files) = std::fs::read_dir(dir.join("migrations")) else {
            continue;
        };
        let count = files
            .filter_map(Result::ok)
            .filter(|f| f.file_name().to_string_lossy().ends_with(".sql"))
            .count();
        let name = format!("crates/{}", dir.file_name().unwrap().to_string_lossy());
        assert_eq!(
            stated.get(&name),
            Some(&count),
            "ARCHITECTURE.md must say how many frozen migrations {name} has ({count}), as \
             \"<count> frozen migrations\" in its section"
        );
        checked += 1;
    }
    assert!(checked >= 2, "only {checked} stores with migrations found");
}

fn path_exists(root: &Path, section: &Path, token: &str) -> bool {
    let matches = |base: &Path| -> bool {
        match token.split_once("*") {
            // A glob such as migrations/*.sql: its folder holds a file with that ending.
            Some((dir, ending)) => std::fs::read_dir(base.join(dir)).is_ok_and(|entries| {
                entries
                    .filter_map(Result::ok)
                    .any(|e| e.file_name().to_string_lossy().ends_with(ending))
            }),
            None => base.join(token).exists(),
        }
    };
    if matches(root) || matches(section) {
        return true;
    }
    if token.contains('/') {
        return false;
    }
    let mut files = Vec::new();
    if section.is_dir() && section != root {
        rust_files(section, &mut files);
    }
    files.iter().any(|f| f.ends_with(token))
}

/// Names the architecture may give that no file of the workspace defines: the standard
/// library's, tokio's, Python's and the web platform's own.
const NAMED_ELSEWHERE: [&str; 5] = ["Any", "Notify", "ValueError", "False", "AbortSignal"];

/// The names `text` defines as Rust items (a trait, type, struct, enum, constant, static,
/// function or module, an enum variant, a name a `use ... as` gives, or one a `pub use` hands
/// on), as Python classes and functions, or as TypeScript classes, interfaces and types.
fn defined_names(text: &str) -> std::collections::HashSet<String> {
    let word = |c: char| !(c.is_alphanumeric() || c == '_');
    let words: Vec<&str> = text.split(word).filter(|w| !w.is_empty()).collect();
    let mut names: std::collections::HashSet<String> = words
        .windows(2)
        .filter(|pair| {
            matches!(
                pair[0],
                "trait"
                    | "type"
                    | "struct"
                    | "enum"
                    | "const"
                    | "static"
                    | "fn"
                    | "mod"
                    | "as"
                    | "class"
                    | "def"
                    | "interface"
            )
        })
        .map(|pair| pair[1].to_owned())
        .collect();
    // Handed on by a `pub use` (a crate's face re-exports its modules' items).
    for rest in text.split("pub use ").skip(1) {
        let list = rest.split(';').next().unwrap_or_default();
        names.extend(
            list.split(word)
                .filter(|w| !w.is_empty())
                .map(str::to_owned),
        );
    }
    // An enum variant: at the start of a line, then `(`, `{` or `,`.
    for line in text.lines() {
        let line = line.trim_start();
        let name: String = line
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if !name.is_empty() && line[name.len()..].trim_start().starts_with(['(', '{', ',']) {
            names.insert(name);
        }
    }
    names
}

/// Every type, trait and path of the workspace the architecture names in backticks exists: a
/// CamelCase name is defined somewhere in its sources (Rust, Python or TypeScript), and a path
/// `lease_crate::module::item` has its module's file in that crate and the item defined in it.
#[test]
fn every_type_trait_and_module_path_the_architecture_names_exists() {
    let root = workspace_root();
    let text = std::fs::read_to_string(root.join("docs/ARCHITECTURE.md")).unwrap();
    let mut sources = String::new();
    for file in all_rust_files() {
        sources.push_str(&std::fs::read_to_string(file).unwrap());
    }
    let python = root.join("crates/lease-py/python/lease");
    for entry in std::fs::read_dir(&python).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "py" || e == "pyi") {
            sources.push_str(&std::fs::read_to_string(path).unwrap());
        }
    }
    // The TypeScript client's own sources (not its generated `schema.ts`).
    let typescript = root.join("clients/typescript/src");
    for entry in std::fs::read_dir(&typescript).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "ts") && !path.ends_with("schema.ts") {
            sources.push_str(&std::fs::read_to_string(path).unwrap());
        }
    }
    let defined = defined_names(&sources);
    let (mut names, mut paths) = (0, 0);
    for token in text.split('`').skip(1).step_by(2) {
        let camel = token.chars().next().is_some_and(char::is_uppercase)
            && token.chars().any(char::is_lowercase)
            && token.chars().all(char::is_alphanumeric);
        if camel && !NAMED_ELSEWHERE.contains(&token) {
            names += 1;
            assert!(
                defined.contains(token),
                "ARCHITECTURE.md names `{token}`, which nothing in the workspace defines"
            );
        }
        let segments: Vec<&str> = token.split("::").collect();
        let is_path = segments.len() >= 2
            && segments[0].starts_with("lease_")
            && segments
                .iter()
                .all(|s| !s.is_empty() && s.chars().all(|c| c.is_alphanumeric() || c == '_'));
        if !is_path {
            continue;
        }
        paths += 1;
        let mut file = root
            .join("crates")
            .join(segments[0].replace('_', "-"))
            .join("src/lib.rs");
        assert!(
            file.exists(),
            "ARCHITECTURE.md names `{token}`: no crate {}",
            segments[0]
        );
        // Each segment but the last is a module, in its own file if it has one; the last is
        // an item of the last module (or a module itself).
        for (n, segment) in segments.iter().enumerate().skip(1) {
            let dir = file.parent().unwrap().to_path_buf();
            let module = [
                dir.join(format!("{segment}.rs")),
                dir.join(segment).join("mod.rs"),
            ]
            .into_iter()
            .find(|p| p.exists());
            let last = n + 1 == segments.len();
            match module {
                Some(module) => file = module,
                None => {
                    let text = std::fs::read_to_string(&file).unwrap();
                    assert!(
                        last && defined_names(&text).contains(*segment),
                        "ARCHITECTURE.md names `{token}`: {} has no {segment}",
                        file.display()
                    );
                }
            }
        }
    }
    assert!(
        names > 50 && paths > 3,
        "only {names} names and {paths} paths found"
    );
}

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
/// default groups that the code has met, and what each crate's root denies outside tests),
/// so that an `allow` never silences a lint that could not fire.
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

/// The most lines a production file may have (issue 57): past it, a file is split by what its
/// parts do.
const MOST_FILE_LINES: usize = 1_000;

/// The most lines a production function may have.
const MOST_FUNCTION_LINES: usize = 150;

/// Where `{`, `}` and `;` stand in Rust source outside strings, characters and comments: one
/// `Mark` for each, lines counted from 0, with the depth of the braces open before it.
struct Mark {
    line: usize,
    c: char,
    depth: i64,
}

fn structure(text: &str) -> Vec<Mark> {
    let chars: Vec<char> = text.chars().collect();
    let (mut out, mut line, mut i) = (Vec::new(), 0, 0);
    let (mut block_comments, mut depth) = (0, 0);
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '\n' {
            line += 1;
            i += 1;
            continue;
        }
        if block_comments > 0 {
            if c == '*' && next == Some('/') {
                block_comments -= 1;
                i += 2;
            } else if c == '/' && next == Some('*') {
                block_comments += 1;
                i += 2;
            } else {
                i += 1;
            }
            continue;
        }
        match c {
            '/' if next == Some('/') => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            '/' if next == Some('*') => {
                block_comments = 1;
                i += 2;
            }
            // A raw string: r"...", r#"..."#, br#"..."#.
            'r' if matches!(next, Some('"' | '#'))
                && !chars
                    .get(i.wrapping_sub(1))
                    .is_some_and(|p| p.is_alphanumeric() || *p == '_') =>
            {
                let mut j = i + 1;
                let mut hashes = 0;
                while chars.get(j) == Some(&'#') {
                    hashes += 1;
                    j += 1;
                }
                if chars.get(j) != Some(&'"') {
                    i += 1;
                    continue;
                }
                j += 1;
                loop {
                    match chars.get(j) {
                        None => break,
                        Some('\n') => line += 1,
                        Some('"') if (1..=hashes).all(|k| chars.get(j + k) == Some(&'#')) => {
                            j += hashes;
                            break;
                        }
                        _ => {}
                    }
                    j += 1;
                }
                i = j + 1;
            }
            '"' => {
                let mut j = i + 1;
                while let Some(&d) = chars.get(j) {
                    match d {
                        '\\' => {
                            j += 1;
                            if chars.get(j) == Some(&'\n') {
                                line += 1;
                            }
                        }
                        '\n' => line += 1,
                        '"' => break,
                        _ => {}
                    }
                    j += 1;
                }
                i = j + 1;
            }
            // A character ('x', '\n', '{') and not a lifetime ('a).
            '\'' if chars.get(i + 2) == Some(&'\'') || next == Some('\\') => {
                let mut j = i + 1;
                if chars.get(j) == Some(&'\\') {
                    j += 1;
                }
                j += 1;
                while chars.get(j).is_some_and(|d| *d != '\'') {
                    j += 1;
                }
                i = j + 1;
            }
            '{' | '}' | ';' => {
                out.push(Mark { line, c, depth });
                depth += match c {
                    '{' => 1,
                    '}' => -1,
                    _ => 0,
                };
                i += 1;
            }
            _ => i += 1,
        }
    }
    out
}

/// The functions of `text` (its lines) longer than `most` lines, with their lengths: from
/// the line that names a function to the line that closes its body.
fn long_functions(text: &str, most: usize) -> Vec<(String, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let marks = structure(text);
    let mut long = Vec::new();
    for (n, line) in lines.iter().enumerate() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let Some(at) = words.iter().position(|w| *w == "fn") else {
            continue;
        };
        let before_ok = words[..at].iter().all(|w| {
            w.starts_with("pub")
                || matches!(
                    *w,
                    "async" | "const" | "unsafe" | "extern" | "\"C\"" | "default"
                )
        });
        if !before_ok || line.trim_start().starts_with("//") {
            continue;
        }
        let name: String = words
            .get(at + 1)
            .map(|w| {
                w.chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect()
            })
            .unwrap_or_default();
        // The first `{` or `;` from this line on at the line's depth opens the body (or ends a
        // declaration); the body ends where that depth comes back.
        let Some(first) = marks.iter().position(|m| m.line >= n) else {
            continue;
        };
        let base = marks[first].depth;
        let mut depth = base;
        let mut end = None;
        for Mark { line: l, c, .. } in &marks[first..] {
            match c {
                ';' if depth == base => break,
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == base {
                        end = Some(*l);
                        break;
                    }
                }
                _ => {}
            }
        }
        if let Some(end) = end {
            let length = end - n + 1;
            if length > most {
                long.push((name, length));
            }
        }
    }
    long
}

/// The modules a crate builds only for tests or test support (`#[cfg(test)]`, the features
/// `conformance` and `test-support`): the file stems of the `mod` lines after such a `cfg`.
fn test_only_modules(text: &str) -> Vec<String> {
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    let mut stems = Vec::new();
    for (n, cfg) in lines.iter().enumerate() {
        let test_only = cfg.starts_with("#[cfg(")
            && (cfg.contains("test") || cfg.contains("conformance"))
            && !cfg.contains("not(");
        if !test_only {
            continue;
        }
        // The item the `cfg` stands on, past the comments and attributes between them.
        let item = lines[n + 1..]
            .iter()
            .find(|l| !l.starts_with("//") && !l.starts_with("#["));
        let declared = item.and_then(|l| {
            l.trim_start_matches("pub ")
                .strip_prefix("mod ")
                .and_then(|rest| rest.strip_suffix(';'))
        });
        if let Some(stem) = declared {
            stems.push(stem.to_owned());
        }
    }
    stems
}

/// A crate's production Rust files: its `src/` without the modules it builds only for tests.
fn production_rust_files(src: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut test_only: Vec<PathBuf> = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let dir = match file.file_stem().unwrap().to_string_lossy().as_ref() {
            "lib" | "main" | "mod" => file.parent().unwrap().to_path_buf(),
            stem => file.parent().unwrap().join(stem),
        };
        for stem in test_only_modules(&text) {
            test_only.push(dir.join(format!("{stem}.rs")));
            test_only.push(dir.join(&stem));
        }
    }
    files
        .into_iter()
        .filter(|f| !test_only.iter().any(|t| f == t || f.starts_with(t)))
        .collect()
}

/// The lines of a Rust file before its inline unit tests.
fn before_inline_tests(text: &str) -> &str {
    text.find("#[cfg(test)]\nmod tests {")
        .map_or(text, |at| &text[..at])
}

#[test]
fn the_size_check_finds_a_long_function_and_skips_braces_in_strings_and_comments() {
    let body = "    let x = \"{\\\n       \";\n    // }\n    let y = '{';\n".repeat(45);
    let text =
        format!("fn long() {{\n{body}}}\n\nfn short() -> &'static str {{\n    r#\"}}\"#\n}}\n");
    assert_eq!(long_functions(&text, 150), vec![("long".to_owned(), 182)]);
    assert!(long_functions(&text, 200).is_empty());
}

/// No production file over [`MOST_FILE_LINES`] and no production function over
/// [`MOST_FUNCTION_LINES`] (issue 57): Rust in every crate's `src/` (less what only tests
/// build, and inline unit tests), the page's scripts, the TypeScript client and the Python
/// package.
#[test]
fn no_production_file_or_function_is_over_its_limit() {
    let root = workspace_root();
    let mut over = Vec::new();
    let mut checked = 0;
    for entry in std::fs::read_dir(root.join("crates")).unwrap() {
        let src = entry.unwrap().path().join("src");
        if !src.is_dir() {
            continue;
        }
        for file in production_rust_files(&src) {
            let text = std::fs::read_to_string(&file).unwrap();
            let text = before_inline_tests(&text);
            let shown = file.strip_prefix(&root).unwrap().display().to_string();
            let lines = text.lines().count();
            if lines > MOST_FILE_LINES {
                over.push(format!("{shown}: {lines} lines"));
            }
            for (name, length) in long_functions(text, MOST_FUNCTION_LINES) {
                over.push(format!("{shown}: fn {name}, {length} lines"));
            }
            checked += 1;
        }
    }
    for (dir, ending) in [
        ("crates/lease-server/ui", ".js"),
        ("clients/typescript/src", ".ts"),
        ("crates/lease-py/python/lease", ".py"),
    ] {
        for entry in std::fs::read_dir(root.join(dir)).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().to_string();
            // The TypeScript types generated from the API document are not checked in.
            if !name.ends_with(ending) || name == "schema.ts" {
                continue;
            }
            let lines = std::fs::read_to_string(&path).unwrap().lines().count();
            if lines > MOST_FILE_LINES {
                over.push(format!("{dir}/{name}: {lines} lines"));
            }
            checked += 1;
        }
    }
    assert!(checked > 100, "only {checked} files checked");
    assert!(
        over.is_empty(),
        "over the limits ({MOST_FILE_LINES} lines a file, {MOST_FUNCTION_LINES} a function):\n{}",
        over.join("\n")
    );
}

/// The methods of trait `name` in `text`: (required, provided), each in the order written.
fn trait_methods(text: &str, name: &str) -> (Vec<String>, Vec<String>) {
    let lines: Vec<&str> = text.lines().collect();
    let marks = structure(text);
    let declared = format!("pub trait {name}");
    let at = lines
        .iter()
        .position(|l| {
            l.starts_with(&declared) && l[declared.len()..].starts_with([' ', ':', '<', '{'])
        })
        .unwrap_or_else(|| panic!("no trait {name}"));
    let open = marks
        .iter()
        .position(|m| m.line >= at && m.c == '{')
        .unwrap();
    let inside = marks[open].depth + 1;
    let close = (open + 1..marks.len())
        .find(|&k| marks[k].c == '}' && marks[k].depth == inside)
        .unwrap();
    let (mut required, mut provided) = (Vec::new(), Vec::new());
    let body = marks[open].line + 1..marks[close].line;
    for (n, line) in lines.iter().enumerate().take(body.end).skip(body.start) {
        let words: Vec<&str> = line.split_whitespace().collect();
        let Some(f) = words.iter().position(|w| *w == "fn") else {
            continue;
        };
        if line.trim_start().starts_with("//") {
            continue;
        }
        let Some(first) = marks.iter().position(|m| m.line >= n) else {
            continue;
        };
        if marks[first].depth != inside {
            continue;
        }
        let method: String = words[f + 1]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        match marks[first..].iter().find(|m| m.c != '}') {
            Some(Mark { c: ';', .. }) => required.push(method),
            _ => provided.push(method),
        }
    }
    (required, provided)
}

/// docs/ARCHITECTURE.md's table of the store's surface names every method of every trait of
/// the port, each in the column it is in (required or provided), and no other.
#[test]
fn the_architecture_s_table_of_the_store_s_methods_matches_the_traits() {
    let root = workspace_root();
    let text = std::fs::read_to_string(root.join("docs/ARCHITECTURE.md")).unwrap();
    let section = text
        .split("## The store's surface")
        .nth(1)
        .expect("ARCHITECTURE.md has a section \"The store's surface\"");
    let names = |cell: &str| -> Vec<String> {
        let mut names: Vec<String> = cell
            .split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_owned)
            .collect();
        names.sort();
        names
    };
    let mut rows = std::collections::BTreeMap::new();
    for line in section.lines().take_while(|l| !l.starts_with("## ")) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if cells.len() == 5 && cells[1].starts_with('`') {
            let trait_name = cells[1].trim_matches('`').to_owned();
            rows.insert(trait_name, (names(cells[2]), names(cells[3])));
        }
    }
    let src = root.join("crates/lease-ports/src");
    let traits = [
        ("lib.rs", "LeaseStore"),
        ("control.rs", "Control"),
        ("audit.rs", "AuditTrail"),
        ("overview.rs", "Overview"),
        ("keys.rs", "KeyStore"),
        ("signal.rs", "EnqueueSignal"),
        ("transfer.rs", "Transfer"),
    ];
    let mut required_total = 0;
    for (file, name) in traits {
        let source = std::fs::read_to_string(src.join(file)).unwrap();
        let (mut required, mut provided) = trait_methods(&source, name);
        required_total += required.len();
        required.sort();
        provided.sort();
        assert_eq!(
            rows.remove(name),
            Some((required, provided)),
            "ARCHITECTURE.md's row for {name} (required, provided) differs from the trait"
        );
    }
    assert!(
        rows.is_empty(),
        "ARCHITECTURE.md's table names traits the port does not have: {rows:?}"
    );
    assert!(
        required_total > 20,
        "only {required_total} required methods found"
    );
}

#[test]
fn trait_methods_tells_required_from_provided() {
    let text = "pub trait T: Send {\n    /// A {\n    fn a(&self) -> u8;\n    fn b(&self)\n    where\n        Self: Sized,\n    {\n        let f = |x: u8| { x };\n        fn inner() {}\n    }\n    async fn c(\n        &self,\n    ) -> Result<(), ()>;\n}\n";
    assert_eq!(
        trait_methods(text, "T"),
        (vec!["a".to_owned(), "c".to_owned()], vec!["b".to_owned()])
    );
}

/// Every crate root denies, outside tests, what library and binary code may not do (unwrap,
/// expect, panic, export what is unreachable), so the one clippy run of `.ci/run` checks it.
#[test]
fn every_crate_root_denies_unwrap_expect_panic_and_unreachable_pub_outside_tests() {
    let root = workspace_root();
    let mut roots = vec![root.join("xtask/src/main.rs")];
    for entry in std::fs::read_dir(root.join("crates")).unwrap() {
        let src = entry.unwrap().path().join("src");
        for name in ["lib.rs", "main.rs"] {
            if src.join(name).exists() {
                roots.push(src.join(name));
            }
        }
    }
    assert!(roots.len() > 10, "only {roots:?}");
    for file in roots {
        let text: String = std::fs::read_to_string(&file)
            .unwrap()
            .split_whitespace()
            .collect();
        let denied = text.contains("#![cfg_attr(not(test),deny(")
            && [
                "clippy::unwrap_used",
                "clippy::expect_used",
                "clippy::panic",
                "unreachable_pub",
            ]
            .iter()
            .all(|lint| text.contains(lint));
        assert!(
            denied,
            "{} must deny clippy::unwrap_used, expect_used, panic and unreachable_pub outside \
             tests (#![cfg_attr(not(test), deny(...))])",
            file.display()
        );
    }
}

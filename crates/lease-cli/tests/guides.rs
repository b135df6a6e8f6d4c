//! The shell examples of the README and the guides (`docs/guide/*.md`) run as written: each
//! file's ```sh blocks in order, in one fresh directory, with the `lease` just built first on
//! the PATH. A command may be refused by the lease rules (exit 3: the examples show refusals),
//! never fail (exit 1) or be misused (exit 2). Blocks marked ```sh,no_run need what a test
//! cannot start (a server that runs until stopped, another machine, the network) and are not
//! run; the Rust examples are doctests of `lease-sqlite`, the Python ones pytest's.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// The ```sh blocks of a Markdown text that are meant to run.
fn runnable_blocks(markdown: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in markdown.lines() {
        match &mut current {
            None if line.trim_end() == "```sh" => current = Some(String::new()),
            None => {}
            Some(_) if line.trim_end() == "```" => blocks.extend(current.take()),
            Some(block) => {
                block.push_str(line);
                block.push('\n');
            }
        }
    }
    blocks
}

/// Runs the runnable blocks of `file` in order, in one fresh directory.
fn run_examples_of(file: &Path) -> usize {
    let text = std::fs::read_to_string(file).unwrap();
    let blocks = runnable_blocks(&text);
    let dir = tempfile::tempdir().unwrap();
    let bin = Path::new(env!("CARGO_BIN_EXE_lease")).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    for (n, block) in blocks.iter().enumerate() {
        // Every command of the block is checked as it runs: exit 0, or 3 (refused).
        let script = format!(
            "set -o errtrace -o pipefail\n\
             trap 'rc=$?; if [ $rc -ne 3 ]; then echo \"failed ($rc): $BASH_COMMAND\" >&2; exit $rc; fi' ERR\n\
             {block}"
        );
        let out = Command::new("bash")
            .arg("-c")
            .arg(&script)
            .current_dir(dir.path())
            .env("PATH", &path)
            .env_remove("LEASE_DB")
            .env_remove("LEASE_SERVER")
            .env_remove("LEASE_API_KEY")
            .env_remove("LEASE_AUDIT")
            .env_remove("LEASE_CLOCK")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}, block {}:\n{block}\nstdout:\n{}\nstderr:\n{}",
            file.display(),
            n + 1,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    blocks.len()
}

#[test]
fn the_readme_s_shell_examples_run_as_written() {
    assert_eq!(run_examples_of(&repo().join("README.md")), 1);
}

#[test]
fn every_guide_s_shell_examples_run_as_written() {
    let mut ran = 0;
    let mut guides: Vec<PathBuf> = std::fs::read_dir(repo().join("docs/guide"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    guides.sort();
    for guide in &guides {
        ran += run_examples_of(guide);
    }
    assert!(guides.len() >= 7, "{guides:?}");
    assert!(ran >= 8, "only {ran} blocks ran");
}

#[test]
fn a_failing_example_is_caught() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.md");
    std::fs::write(
        &file,
        "```sh\nlease init\nlease claim x --owner A --ttl -1\n```\n",
    )
    .unwrap();
    let caught = std::panic::catch_unwind(|| run_examples_of(&file));
    assert!(caught.is_err(), "a usage error in an example passed");
}

//! One helper the command-line tests share: a command run with its standard input fed.

use std::io::Write as _;
use std::process::{Command, Output, Stdio};

/// Runs `command` with `input` on its standard input, and its output captured.
pub fn fed(command: &mut Command, input: &[u8]) -> Output {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the lease binary runs");
    child
        .stdin
        .take()
        .expect("stdin is piped")
        .write_all(input)
        .expect("the input is written");
    child.wait_with_output().expect("the command ends")
}

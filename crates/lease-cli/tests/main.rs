//! Every integration test of `lease-cli` in one binary (one build and one link instead of one
//! per file): each file of this folder is a module; a test is named by its file, as
//! `cli::name`.

// Helpers the files share, each loaded once.
#[path = "common/checkpoint_cli.rs"]
mod checkpoint_cli;
#[path = "common/cluster.rs"]
mod cluster;
#[path = "common/ordered_cli.rs"]
mod ordered_cli;
#[path = "common/reaped.rs"]
mod reaped;
#[path = "common/stdin.rs"]
mod stdin;
mod support;
#[path = "common/trace_cli.rs"]
mod trace_cli;

mod cli;
mod contention;
mod control_cli;
mod cut_connections;
mod failover;
mod guard_cli;
mod guides;
mod ledger_work;
mod observability_cli;
mod operator_page;
mod postgres_cli;
mod queue_cli;
mod schemathesis;
mod serve_cli;
mod traces_cli;
mod unverified_fs;
mod work_cli;

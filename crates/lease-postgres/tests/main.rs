//! Every integration test of `lease-postgres` in one binary (one build and one link instead of one
//! per file): each file of this folder is a module; a test is named by its file, as
//! `conformance::name`.

mod conformance;
mod differential;
mod faults;
mod group_commit;
mod guard;
mod heads;
mod observability;
mod overview;
mod postgres;
mod step;
mod tls;

// Not here: `restart.rs` restarts the machine's PostgreSQL, so it is a binary of its own.

//! Every integration test of `lease-worker` in one binary (one build and one link instead of one
//! per file): each file of this folder is a module; a test is named by its file, as
//! `busy_sqlite::name`.

mod busy_sqlite;
mod worker;

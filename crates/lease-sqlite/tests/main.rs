//! Every integration test of `lease-sqlite` in one binary (one build and one link instead of one
//! per file): each file of this folder is a module; a test is named by its file, as
//! `clock_edges::name`.

mod clock_edges;
mod clock_modes;
mod conformance;
mod differential;
mod full_and_read_only;
mod group_commit;
mod hostile_files;
mod linearizability;
mod observability;
mod seed_api;

// Not here: `relative_path.rs` changes the process's working directory, so it is a binary of
// its own.

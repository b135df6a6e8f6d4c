//! Every integration test of `lease-ports` in one binary (one build and one link instead of one
//! per file): each file of this folder is a module; a test is named by its file, as
//! `differential_seeded::name`.

mod differential_seeded;
mod forward_conformance;
mod linearizability;
mod memory_conformance;

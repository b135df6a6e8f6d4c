//! Every integration test of `lease-server` in one binary (one build and one link instead of one
//! per file): each file of this folder is a module; a test is named by its file, as
//! `api::name`.

// Helpers the files share, each loaded once.
mod support;

mod api;
mod control;
mod no_5xx;
mod openapi;
mod sessions;

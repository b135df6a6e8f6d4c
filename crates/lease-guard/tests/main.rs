//! Every integration test of `lease-guard` in one binary (one build and one link instead of one
//! per file): each file of this folder is a module; a test is named by its file, as
//! `guards::name`.

// Helpers the files share, each loaded once.
mod support;

mod guards;
mod ledger_http;
mod story;
mod value_guards;

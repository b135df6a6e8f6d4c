//! Every integration test of `lease-client` in one binary (one build and one link instead of one
//! per file): each file of this folder is a module; a test is named by its file, as
//! `conformance_over_http::name`.

mod conformance_over_http;
mod tls;

//! Every integration test of `lease-schedule` in one binary (one build and one link instead of one
//! per file): each file of this folder is a module; a test is named by its file, as
//! `calendar::name`.

mod calendar;
mod scheduler;

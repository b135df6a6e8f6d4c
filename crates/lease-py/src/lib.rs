//! The native half of the Python package `lease` (`lease._lease`): thin bindings over the Rust
//! crates, with no lease rule of their own. The statement's functions call `lease_sqlite`'s
//! seed API, the queue calls any `LeaseStore`, workers run on `lease_worker`'s runtime and the
//! guards are `lease_guard`'s. Every call that waits releases the interpreter (`py.detach`).
//! The typed Python face (`Store`, `AsyncStore`, `Worker`, the exceptions) is in `python/lease`.

// Library and binary code may not unwrap, expect or panic on what it meets, nor export what is
// unreachable (each exception allowed in place with its reason); tests may.
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        unreachable_pub
    )
)]

mod args;
mod errors;
mod guard;
mod open;
mod path_api;
mod run;
mod store;
mod trace;
mod values;
mod worker;

use pyo3::prelude::*;

/// The module `lease._lease`.
#[pymodule]
fn _lease(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    path_api::register(m)?;
    values::register(m)?;
    run::register(m)?;
    store::register(m)?;
    worker::register(m)?;
    guard::register(m)?;
    Ok(())
}

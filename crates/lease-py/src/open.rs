//! Opening a store: a SQLite path, a PostgreSQL URL or a `lease serve` URL with an API key,
//! and the options each takes (an option another kind of store takes is refused by name).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use lease_ports::LeaseStore;
use lease_ports::audit::AuditTrail;
use lease_ports::control::Controlled;

use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::args::Options;
use crate::errors::{Failure, Outcome, invalid, to_py};

/// A store as opened, kept by kind so that its audit trail is reachable too.
#[derive(Clone)]
pub(crate) enum Backend {
    Sqlite(Arc<lease_sqlite::SqliteLeaseStore>),
    Postgres(Arc<lease_postgres::PgLeaseStore>),
    Http(Arc<lease_client::HttpLeaseStore>),
}

impl Backend {
    pub(crate) fn store(&self) -> Arc<dyn LeaseStore> {
        match self {
            Backend::Sqlite(s) => Arc::clone(s) as Arc<dyn LeaseStore>,
            Backend::Postgres(s) => Arc::clone(s) as Arc<dyn LeaseStore>,
            Backend::Http(s) => Arc::clone(s) as Arc<dyn LeaseStore>,
        }
    }

    pub(crate) fn control(&self) -> Arc<dyn Controlled> {
        match self {
            Backend::Sqlite(s) => Arc::clone(s) as Arc<dyn Controlled>,
            Backend::Postgres(s) => Arc::clone(s) as Arc<dyn Controlled>,
            Backend::Http(s) => Arc::clone(s) as Arc<dyn Controlled>,
        }
    }

    /// The database behind the store, or `None` over HTTP.
    pub(crate) fn transfer(&self) -> Option<Arc<dyn lease_ports::transfer::Transfer>> {
        match self {
            Backend::Sqlite(s) => Some(Arc::clone(s) as Arc<dyn lease_ports::transfer::Transfer>),
            Backend::Postgres(s) => Some(Arc::clone(s) as Arc<dyn lease_ports::transfer::Transfer>),
            Backend::Http(_) => None,
        }
    }

    pub(crate) fn audit(&self) -> Arc<dyn AuditTrail> {
        match self {
            Backend::Sqlite(s) => Arc::clone(s) as Arc<dyn AuditTrail>,
            Backend::Postgres(s) => Arc::clone(s) as Arc<dyn AuditTrail>,
            Backend::Http(s) => Arc::clone(s) as Arc<dyn AuditTrail>,
        }
    }
}

/// How a store is opened (the constructor's keyword arguments).
pub(crate) struct Opening {
    api_key: Option<String>,
    create: bool,
    audit: Option<u64>,
    busy_timeout: Option<f64>,
    ca_cert: Option<PathBuf>,
    schema: Option<String>,
}

impl Opening {
    /// The options `lease.Store(target, **options)` was given.
    pub(crate) fn read(py: Python<'_>, options: Option<&Bound<'_, PyDict>>) -> PyResult<Self> {
        let options = Options::new(options)?;
        let how = Self {
            api_key: options.take("api_key")?,
            create: options.need(py, "create")?,
            audit: options.take("audit")?,
            busy_timeout: options.take("busy_timeout")?,
            ca_cert: options.take("ca_cert")?,
            schema: options.take("schema")?,
        };
        to_py(py, options.finish("a store")?)?;
        Ok(how)
    }
}

fn seconds(what: &str, value: f64) -> Outcome<Duration> {
    Duration::try_from_secs_f64(value)
        .or_else(|_| invalid(format!("{what}: must be 0 or more seconds, got {value}")))
}

pub(crate) async fn open(target: String, how: Opening) -> Outcome<Backend> {
    let remote = target.starts_with("http://") || target.starts_with("https://");
    let postgres = target.starts_with("postgres://") || target.starts_with("postgresql://");
    if !remote && how.api_key.is_some() {
        return invalid("api_key: only a lease serve URL (http:// or https://) takes a key");
    }
    if remote {
        if how.create || how.audit.is_some() || how.schema.is_some() {
            return invalid(
                "create, audit and schema are the server's to decide; a lease serve URL takes \
                 api_key and ca_cert",
            );
        }
        let Some(key) = how.api_key else {
            return invalid("api_key: a lease serve URL needs an API key");
        };
        let ca_cert =
            match how.ca_cert {
                Some(path) => Some(std::fs::read(&path).or_else(|e| {
                    invalid(format!("ca_cert: cannot read {}: {e}", path.display()))
                })?),
                None => None,
            };
        let options = lease_client::ClientOptions {
            ca_cert,
            ..lease_client::ClientOptions::default()
        };
        let store = lease_client::HttpLeaseStore::new(&target, &key, options)?;
        return Ok(Backend::Http(Arc::new(store)));
    }
    if how.ca_cert.is_some() {
        return invalid("ca_cert: only a lease serve URL (https://) takes a CA certificate");
    }
    if postgres {
        let mut options = lease_postgres::PgOptions {
            audit: how.audit,
            ..lease_postgres::PgOptions::default()
        };
        if let Some(schema) = how.schema {
            options.schema = schema;
        }
        if let Some(wait) = how.busy_timeout {
            options.wait_timeout = seconds("busy_timeout", wait)?;
        }
        let store = if how.create {
            lease_postgres::PgLeaseStore::init(&target, options).await?
        } else {
            lease_postgres::PgLeaseStore::open(&target, options).await?
        };
        return Ok(Backend::Postgres(Arc::new(store)));
    }
    if how.schema.is_some() {
        return invalid("schema: only a PostgreSQL URL has schemas");
    }
    let mut options = lease_sqlite::SqliteOptions {
        create: how.create,
        audit: how.audit,
        ..lease_sqlite::SqliteOptions::default()
    };
    if let Some(wait) = how.busy_timeout {
        options.busy_timeout = seconds("busy_timeout", wait)?;
    }
    let path = target
        .strip_prefix("sqlite://")
        .unwrap_or(&target)
        .to_owned();
    let store = tokio::task::spawn_blocking(move || {
        lease_sqlite::SqliteLeaseStore::open_with(path, options)
    })
    .await
    .map_err(|e| Failure::Other(format!("opening the store stopped: {e}")))??;
    Ok(Backend::Sqlite(Arc::new(store)))
}

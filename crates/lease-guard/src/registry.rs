//! The registry of value guards: a URL's scheme picks the backend this build has (each behind
//! its feature), for [`open`] and [`install`]. The backends depend on `value.rs` (the trait
//! and its types) and this file on them, so nothing ties back.

use crate::GuardError;
use crate::value::ValueGuard;

/// Opens the guard a URL names, among the backends this build has: `redis://` and
/// `rediss://` (feature `redis`), `s3://`, `gs://`, `az://` (`object-store`), `file:///DIR`
/// (`dir`), `nats://HOST:PORT/BUCKET` (`nats`), `mysql://` and `mariadb://` (`mysql`).
///
/// # Errors
/// [`GuardError::Unsupported`] for a scheme this build has no guard for; the backend's error
/// when it cannot be opened.
pub async fn open(url: &str) -> Result<std::sync::Arc<dyn ValueGuard>, GuardError> {
    use std::sync::Arc;
    let scheme = url.split_once("://").map_or("", |(s, _)| s);
    // `None` for a scheme this build has no guard for (each arm is there only with its
    // feature).
    let guard: Option<Arc<dyn ValueGuard>> = match scheme {
        #[cfg(feature = "redis")]
        "redis" | "rediss" => Some(Arc::new(crate::redis::RedisGuard::connect(url).await?)),
        #[cfg(feature = "object-store")]
        "s3" | "gs" | "az" | "azure" => Some(Arc::new(crate::object::ObjectGuard::open(url)?)),
        #[cfg(feature = "dir")]
        "file" => {
            let dir = url.strip_prefix("file://").unwrap_or_default();
            if !dir.starts_with('/') {
                return Err(GuardError::Unsupported(format!(
                    "{url}: a directory's URL is file:///ABSOLUTE/PATH"
                )));
            }
            Some(Arc::new(crate::dir::DirGuard::open(dir)?))
        }
        #[cfg(feature = "nats")]
        "nats" => Some(Arc::new(crate::nats::NatsGuard::connect(url).await?)),
        #[cfg(feature = "mysql")]
        "mysql" | "mariadb" => Some(Arc::new(crate::mysql::MysqlGuard::connect(url)?)),
        _ => None,
    };
    let guard = guard.ok_or_else(|| {
        GuardError::Unsupported(format!(
            "{url}: not a resource this build guards (redis://, rediss://, s3://, gs://, az://, \
             file:///, nats://, mysql://, mariadb://)"
        ))
    })?;
    Ok(Arc::new(crate::value::Traced(guard)))
}

/// What [`install`] did at a resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Installed {
    /// Whether anything was made or upgraded (`false`: it was there already, or the resource
    /// needs nothing).
    pub made: bool,
    /// What the resource needs, in words (`the lease function library`, ...).
    pub what: &'static str,
}

/// Prepares the resource a URL names for guarded writes, idempotently: loads (or upgrades)
/// the Redis function library, creates the NATS key-value bucket, creates MariaDB's tables and
/// the procedure `lease_admit_fence`; an object store and a directory keep the fence with each
/// value and need nothing (the URL is still opened, so a bad one is an error).
///
/// # Errors
/// As [`open`], and the resource's error when it cannot be prepared.
pub async fn install(url: &str) -> Result<Installed, GuardError> {
    let scheme = url.split_once("://").map_or("", |(s, _)| s);
    let (made, what) = match scheme {
        #[cfg(feature = "redis")]
        "redis" | "rediss" => {
            let guard = crate::redis::RedisGuard::connect(url).await?;
            (guard.install().await?, "the lease function library")
        }
        #[cfg(feature = "nats")]
        "nats" => (
            crate::nats::NatsGuard::install(url).await?,
            "the key-value bucket",
        ),
        #[cfg(feature = "mysql")]
        "mysql" | "mariadb" => (
            crate::mysql::install(url).await?,
            "the tables and the procedure lease_admit_fence",
        ),
        _ => {
            open(url).await?;
            (false, "nothing (the fence is kept with each value)")
        }
    };
    Ok(Installed { made, what })
}

//! `lease guard`: a guarded resource opened from its URL, and its install, put, get and delete
//! as reports (exit 0 admitted, 3 refused or absent, 1 any other error).

use crate::args::{BATCH_INPUT_LIMIT, ReadInput, RequestError, duration_flag};
use lease_domain::Fence;

use std::sync::Arc;

use lease_guard::GuardError;
use lease_guard::value::ValueGuard;
use serde_json::{Value, json};

use crate::render::{Report, payload_json};
use std::path::PathBuf;

/// The guard behind a URL.
///
/// # Errors
/// A message naming the URL when no guard takes it or it cannot be opened.
async fn open(url: &str) -> Result<Arc<dyn ValueGuard>, String> {
    lease_guard::open(url)
        .await
        .map_err(|e| format!("{url}: {e}"))
}

/// Runs a `lease guard` command.
///
/// # Errors
/// The resource's error, as text.
pub(crate) async fn run(request: GuardRequest) -> Result<Report, String> {
    match request {
        GuardRequest::Install(url) => install(&url).await,
        GuardRequest::Put {
            url,
            key,
            value,
            fence,
            options,
        } => {
            let guard = open(&url).await?;
            let outcome = guard
                .put(&key, &value, fence, &options)
                .await
                .map_err(|e| format!("{url}: {e}"))?;
            Ok(admission(outcome, &format!("wrote {key}"), fence))
        }
        GuardRequest::Delete(url, key, fence, job) => {
            let guard = open(&url).await?;
            let outcome = guard
                .delete(&key, fence)
                .await
                .map_err(|e| format!("{url}: {e}"))?;
            let done = match job {
                Some(job) => format!("deleted {key} for job {job}"),
                None => format!("deleted {key}"),
            };
            Ok(admission(outcome, &done, fence))
        }
        GuardRequest::Get(url, key) => {
            let guard = open(&url).await?;
            let found = guard.get(&key).await.map_err(|e| format!("{url}: {e}"))?;
            let mut object = serde_json::Map::new();
            object.insert("key".into(), json!(key.as_str()));
            Ok(match found {
                Some(guarded) => {
                    object.insert("fence".into(), json!(guarded.fence.get()));
                    payload_json(Some(&guarded.value), &mut object);
                    // payload_json names the fields for a job's payload; a value is a value.
                    for (from, to) in [("payload", "value"), ("payload_base64", "value_base64")] {
                        if let Some(v) = object.remove(from) {
                            object.insert(to.into(), v);
                        }
                    }
                    object.retain(|k, v| !(k == "value" && v.is_null()));
                    Report::raw(Value::Object(object), guarded.value)
                }
                None => {
                    object.insert("fence".into(), Value::Null);
                    object.insert("value".into(), Value::Null);
                    Report::new(false, Value::Object(object), format!("no value at {key}"))
                }
            })
        }
    }
}

fn admission(outcome: lease_guard::Admission, done: &str, fence: lease_guard::Fence) -> Report {
    match outcome {
        Ok(()) => Report::new(
            true,
            json!({"ok": true, "fence": fence.get()}),
            format!("{done} under fence {fence}"),
        ),
        Err(refused) => {
            let why = refused.to_string();
            Report::new(
                false,
                json!({
                    "ok": false,
                    "reason": "stale",
                    "presented": refused.presented.get(),
                    "current": refused.current.get(),
                }),
                format!("refused: {why}"),
            )
            .refused_with(Some(why))
        }
    }
}

async fn install(url: &str) -> Result<Report, String> {
    let installed = lease_guard::install(url)
        .await
        .map_err(|e: GuardError| format!("{url}: {e}"))?;
    let what = installed.what;
    Ok(Report::new(
        true,
        json!({"ok": true, "installed": installed.made}),
        if installed.made {
            format!("installed {what} at {url}")
        } else {
            format!("{url} needs {what} and has it already")
        },
    ))
}

/// The arguments of `lease guard`.
#[derive(Debug, clap::Args)]
pub(crate) struct GuardArgs {
    /// What to do.
    #[command(subcommand)]
    pub(crate) command: GuardCommand,
}

impl GuardArgs {
    /// The checked request.
    ///
    /// # Errors
    /// The first bad value, named.
    pub(crate) fn request(self, read: ReadInput<'_>) -> Result<GuardRequest, RequestError> {
        let GuardArgs { command } = self;
        guard_request(command, read)
    }
}

/// Checks a `lease guard` command; the value comes from --value, --file or standard input.
pub(crate) fn guard_request(
    command: GuardCommand,
    read: ReadInput<'_>,
) -> Result<GuardRequest, RequestError> {
    use lease_guard::value::{GuardKey, PutOptions};
    let key = |key: String| GuardKey::new(key).map_err(|e| RequestError::Flag(format!("KEY: {e}")));
    let fence = |fence: u64| {
        Fence::new(fence).map_err(|e| RequestError::Flag(format!("--fence (or LEASE_FENCE): {e}")))
    };
    Ok(match command {
        GuardCommand::Install { url } => GuardRequest::Install(url),
        GuardCommand::Put {
            url,
            key: k,
            value,
            file,
            job,
            fence: f,
            expiry,
        } => {
            let key = key(k)?;
            let fence = fence(f)?;
            let expiry = expiry
                .map(|seconds| {
                    duration_flag("--expiry", seconds)
                        .and_then(|d| {
                            if d.is_zero() {
                                Err("--expiry must be more than 0 seconds".to_owned())
                            } else {
                                Ok(d)
                            }
                        })
                        .map_err(RequestError::Flag)
                })
                .transpose()?;
            let value = match (value, file) {
                (Some(text), _) => text.into_bytes(),
                (None, path) => read(
                    path.as_deref().unwrap_or(std::path::Path::new("-")),
                    BATCH_INPUT_LIMIT,
                )
                .map_err(RequestError::Read)?,
            };
            GuardRequest::Put {
                url,
                key,
                value,
                fence,
                options: PutOptions { job, expiry },
            }
        }
        GuardCommand::Get { url, key: k } => GuardRequest::Get(url, key(k)?),
        GuardCommand::Delete {
            url,
            key: k,
            job,
            fence: f,
        } => GuardRequest::Delete(url, key(k)?, fence(f)?, job),
    })
}

/// The `lease guard` commands. URLs: `redis://HOST:PORT[/DB]` (`rediss://`),
/// `s3://BUCKET[/PREFIX]` (with `AWS_*`; `AWS_ENDPOINT_URL` for a compatible server),
/// `gs://BUCKET[/PREFIX]`, `az://CONTAINER[/PREFIX]`, `file:///DIR`,
/// `nats://HOST:PORT/BUCKET`, `mysql://USER[:PASSWORD]@HOST:PORT/DATABASE` (`mariadb://`).
#[derive(Debug, clap::Subcommand)]
pub(crate) enum GuardCommand {
    /// Set a resource up for guarded writes: load the Redis function library, make the NATS
    /// bucket, or the MariaDB tables and procedure. Idempotent; upgrades an older version.
    Install {
        /// The resource.
        url: String,
    },
    /// Write VALUE at KEY under the holder's fence; refused (exit 3) when a newer holder wrote
    /// there. The value is --value, --file, or standard input.
    Put {
        /// The resource.
        url: String,
        /// The key (a Redis key, an object's path under the prefix, a file's path in the
        /// directory, a NATS key).
        key: String,
        /// The value, as text.
        #[arg(long, conflicts_with = "file")]
        value: Option<String>,
        /// Read the value from this file (`-` for standard input, also the default).
        #[arg(long)]
        file: Option<PathBuf>,
        /// The holder's job (recorded with the value where the resource keeps metadata).
        #[arg(long, env = "LEASE_JOB")]
        job: Option<String>,
        /// The holder's fence (`lease work` gives each program LEASE_FENCE).
        #[arg(long, env = "LEASE_FENCE")]
        fence: u64,
        /// Seconds the value lives (Redis only; the fence never expires).
        #[arg(long, value_name = "SECONDS")]
        expiry: Option<f64>,
    },
    /// Print the value at KEY (with --json, also its fence); exit 3 when there is none.
    Get {
        /// The resource.
        url: String,
        /// The key.
        key: String,
    },
    /// Delete the value at KEY under the holder's fence (the fence stays: an older holder is
    /// still refused).
    Delete {
        /// The resource.
        url: String,
        /// The key.
        key: String,
        /// The holder's job, as `put` takes it (a delete leaves no value to record it with;
        /// it is named in the answer).
        #[arg(long, env = "LEASE_JOB")]
        job: Option<String>,
        /// The holder's fence (`lease work` gives each program LEASE_FENCE).
        #[arg(long, env = "LEASE_FENCE")]
        fence: u64,
    },
}

/// A `lease guard` command, checked.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum GuardRequest {
    /// Set the resource up.
    Install(String),
    /// Write a value under a fence.
    Put {
        /// The resource.
        url: String,
        /// The key.
        key: lease_guard::value::GuardKey,
        /// The value.
        value: Vec<u8>,
        /// The fence.
        fence: Fence,
        /// The job and the expiry.
        options: lease_guard::value::PutOptions,
    },
    /// Read a value.
    Get(String, lease_guard::value::GuardKey),
    /// Delete a value under a fence, for a job if named.
    Delete(String, lease_guard::value::GuardKey, Fence, Option<String>),
}

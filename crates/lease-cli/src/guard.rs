//! `lease guard`: a guarded resource opened from its URL, and its install, put, get and delete
//! as reports (exit 0 admitted, 3 refused or absent, 1 any other error).

use crate::cli::{
    BATCH_INPUT_LIMIT, GuardCommand, ReadInput, Request, RequestError, duration_flag,
};
use lease_domain::Fence;

use std::sync::Arc;

use lease_guard::GuardError;
use lease_guard::value::ValueGuard;
use serde_json::{Value, json};

use crate::cli::GuardRequest;
use crate::render::{Report, payload_json};

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
    pub(crate) fn request(self, read: ReadInput<'_>) -> Result<Request, RequestError> {
        let GuardArgs { command } = self;
        Ok(Request::Guard(guard_request(command, read)?))
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

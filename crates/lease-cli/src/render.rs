//! What a command answers, rendered: the JSON value and the human text of each report (user
//! strings with their control characters escaped), the exit code, the Prometheus text of
//! `stats`.

use lease_domain::{ClaimRefused, Fence, JobId, Owner, Status, Timestamp, WriteRefused};
use lease_ports::{JobRecord, JobState, Lease, WriteOutcome};
use serde_json::{Value, json};

use crate::when;

/// Exit code: the operation was accepted (or was a read).
pub(crate) const EXIT_OK: u8 = 0;

/// Exit code: any error other than a usage error.
pub(crate) const EXIT_ERROR: u8 = 1;

/// Exit code: the lease rules refused the operation.
pub(crate) const EXIT_REFUSED: u8 = 3;

/// What a command answered: whether the lease rules accepted it, and its two renderings.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Report {
    /// `false` when the lease rules refused the operation.
    pub accepted: bool,
    /// The one JSON value printed with `--json`.
    pub json: Value,
    /// The sentence printed otherwise.
    pub human: String,
    /// How `human` is printed.
    pub layout: Layout,
    /// Printed on stderr (the reason a queue command was refused).
    pub note: Option<String>,
}

impl Report {
    /// A one-sentence report.
    pub(crate) fn new(accepted: bool, json: Value, human: String) -> Self {
        Self {
            accepted,
            json,
            human,
            layout: Layout::Sentence,
            note: None,
        }
    }

    /// A report printed as lines (a table): each line is escaped on its own, so a newline in
    /// a value is shown as `\n` and cannot start a line of its own.
    pub(crate) fn lines(accepted: bool, json: Value, lines: Vec<String>, empty: &str) -> Self {
        let lines = if lines.is_empty() {
            vec![empty.to_owned()]
        } else {
            lines
        };
        Self {
            human: lines.join("\n"),
            layout: Layout::Lines(lines),
            ..Self::new(accepted, json, String::new())
        }
    }

    /// A report printed exactly as it is (text in a format of its own, such as Prometheus
    /// exposition, which escapes values its own way).
    pub(crate) fn verbatim(json: Value, text: String) -> Self {
        Self {
            layout: Layout::Verbatim,
            ..Self::new(true, json, text)
        }
    }

    /// A report whose human form is `bytes` exactly (a guarded value, which may not be text).
    pub(crate) fn raw(json: Value, bytes: Vec<u8>) -> Self {
        Self {
            layout: Layout::Bytes(bytes),
            ..Self::new(true, json, String::new())
        }
    }

    /// A report whose refusal reason also goes to stderr.
    pub(crate) fn refused_with(mut self, reason: Option<String>) -> Self {
        self.note = reason.map(|r| format!("lease: refused: {r}\n"));
        self
    }
}

/// How a report's human text is printed.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Layout {
    /// One sentence: every control character in it (newlines included) is escaped.
    Sentence,
    /// Lines, each escaped on its own.
    Lines(Vec<String>),
    /// As it is.
    Verbatim,
    /// Bytes, as they are (not text).
    Bytes(Vec<u8>),
}

/// Escapes control characters (ESC, BEL, CR, newline, ...) so that a job id, owner or result
/// cannot drive the terminal or forge a line of output; `--json` output is escaped by JSON.
pub(crate) fn escape_controls(text: &str) -> String {
    let mut shown = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() {
            shown.extend(c.escape_default());
        } else {
            shown.push(c);
        }
    }
    shown
}

/// What the process prints and how it exits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Response {
    /// Printed on stdout.
    pub stdout: String,
    /// Printed on stdout instead of `stdout`, byte for byte (a value that may not be text).
    pub raw: Option<Vec<u8>>,
    /// Printed on stderr.
    pub stderr: String,
    /// The exit code.
    pub code: u8,
}

/// Turns a report or an error into output and an exit code: 0 accepted, 3 refused, 1 error
/// (one line on stderr and nothing on stdout).
pub(crate) fn respond(outcome: Result<Report, String>, json: bool) -> Response {
    match outcome {
        Ok(report) => Response {
            stdout: match (json, &report.layout) {
                (true, _) => format!("{}\n", report.json),
                (false, Layout::Lines(lines)) => {
                    let lines: Vec<String> = lines.iter().map(|l| escape_controls(l)).collect();
                    format!("{}\n", lines.join("\n"))
                }
                (false, Layout::Verbatim) => report.human.clone(),
                (false, Layout::Bytes(_)) => String::new(),
                (false, Layout::Sentence) => format!("{}\n", escape_controls(&report.human)),
            },
            stderr: report
                .note
                .as_deref()
                .map(escape_controls_but_newline)
                .unwrap_or_default(),
            raw: match (json, &report.layout) {
                (false, Layout::Bytes(bytes)) => Some(bytes.clone()),
                _ => None,
            },
            code: if report.accepted {
                EXIT_OK
            } else {
                EXIT_REFUSED
            },
        },
        Err(message) => Response {
            stdout: String::new(),
            raw: None,
            stderr: format!(
                "lease: error: {}\n",
                escape_controls(&message.replace('\n', " "))
            ),
            code: EXIT_ERROR,
        },
    }
}

pub(crate) fn escape_controls_but_newline(text: &str) -> String {
    let lines: Vec<String> = text.split('\n').map(escape_controls).collect();
    lines.join("\n")
}

/// A payload as JSON: `payload` when it is UTF-8 text, else `payload_base64`; a sealed one
/// (docs/ENCRYPTION.md) as `payload_encrypted: {"key": NAME}` and `payload: null`, never its
/// bytes.
pub(crate) fn payload_json(payload: Option<&[u8]>, into: &mut serde_json::Map<String, Value>) {
    use base64::Engine;
    if let Some(sealed) = payload.and_then(lease_domain::sealed_payload) {
        into.insert("payload".into(), Value::Null);
        into.insert("payload_encrypted".into(), json!({ "key": sealed.key }));
        return;
    }
    match payload.map(std::str::from_utf8) {
        None => {
            into.insert("payload".into(), Value::Null);
        }
        Some(Ok(text)) => {
            into.insert("payload".into(), json!(text));
        }
        Some(Err(_)) => {
            let bytes = payload.unwrap_or_default();
            into.insert("payload".into(), Value::Null);
            into.insert(
                "payload_base64".into(),
                json!(base64::engine::general_purpose::STANDARD.encode(bytes)),
            );
        }
    }
}

/// A job as JSON: as the API shows it (`lease_server::views::job_json`), with the status
/// judged at `now`.
pub(crate) fn record_json(record: &JobRecord, now: Timestamp) -> Value {
    lease_server::views::job_json(record, now)
}

/// How each parent of a job stands, as `state --json` shows it: `{id: {"status", "result",
/// "result_fence"}}` (a parent purged since counts as done, its result gone: `null`).
pub(crate) fn parents_json(parents: &[lease_ports::ParentState]) -> Value {
    let mut object = serde_json::Map::new();
    for parent in parents {
        object.insert(
            parent.id.as_str().to_owned(),
            json!({
                "status": parent.status.as_str(),
                "result": parent.result,
                "result_fence": parent.result_fence.map(Fence::get),
            }),
        );
    }
    Value::Object(object)
}

/// The checkpoints a job keeps, as `state --json` and `LEASE_CHECKPOINTS_FILE` show them:
/// `{name: value}`.
pub(crate) fn checkpoints_json(kept: &[lease_domain::KeptCheckpoint]) -> Value {
    Value::Object(
        kept.iter()
            .map(|c| (c.name.as_str().to_owned(), json!(c.value.as_str())))
            .collect(),
    )
}

pub(crate) fn lease_json(lease: &Lease) -> Value {
    let mut object = serde_json::Map::new();
    object.extend([
        ("id".to_owned(), json!(lease.job.as_str())),
        ("fence".to_owned(), json!(lease.fence.get())),
        ("until".to_owned(), json!(lease.until.get())),
        ("attempt".to_owned(), json!(lease.attempt)),
        (
            "timeout".to_owned(),
            json!(lease.timeout.map(lease_domain::Ttl::get)),
        ),
        (
            "group".to_owned(),
            json!(lease.group.as_ref().map(lease_domain::GroupKey::as_str)),
        ),
    ]);
    let payload = lease.payload.as_deref();
    match payload.map(|bytes| (bytes, lease_domain::payload_envelope(bytes))) {
        Some((bytes, lease_domain::Envelope::Sealed(sealed))) => {
            leased_sealed_json(lease, bytes, sealed.key, &mut object);
        }
        // A plain payload as it is, unless the environment requires sealed ones; a malformed
        // envelope never: then `payload_error` says why.
        Some((bytes, _)) => match lease_seal::require_sealed_from_env()
            .and_then(|require| lease_seal::open_payload(None, require, lease.job.as_str(), bytes))
        {
            Ok(plain) => payload_json(Some(&plain), &mut object),
            Err(e) => {
                object.insert("payload".into(), Value::Null);
                object.insert("payload_error".into(), json!(e.to_string()));
            }
        },
        None => payload_json(payload, &mut object),
    }
    Value::Object(object)
}

/// A leased job's sealed payload (docs/ENCRYPTION.md), for its holder: opened with the keys of
/// the environment when it gives them (`payload` or `payload_base64` as for a plain one), else
/// its sealed bytes in `payload_base64` and, when it does not open, `payload_error` saying why;
/// `payload_encrypted` names its key either way.
fn leased_sealed_json(
    lease: &Lease,
    sealed: &[u8],
    key: &str,
    into: &mut serde_json::Map<String, Value>,
) {
    use base64::Engine;
    let opened = lease_seal::Keyring::from_env().and_then(|keys| {
        lease_seal::open_payload(keys.as_ref(), false, lease.job.as_str(), sealed)
    });
    match opened {
        Ok(plain) => payload_json(Some(&plain), into),
        Err(e) => {
            into.insert("payload".into(), Value::Null);
            into.insert(
                "payload_base64".into(),
                json!(base64::engine::general_purpose::STANDARD.encode(sealed)),
            );
            into.insert("payload_error".into(), json!(e.to_string()));
        }
    }
    into.insert("payload_encrypted".into(), json!({ "key": key }));
}

/// `list`'s table: a header and one row per job (id, queue, group, status, fence, attempts, when it
/// is due or its lease ends, seen from `now`, and the error if any), each column as wide as
/// its widest value, so every value stands under its heading whatever its length.
pub(crate) fn record_table(records: &[JobRecord], now: Timestamp) -> Vec<String> {
    let header = [
        "ID", "QUEUE", "GROUP", "STATUS", "FENCE", "ATTEMPTS", "WHEN", "ERROR",
    ]
    .map(str::to_owned);
    let rows = records.iter().map(|record| {
        let j = &record.job;
        let status = j.status_at(now);
        let moment = match status {
            Status::Running => format!("until {}", when::shown(j.until.get(), now.get())),
            Status::Pending => match j.run_at {
                Some(at) if at > now => format!("due {}", when::shown(at.get(), now.get())),
                _ => "due now".to_owned(),
            },
            Status::Waiting => match j.after.len() {
                1 => "after 1 job".to_owned(),
                n => format!("after {n} jobs"),
            },
            Status::Done | Status::Dead | Status::Cancelled => String::new(),
        };
        [
            record.id.to_string(),
            j.queue.to_string(),
            j.group
                .as_ref()
                .map(ToString::to_string)
                .unwrap_or_default(),
            status.as_str().to_owned(),
            j.fence.to_string(),
            format!("{}/{}", j.attempts, j.max_attempts.max(1)),
            moment,
            j.error
                .as_ref()
                .map(|e| format!("{e:?}"))
                .unwrap_or_default(),
        ]
    });
    table(std::iter::once(header).chain(rows).collect())
}

/// Rows of cells as aligned lines: each cell escaped as human output is (so its width is the
/// width shown) and padded to its column's widest cell, the last column unpadded, trailing
/// spaces trimmed.
pub(crate) fn table<const N: usize>(rows: Vec<[String; N]>) -> Vec<String> {
    let rows: Vec<[String; N]> = rows
        .into_iter()
        .map(|row| row.map(|cell| escape_controls(&cell)))
        .collect();
    let mut widths = [0usize; N];
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    rows.iter()
        .map(|row| {
            let mut line = String::new();
            for (n, (cell, width)) in row.iter().zip(widths).enumerate() {
                if n > 0 {
                    line.push(' ');
                }
                line.push_str(cell);
                if n + 1 < N {
                    line.extend(std::iter::repeat_n(' ', width - cell.chars().count()));
                }
            }
            line.trim_end().to_owned()
        })
        .collect()
}

/// A job's stored row as a sentence; times as a person reads them, seen from `now`.
pub(crate) fn state_sentence(id: &JobId, state: Option<&JobState>, now: Timestamp) -> String {
    let Some(s) = state else {
        return format!("job {id} does not exist");
    };
    let holder = match &s.owner {
        Some(owner) => format!("held by {owner} until {}", when::shown(s.until, now.get())),
        None => "not held".to_owned(),
    };
    let done = match (&s.result, s.done) {
        (Some(result), true) => format!("done with result {result:?}"),
        (None, true) => "done".to_owned(),
        (_, false) => "not done".to_owned(),
    };
    format!("job {id}: {holder}, fence {}, {done}", s.fence)
}

pub(crate) fn write_report(
    outcome: WriteOutcome,
    verb: &str,
    id: &JobId,
    owner: &Owner,
    fence: Fence,
) -> Report {
    match outcome {
        Ok(()) => Report::new(
            true,
            json!({"ok": true}),
            format!("{verb} job {id} as {owner} with fence {fence}"),
        ),
        Err(refused) => Report::new(
            false,
            json!({"ok": false}),
            format!("not {verb}: {}", write_refusal(&refused)),
        ),
    }
}

pub(crate) fn queue_write_report(outcome: WriteOutcome, verb: &str, id: &JobId) -> Report {
    match outcome {
        Ok(()) => Report::new(true, json!({"ok": true}), format!("{verb} job {id}")),
        Err(refused) => {
            let why = write_refusal(&refused);
            Report::new(false, json!({"ok": false}), format!("not {verb}: {why}"))
                .refused_with(Some(why))
        }
    }
}

/// Why a claim was refused, with its times as a person reads them, seen from `now`.
pub(crate) fn claim_refusal(refused: &ClaimRefused, now: Timestamp) -> String {
    match refused {
        ClaimRefused::NotDue { run_at } => {
            format!(
                "the job is not due until {}",
                when::shown(run_at.get(), now.get())
            )
        }
        ClaimRefused::Live { owner, until } => format!(
            "the job is leased{} until {}",
            owner
                .as_ref()
                .map(|o| format!(" to {o}"))
                .unwrap_or_default(),
            when::shown(until.get(), now.get())
        ),
        other => other.to_string(),
    }
}

/// Why a write was refused, with its times as a person reads them.
pub(crate) fn write_refusal(refused: &WriteRefused) -> String {
    match refused {
        WriteRefused::Expired { until, now } => format!(
            "the lease expired at {} ({})",
            when::calendar(until.get()),
            when::distance(until.get() - now.get())
        ),
        other => other.to_string(),
    }
}

/// Runs one request that needs a store (everything but `init` and `demo`, which `main` handles).
///
/// A Prometheus label value: backslash, double quote and newline escaped.
pub(crate) fn label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Job counts in the Prometheus text format (every status of every queue, zeros included),
/// then the flow control of every queue that has settings: `lease_queue_paused` (1 while
/// paused at `now`, else 0), `lease_queue_concurrency_limit`, `lease_queue_timeout_seconds`
/// and `lease_queue_per_group_limit` (each only for a queue that has one),
/// `lease_queue_ordered` (1 or 0), `lease_queue_paused_groups`, `lease_queue_throttled` (1
/// while its rate lets no lease be granted) and `lease_queue_throttled_groups`.
pub(crate) fn prometheus(
    rows: &[lease_ports::StatsRow],
    settings: &[(
        lease_domain::QueueName,
        lease_domain::QueueSettings,
        lease_domain::Throttle,
    )],
    now: lease_domain::Timestamp,
) -> String {
    let mut out =
        String::from("# HELP lease_jobs Jobs per queue and status.\n# TYPE lease_jobs gauge\n");
    let queues: std::collections::BTreeSet<&str> = rows.iter().map(|r| r.queue.as_str()).collect();
    for queue in queues {
        for status in Status::ALL {
            let count = rows
                .iter()
                .find(|r| r.queue.as_str() == queue && r.status == status)
                .map_or(0, |r| r.count);
            out.push_str(&format!(
                "lease_jobs{{queue=\"{}\",status=\"{}\"}} {count}\n",
                label(queue),
                status.as_str()
            ));
        }
    }
    if settings.is_empty() {
        return out;
    }
    let gauges: Vec<_> = settings
        .iter()
        .map(|(queue, set, throttle)| {
            (
                queue,
                lease_ports::observe::queue_gauges(set, throttle, now),
            )
        })
        .collect();
    let named = lease_ports::observe::queue_gauges(
        &lease_domain::QueueSettings::default(),
        &lease_domain::Throttle::default(),
        now,
    );
    for (i, (name, help, _)) in named.into_iter().enumerate() {
        out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} gauge\n"));
        for (queue, values) in &gauges {
            if let Some((_, _, Some(value))) = values.get(i) {
                out.push_str(&format!(
                    "{name}{{queue=\"{}\"}} {value}\n",
                    label(queue.as_str())
                ));
            }
        }
    }
    out
}

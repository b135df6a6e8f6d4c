//! Runs a checked request against any [`LeaseStore`] and renders the answer as JSON and prose.

use lease_domain::{Fence, JobId, Owner, Status, Timestamp};
use lease_ports::{JobRecord, JobState, Lease, LeaseStore, StoreError, WriteOutcome};
use serde_json::{Value, json};

use crate::cli::Request;

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
    /// Whether `human` is several lines (the demo, tables); otherwise a newline in it came from
    /// a value and is escaped like any other control character.
    pub multiline: bool,
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
            multiline: false,
            note: None,
        }
    }

    /// A report whose refusal reason also goes to stderr.
    fn refused_with(mut self, reason: Option<String>) -> Self {
        self.note = reason.map(|r| format!("lease: refused: {r}\n"));
        self
    }
}

/// Escapes control characters (ESC, BEL, CR, newline, ...) so that a job id, owner or result
/// cannot drive the terminal or forge a line of output; `--json` output is escaped by JSON.
fn escape_controls(text: &str) -> String {
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
            stdout: if json {
                format!("{}\n", report.json)
            } else if report.multiline {
                let lines: Vec<String> = report.human.lines().map(escape_controls).collect();
                format!("{}\n", lines.join("\n"))
            } else {
                format!("{}\n", escape_controls(&report.human))
            },
            stderr: report
                .note
                .as_deref()
                .map(escape_controls_but_newline)
                .unwrap_or_default(),
            code: if report.accepted {
                EXIT_OK
            } else {
                EXIT_REFUSED
            },
        },
        Err(message) => Response {
            stdout: String::new(),
            stderr: format!(
                "lease: error: {}\n",
                escape_controls(&message.replace('\n', " "))
            ),
            code: EXIT_ERROR,
        },
    }
}

fn escape_controls_but_newline(text: &str) -> String {
    let lines: Vec<String> = text.split('\n').map(escape_controls).collect();
    lines.join("\n")
}

/// A payload as JSON: `payload` when it is UTF-8 text, else `payload_base64`.
fn payload_json(payload: Option<&[u8]>, into: &mut serde_json::Map<String, Value>) {
    use base64::Engine;
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

/// A job as JSON: the seed's six keys, then the queue's, with the status judged at `now`.
fn record_json(record: &JobRecord, now: Timestamp) -> Value {
    let j = &record.job;
    let mut object = serde_json::Map::new();
    if let Value::Object(seed) = state_json(Some(&record.state())) {
        object.extend(seed);
    }
    object.extend([
        ("queue".to_owned(), json!(j.queue.as_str())),
        ("priority".to_owned(), json!(j.priority)),
        ("run_at".to_owned(), json!(j.run_at.map(Timestamp::get))),
        ("attempts".to_owned(), json!(j.attempts)),
        ("max_attempts".to_owned(), json!(j.max_attempts)),
        ("status".to_owned(), json!(j.status_at(now).as_str())),
        (
            "result_fence".to_owned(),
            json!(j.result_fence.map(Fence::get)),
        ),
        ("error".to_owned(), json!(j.error)),
    ]);
    payload_json(j.payload.as_deref(), &mut object);
    Value::Object(object)
}

fn lease_json(lease: &Lease) -> Value {
    let mut object = serde_json::Map::new();
    object.extend([
        ("id".to_owned(), json!(lease.job.as_str())),
        ("fence".to_owned(), json!(lease.fence.get())),
        ("until".to_owned(), json!(lease.until.get())),
        ("attempt".to_owned(), json!(lease.attempt)),
    ]);
    payload_json(lease.payload.as_deref(), &mut object);
    Value::Object(object)
}

/// One line of `list`: id, queue, status, fence, attempts, and the error if any.
fn record_line(record: &JobRecord, now: Timestamp) -> String {
    let j = &record.job;
    let mut line = format!(
        "{:<24} {:<12} {:<9} fence {:<4} attempts {}/{}",
        record.id,
        j.queue,
        j.status_at(now).as_str(),
        j.fence,
        j.attempts,
        j.max_attempts.max(1)
    );
    if let Some(error) = &j.error {
        line.push_str(&format!(" error {error:?}"));
    }
    line
}

fn state_json(state: Option<&JobState>) -> Value {
    state.map_or(Value::Null, |s| {
        json!({
            "id": s.id,
            "owner": s.owner,
            "until": s.until,
            "fence": s.fence,
            "result": s.result,
            "done": s.done,
        })
    })
}

fn state_sentence(id: &JobId, state: Option<&JobState>) -> String {
    let Some(s) = state else {
        return format!("job {id} does not exist");
    };
    let holder = match &s.owner {
        Some(owner) => format!("held by {owner} until {}", s.until),
        None => "not held".to_owned(),
    };
    let done = match (&s.result, s.done) {
        (Some(result), true) => format!("done with result {result:?}"),
        (None, true) => "done".to_owned(),
        (_, false) => "not done".to_owned(),
    };
    format!("job {id}: {holder}, fence {}, {done}", s.fence)
}

fn write_report(
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
            format!("not {verb}: {refused}"),
        ),
    }
}

fn queue_write_report(outcome: WriteOutcome, verb: &str, id: &JobId) -> Report {
    match outcome {
        Ok(()) => Report::new(true, json!({"ok": true}), format!("{verb} job {id}")),
        Err(refused) => Report::new(
            false,
            json!({"ok": false}),
            format!("not {verb}: {refused}"),
        )
        .refused_with(Some(refused.to_string())),
    }
}

/// Runs one request that needs a store (everything but `init` and `demo`, which `main` handles).
///
/// A Prometheus label value: backslash, double quote and newline escaped.
fn label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Job counts in the Prometheus text format (every status of every queue, zeros included).
pub(crate) fn prometheus(rows: &[lease_ports::StatsRow]) -> String {
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
    out
}

/// The stored `until` of a lease just granted or renewed (in store-clock mode it is the
/// store's, not the caller's `now + ttl`); `None` if the lease has moved on meanwhile or the
/// read failed (the write itself stands).
async fn stored_until(store: &dyn LeaseStore, id: &JobId, fence: Fence) -> Option<Timestamp> {
    match store.record(id).await {
        Ok(Some(record)) if record.job.fence == fence => Some(record.job.until),
        _ => None,
    }
}

/// # Errors
/// The store's error; nothing is printed here.
pub(crate) async fn execute(
    request: &Request,
    store: &dyn LeaseStore,
) -> Result<Report, StoreError> {
    Ok(match request {
        Request::Init
        | Request::Demo
        | Request::Work(_)
        | Request::Migrate { .. }
        | Request::Audit(_) => {
            return Err(StoreError::Unavailable(
                "init, demo and work are run by main".to_owned().into(),
            ));
        }
        Request::Enqueue(id, spec) => {
            let inserted = store.enqueue_with(id, spec).await?;
            let human = if inserted {
                format!("enqueued job {id}")
            } else {
                format!("job {id} already exists; nothing changed")
            };
            Report::new(true, json!({"inserted": inserted}), human)
        }
        Request::State(id, now) => {
            let record = store.record(id).await?;
            let state = record.as_ref().map(JobRecord::state);
            let mut human = state_sentence(id, state.as_ref());
            if let Some(record) = &record {
                let j = &record.job;
                human.push_str(&format!(
                    "; {} in queue {}, attempts {}/{}",
                    j.status_at(*now),
                    j.queue,
                    j.attempts,
                    j.max_attempts.max(1)
                ));
                if let Some(error) = &j.error {
                    human.push_str(&format!(", last error {error:?}"));
                }
            }
            Report::new(
                true,
                record.map_or(Value::Null, |r| record_json(&r, *now)),
                human,
            )
        }
        Request::ClaimNext(queue, owner, term, limit) => {
            let leases = store.claim_next(queue, owner, *term, *limit).await?;
            let human = if leases.is_empty() {
                format!("no due job in queue {queue}")
            } else {
                let taken: Vec<String> = leases
                    .iter()
                    .map(|l| format!("{} (fence {}, attempt {})", l.job, l.fence, l.attempt))
                    .collect();
                format!(
                    "leased to {owner} until {}: {}",
                    term.until(),
                    taken.join(", ")
                )
            };
            let json = json!({"leases": leases.iter().map(lease_json).collect::<Vec<_>>()});
            Report::new(!leases.is_empty(), json, human)
        }
        Request::Fail(id, owner, fence, now, error, retry) => {
            match store.fail(id, owner, *fence, *now, error, *retry).await? {
                Ok(failed) => {
                    let run_at = failed.run_at.map(Timestamp::get);
                    let human = match failed.run_at {
                        Some(at) => format!("job {id} failed; it will be retried at {at}"),
                        None => format!("job {id} failed and is dead"),
                    };
                    Report::new(
                        true,
                        json!({"ok": true, "state": failed.status.as_str(), "run_at": run_at}),
                        human,
                    )
                }
                Err(refused) => Report::new(
                    false,
                    json!({"ok": false, "state": null, "run_at": null}),
                    format!("not failed: {refused}"),
                )
                .refused_with(Some(refused.to_string())),
            }
        }
        Request::Cancel(id, now) => {
            queue_write_report(store.cancel(id, *now).await?, "cancelled", id)
        }
        Request::Retry(id, now) => queue_write_report(store.retry(id, *now).await?, "retried", id),
        Request::List(filter) => {
            let records = store.list(filter).await?;
            let lines: Vec<String> = records.iter().map(|r| record_line(r, filter.now)).collect();
            let json = json!({"jobs": records.iter().map(|r| record_json(r, filter.now)).collect::<Vec<_>>()});
            let mut report = Report::new(
                true,
                json,
                if lines.is_empty() {
                    "no jobs".to_owned()
                } else {
                    lines.join("\n")
                },
            );
            report.multiline = true;
            report
        }
        Request::Stats(now, true) => {
            let rows = store.stats(*now).await?;
            let mut report = Report::new(true, json!({}), prometheus(&rows));
            report.multiline = true;
            report
        }
        Request::Stats(now, false) => {
            let rows = store.stats(*now).await?;
            let mut queues = serde_json::Map::new();
            let mut lines = Vec::new();
            for row in &rows {
                let counts = queues
                    .entry(row.queue.as_str().to_owned())
                    .or_insert_with(|| {
                        Value::Object(
                            Status::ALL
                                .iter()
                                .map(|s| (s.as_str().to_owned(), json!(0)))
                                .collect(),
                        )
                    });
                counts[row.status.as_str()] = json!(row.count);
            }
            for (queue, counts) in &queues {
                let shown: Vec<String> = Status::ALL
                    .iter()
                    .map(|s| format!("{} {}", counts[s.as_str()], s.as_str()))
                    .collect();
                lines.push(format!("{queue}: {}", shown.join(", ")));
            }
            let mut report = Report::new(
                true,
                json!({"queues": queues}),
                if lines.is_empty() {
                    "no jobs".to_owned()
                } else {
                    lines.join("\n")
                },
            );
            report.multiline = true;
            report
        }
        Request::Purge(before, statuses) => {
            let purged = store.purge(*before, statuses).await?;
            Report::new(
                true,
                json!({"purged": purged}),
                format!("purged {purged} job(s) finished before {before}"),
            )
        }
        Request::Claim(id, owner, term) => match store.claim(id, owner, *term).await? {
            Ok(fence) => Report::new(
                true,
                json!({"fence": fence.get()}),
                format!(
                    "claimed job {id} for {owner}: fence {fence}, lease until {}",
                    stored_until(store, id, fence).await.unwrap_or(term.until())
                ),
            ),
            Err(refused) => Report::new(
                false,
                json!({"fence": null}),
                format!("not claimed: {refused}"),
            ),
        },
        Request::Renew(id, owner, fence, term) => {
            let mut report = write_report(
                store.renew(id, owner, *fence, *term).await?,
                "renewed",
                id,
                owner,
                *fence,
            );
            if report.accepted {
                let until = stored_until(store, id, *fence)
                    .await
                    .unwrap_or(term.until());
                report.human.push_str(&format!(" until {until}"));
            }
            report
        }
        Request::Complete(id, owner, fence, now, result) => write_report(
            store.complete(id, owner, *fence, *now, result).await?,
            "completed",
            id,
            owner,
            *fence,
        ),
        Request::Release(id, owner, fence) => write_report(
            store.release(id, owner, *fence).await?,
            "released",
            id,
            owner,
            *fence,
        ),
        Request::ClaimMany(id, owners, term) => {
            let mut fences = Vec::with_capacity(owners.len());
            let mut first_refusal = None;
            for outcome in lease_ports::claim_many(store, id, owners, *term).await {
                match outcome? {
                    Ok(fence) => fences.push(Some(fence.get())),
                    Err(refused) => {
                        first_refusal.get_or_insert(refused);
                        fences.push(None);
                    }
                }
            }
            let winners: Vec<String> = owners
                .iter()
                .zip(&fences)
                .filter_map(|(owner, fence)| fence.map(|f| format!("{owner} (fence {f})")))
                .collect();
            let human = match (winners.is_empty(), first_refusal) {
                (true, Some(refused)) => format!("nobody claimed job {id}: {refused}"),
                (true, None) => format!("nobody claimed job {id}"),
                (false, _) => format!(
                    "claimed job {id}: {}; {} other claim(s) refused",
                    winners.join(", "),
                    owners.len() - winners.len()
                ),
            };
            Report::new(!winners.is_empty(), json!({"fences": fences}), human)
        }
    })
}

#[cfg(test)]
mod tests {
    //! How the CLI reacts to outcomes a real store rarely gives on demand: storage errors,
    //! unknown commit outcomes, and refusals. The store is a mockall double.

    use lease_domain::{
        ClaimRefused, EnqueueSpec, ErrorText, JobResult, LeaseTerm, QueueName, Retry, WriteRefused,
    };
    use lease_ports::{ClaimOutcome, CompleteAndClaim, FailOutcome, ListFilter, StatsRow};
    use mockall::mock;

    use super::*;

    mock! {
        Store {}
        #[async_trait::async_trait]
        impl LeaseStore for Store {
            async fn enqueue(&self, job: &JobId) -> Result<bool, StoreError>;
            async fn state(&self, job: &JobId) -> Result<Option<JobState>, StoreError>;
            async fn claim(&self, job: &JobId, owner: &Owner, term: LeaseTerm) -> Result<ClaimOutcome, StoreError>;
            async fn renew(&self, job: &JobId, owner: &Owner, fence: Fence, term: LeaseTerm) -> Result<WriteOutcome, StoreError>;
            async fn complete(&self, job: &JobId, owner: &Owner, fence: Fence, now: Timestamp, result: &JobResult) -> Result<WriteOutcome, StoreError>;
            async fn release(&self, job: &JobId, owner: &Owner, fence: Fence) -> Result<WriteOutcome, StoreError>;
            async fn enqueue_with(&self, job: &JobId, spec: &EnqueueSpec) -> Result<bool, StoreError>;
            async fn record(&self, job: &JobId) -> Result<Option<JobRecord>, StoreError>;
            async fn claim_next(&self, queue: &QueueName, owner: &Owner, term: LeaseTerm, limit: usize) -> Result<Vec<Lease>, StoreError>;
            async fn fail(&self, job: &JobId, owner: &Owner, fence: Fence, now: Timestamp, error: &ErrorText, retry: Retry) -> Result<FailOutcome, StoreError>;
            async fn cancel(&self, job: &JobId, now: Timestamp) -> Result<WriteOutcome, StoreError>;
            async fn retry(&self, job: &JobId, now: Timestamp) -> Result<WriteOutcome, StoreError>;
            async fn purge(&self, before: Timestamp, statuses: &[Status]) -> Result<u64, StoreError>;
            async fn list(&self, filter: &ListFilter) -> Result<Vec<JobRecord>, StoreError>;
            async fn stats(&self, now: Timestamp) -> Result<Vec<StatsRow>, StoreError>;
            async fn complete_and_claim_next(&self, job: &JobId, owner: &Owner, fence: Fence, result: &JobResult, queue: &QueueName, term: LeaseTerm, limit: usize) -> Result<CompleteAndClaim, StoreError>;
        }
    }

    fn claim_request() -> Request {
        Request::Claim(
            JobId::new("j").unwrap(),
            Owner::new("a").unwrap(),
            LeaseTerm::new(0.0, 1.0).unwrap(),
        )
    }

    fn answer(request: &Request, store: &MockStore, json: bool) -> Response {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let outcome = runtime
            .block_on(execute(request, store))
            .map_err(|e| e.to_string());
        respond(outcome, json)
    }

    #[test]
    fn control_characters_from_values_are_escaped_in_human_output_only() {
        let mut store = MockStore::new();
        store.expect_record().returning(|id| {
            Ok(Some(JobRecord {
                id: id.clone(),
                job: lease_domain::Job {
                    owner: Some(Owner::new("evil\u{1b}]0;pwned\u{7}").unwrap()),
                    until: Timestamp::new(1.0).unwrap(),
                    ..lease_domain::Job::new()
                },
            }))
        });
        let request = Request::State(
            JobId::new("j\nfake line\u{1b}[2J").unwrap(),
            Timestamp::new(0.0).unwrap(),
        );
        let human = answer(&request, &store, false).stdout;
        assert_eq!(human.lines().count(), 1, "{human}");
        assert!(
            !human.chars().any(|c| c.is_control() && c != '\n'),
            "{human:?}"
        );
        assert!(human.contains("\\u{1b}]0;pwned\\u{7}"), "{human}");
        let json = answer(&request, &store, true).stdout;
        let value: Value = serde_json::from_str(&json).unwrap();
        assert_eq!(value["owner"], "evil\u{1b}]0;pwned\u{7}");
    }

    #[test]
    fn a_storage_error_exits_1_with_one_stderr_line_and_no_stdout() {
        let mut store = MockStore::new();
        store
            .expect_claim()
            .returning(|_, _, _| Err(StoreError::Unavailable("disk I/O error".into())));
        let response = answer(&claim_request(), &store, true);
        assert_eq!(response.code, EXIT_ERROR);
        assert_eq!(response.stdout, "");
        assert_eq!(response.stderr.lines().count(), 1);
        assert!(
            response.stderr.contains("disk I/O error"),
            "{}",
            response.stderr
        );
    }

    #[test]
    fn an_unknown_commit_outcome_says_so_and_exits_1() {
        let mut store = MockStore::new();
        store
            .expect_complete()
            .returning(|_, _, _, _, _| Err(StoreError::Indeterminate("fsync failed".into())));
        let request = Request::Complete(
            JobId::new("j").unwrap(),
            Owner::new("a").unwrap(),
            Fence::new(1).unwrap(),
            Timestamp::new(0.0).unwrap(),
            JobResult::new("r").unwrap(),
        );
        let response = answer(&request, &store, false);
        assert_eq!(response.code, EXIT_ERROR);
        assert!(
            response.stderr.contains("may or may not have been applied"),
            "{}",
            response.stderr
        );
    }

    #[test]
    fn a_refused_claim_exits_3_with_a_null_fence() {
        let mut store = MockStore::new();
        store
            .expect_claim()
            .returning(|_, _, _| Ok(Err(ClaimRefused::Done)));
        let response = answer(&claim_request(), &store, true);
        assert_eq!(
            (response.code, response.stdout.as_str()),
            (EXIT_REFUSED, "{\"fence\":null}\n")
        );
        let response = answer(&claim_request(), &store, false);
        assert_eq!(response.stdout, "not claimed: the job is already done\n");
    }

    #[test]
    fn a_refused_release_exits_3_and_names_the_reason() {
        let mut store = MockStore::new();
        store.expect_release().returning(|_, _, fence| {
            Ok(Err(WriteRefused::Stale {
                presented: fence,
                current: Fence::new(9).unwrap(),
            }))
        });
        let request = Request::Release(
            JobId::new("j").unwrap(),
            Owner::new("a").unwrap(),
            Fence::new(2).unwrap(),
        );
        let response = answer(&request, &store, false);
        assert_eq!(response.code, EXIT_REFUSED);
        assert!(
            response
                .stdout
                .contains("fence 2 is stale (the current fence is 9)"),
            "{}",
            response.stdout
        );
    }

    #[test]
    fn claim_many_with_one_storage_error_exits_1() {
        let mut store = MockStore::new();
        store.expect_claim().returning(|_, owner, _| {
            if owner.as_str() == "b" {
                Err(StoreError::Unavailable("database stayed locked".into()))
            } else {
                Ok(Err(ClaimRefused::Missing))
            }
        });
        let owners = vec![Owner::new("a").unwrap(), Owner::new("b").unwrap()];
        let request = Request::ClaimMany(
            JobId::new("j").unwrap(),
            owners,
            LeaseTerm::new(0.0, 1.0).unwrap(),
        );
        let response = answer(&request, &store, true);
        assert_eq!((response.code, response.stdout.as_str()), (EXIT_ERROR, ""));
        assert!(response.stderr.contains("locked"));
    }

    #[test]
    fn claim_many_with_a_winner_exits_0_and_lists_fences_in_input_order() {
        let mut store = MockStore::new();
        store.expect_claim().returning(|_, owner, _| {
            if owner.as_str() == "b" {
                Ok(Ok(Fence::new(4).unwrap()))
            } else {
                Ok(Err(ClaimRefused::Missing))
            }
        });
        let owners = ["a", "b", "c"].map(|o| Owner::new(o).unwrap()).to_vec();
        let request = Request::ClaimMany(
            JobId::new("j").unwrap(),
            owners,
            LeaseTerm::new(0.0, 1.0).unwrap(),
        );
        let response = answer(&request, &store, true);
        assert_eq!(
            (response.code, response.stdout.as_str()),
            (EXIT_OK, "{\"fences\":[null,4,null]}\n")
        );
    }
}

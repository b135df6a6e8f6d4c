//! Runs a checked request against any [`LeaseStore`] and renders the answer as JSON and prose.

use lease_domain::{Fence, JobId, Owner};
use lease_ports::{JobState, LeaseStore, StoreError, WriteOutcome};
use serde_json::{Value, json};

use crate::cli::Request;

/// Exit code: the operation was accepted (or was a read).
pub const EXIT_OK: u8 = 0;
/// Exit code: any error other than a usage error.
pub const EXIT_ERROR: u8 = 1;
/// Exit code: the lease rules refused the operation.
pub const EXIT_REFUSED: u8 = 3;

/// What a command answered: whether the lease rules accepted it, and its two renderings.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    /// `false` when the lease rules refused the operation.
    pub accepted: bool,
    /// The one JSON value printed with `--json`.
    pub json: Value,
    /// The sentence printed otherwise.
    pub human: String,
    /// Whether `human` is several lines (the demo); otherwise a newline in it came from a value
    /// and is escaped like any other control character.
    pub multiline: bool,
}

impl Report {
    /// A one-sentence report.
    pub fn new(accepted: bool, json: Value, human: String) -> Self {
        Self {
            accepted,
            json,
            human,
            multiline: false,
        }
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
pub struct Response {
    /// Printed on stdout.
    pub stdout: String,
    /// Printed on stderr.
    pub stderr: String,
    /// The exit code.
    pub code: u8,
}

/// Turns a report or an error into output and an exit code: 0 accepted, 3 refused, 1 error
/// (one line on stderr and nothing on stdout).
pub fn respond(outcome: Result<Report, String>, json: bool) -> Response {
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
            stderr: String::new(),
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

/// Runs one request that needs a store (everything but `init` and `demo`, which `main` handles).
///
/// # Errors
/// The store's error; nothing is printed here.
pub async fn execute(request: &Request, store: &dyn LeaseStore) -> Result<Report, StoreError> {
    Ok(match request {
        Request::Init | Request::Demo => {
            return Err(StoreError::Unavailable(
                "init and demo are run by main".to_owned(),
            ));
        }
        Request::Enqueue(id) => {
            let inserted = store.enqueue(id).await?;
            let human = if inserted {
                format!("enqueued job {id}")
            } else {
                format!("job {id} already exists; nothing changed")
            };
            Report::new(true, json!({"inserted": inserted}), human)
        }
        Request::State(id) => {
            let state = store.state(id).await?;
            Report::new(
                true,
                state_json(state.as_ref()),
                state_sentence(id, state.as_ref()),
            )
        }
        Request::Claim(id, owner, term) => match store.claim(id, owner, *term).await? {
            Ok(fence) => Report::new(
                true,
                json!({"fence": fence.get()}),
                format!(
                    "claimed job {id} for {owner}: fence {fence}, lease until {}",
                    term.until()
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
                report.human.push_str(&format!(" until {}", term.until()));
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

    use lease_domain::{ClaimRefused, JobResult, LeaseTerm, Timestamp, WriteRefused};
    use lease_ports::{ClaimOutcome, JobState};
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
        store.expect_state().returning(|id| {
            Ok(Some(JobState {
                id: id.as_str().to_owned(),
                owner: Some("evil\u{1b}]0;pwned\u{7}".into()),
                until: 1.0,
                fence: 1,
                result: None,
                done: false,
            }))
        });
        let request = Request::State(JobId::new("j\nfake line\u{1b}[2J").unwrap());
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
            Ok(Err(WriteRefused::StaleFence {
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

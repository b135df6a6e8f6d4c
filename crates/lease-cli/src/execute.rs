//! Runs a checked request against any [`LeaseStore`] and builds its report (rendered by
//! `render`).

use lease_domain::{Fence, JobId, Status, Timestamp};
use lease_ports::control::Controlled;
use lease_ports::{JobRecord, LeaseStore, StoreError};
use serde_json::{Value, json};

use crate::cli::Request;
use crate::render::{
    Report, claim_refusal, lease_json, prometheus, queue_write_report, record_json, record_table,
    state_sentence, write_report,
};
use crate::when;

/// The stored `until` of a lease just granted or renewed (in store-clock mode it is the
/// store's, not the caller's `now + ttl`); `None` if the lease has moved on meanwhile or the
/// read failed (the write itself stands).
async fn stored_until(store: &dyn LeaseStore, id: &JobId, fence: Fence) -> Option<Timestamp> {
    match store.record(id).await {
        Ok(Some(record)) if record.job.fence == fence => Some(record.job.until),
        _ => None,
    }
}

/// Times in the human text are shown as a person reads them, with their distance from `now`
/// (the request's own `--now`, else the clock when the command started).
///
/// # Errors
/// The store's error; nothing is printed here.
pub(crate) async fn execute(
    request: &Request,
    store: &dyn Controlled,
    now: Timestamp,
) -> Result<Report, StoreError> {
    Ok(match request {
        Request::Control(request) => crate::control::execute(request, store).await?,
        Request::Init
        | Request::Demo
        | Request::Work(_)
        | Request::Serve(_)
        | Request::Keys(_)
        | Request::Guard(_)
        | Request::Migrate { .. }
        | Request::Audit(_) => {
            return Err(StoreError::Unavailable(
                "init, demo, work, serve, keys, guard, migrate and audit are run by main"
                    .to_owned()
                    .into(),
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
        Request::EnqueueMany(jobs) => {
            let mut inserted = 0_usize;
            let mut done = 0_usize;
            for chunk in jobs.chunks(crate::cli::BATCH_JOBS) {
                let answers = store.enqueue_many(chunk).await.map_err(|e| {
                    e.in_context(&format!(
                        "{done} of {} jobs were stored before this failure (each transaction \
                         holds up to {} jobs; the rest were not)",
                        jobs.len(),
                        crate::cli::BATCH_JOBS
                    ))
                })?;
                inserted += answers.iter().filter(|&&new| new).count();
                done += chunk.len();
            }
            let existed = jobs.len() - inserted;
            Report::new(
                true,
                json!({"inserted": inserted, "existed": existed}),
                format!(
                    "enqueued {inserted} job(s); {existed} already existed and were left as they were"
                ),
            )
        }
        Request::State(id, now) => {
            let record = store.record(id).await?;
            let state = record.as_ref().map(JobRecord::state);
            let mut human = state_sentence(id, state.as_ref(), *now);
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
                if let Some(progress) = &j.progress {
                    human.push_str(&format!(", progress {progress:?}"));
                }
                if let Some(timeout) = j.timeout {
                    human.push_str(&format!(", timeout {} s an attempt", timeout.get()));
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
                // The stored until, by the clock that decided (the store's in store-clock
                // mode), not the caller's now + ttl.
                format!(
                    "leased to {owner} until {}: {}",
                    when::shown(leases[0].until.get(), leases[0].now.get()),
                    taken.join(", ")
                )
            };
            let json = json!({"leases": leases.iter().map(lease_json).collect::<Vec<_>>()});
            Report::new(!leases.is_empty(), json, human)
        }
        Request::Fail(id, owner, fence, failed_at, error, retry) => {
            match store
                .fail(id, owner, *fence, *failed_at, error, *retry)
                .await?
            {
                Ok(failed) => {
                    let run_at = failed.run_at.map(Timestamp::get);
                    let human = match failed.run_at {
                        Some(at) => format!(
                            "job {id} failed; it will be retried at {}",
                            when::shown(at.get(), failed_at.get())
                        ),
                        None => format!("job {id} failed and is dead"),
                    };
                    Report::new(
                        true,
                        json!({"ok": true, "state": failed.status.as_str(), "run_at": run_at}),
                        human,
                    )
                }
                Err(refused) => {
                    let why = crate::render::write_refusal(&refused);
                    Report::new(
                        false,
                        json!({"ok": false, "state": null, "run_at": null}),
                        format!("not failed: {why}"),
                    )
                    .refused_with(Some(why))
                }
            }
        }
        Request::Cancel(id, now) => {
            queue_write_report(store.cancel(id, *now).await?, "cancelled", id)
        }
        Request::Retry(id, now) => queue_write_report(store.retry(id, *now).await?, "retried", id),
        Request::List(filter) => {
            let records = store.list(filter).await?;
            let json = json!({"jobs": records.iter().map(|r| record_json(r, filter.now)).collect::<Vec<_>>()});
            let lines: Vec<String> = if records.is_empty() {
                Vec::new()
            } else {
                record_table(&records, filter.now)
            };
            Report::lines(true, json, lines, "no jobs")
        }
        Request::Stats(now, true) => {
            let rows = store.stats(*now).await?;
            let settings = store.queues().await?;
            Report::verbatim(json!({}), prometheus(&rows, &settings, *now))
        }
        Request::Stats(now, false) => {
            let rows = store.stats(*now).await?;
            let settings = store.queues().await?;
            let queues = lease_server::views::stats_json(&rows);
            let mut lines = Vec::new();
            for (queue, counts) in &queues {
                let shown: Vec<String> = Status::ALL
                    .iter()
                    .map(|s| format!("{} {}", counts[s.as_str()], s.as_str()))
                    .collect();
                let set = settings
                    .iter()
                    .find(|(q, _)| q.as_str() == queue)
                    .map(|(_, s)| format!(" ({})", crate::control::settings_words(s, *now)))
                    .unwrap_or_default();
                lines.push(format!("{queue}: {}{set}", shown.join(", ")));
            }
            // A queue with settings and no jobs yet is shown too.
            for (queue, set) in settings
                .iter()
                .filter(|(q, _)| !queues.contains_key(q.as_str()))
            {
                lines.push(format!(
                    "{queue}: no jobs ({})",
                    crate::control::settings_words(set, *now)
                ));
            }
            let settings: serde_json::Map<String, Value> = settings
                .iter()
                .map(|(queue, set)| {
                    (
                        queue.as_str().to_owned(),
                        lease_server::views::queue_json(queue, set, *now),
                    )
                })
                .collect();
            Report::lines(
                true,
                json!({"queues": queues, "settings": settings}),
                lines,
                "no jobs",
            )
        }
        Request::Purge(before, statuses) => {
            let purged = store.purge(*before, statuses).await?;
            Report::new(
                true,
                json!({"purged": purged}),
                format!(
                    "purged {purged} job(s) finished before {}",
                    when::shown(before.get(), now.get())
                ),
            )
        }
        Request::Claim(id, owner, term) => match store.claim(id, owner, *term).await? {
            Ok(fence) => Report::new(
                true,
                json!({"fence": fence.get()}),
                format!(
                    "claimed job {id} for {owner}: fence {fence}, lease until {}",
                    when::shown(
                        stored_until(store, id, fence)
                            .await
                            .unwrap_or(term.until())
                            .get(),
                        term.now().get()
                    )
                ),
            ),
            Err(refused) => Report::new(
                false,
                json!({"fence": null}),
                format!("not claimed: {}", claim_refusal(&refused, term.now())),
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
                report.human.push_str(&format!(
                    " until {}",
                    when::shown(until.get(), term.now().get())
                ));
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
                (true, Some(refused)) => format!(
                    "nobody claimed job {id}: {}",
                    claim_refusal(&refused, term.now())
                ),
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
    use lease_domain::{Fence, JobId, Owner, Status, Timestamp};
    use lease_ports::{
        ClaimOutcome, CompleteAndClaim, FailOutcome, JobRecord, JobState, Lease, ListFilter,
        StatsRow, WriteOutcome,
    };
    use mockall::mock;

    use super::*;
    use crate::render::{EXIT_ERROR, EXIT_OK, EXIT_REFUSED, Response, respond};

    mock! {
        Store {}
        #[async_trait::async_trait]
        impl LeaseStore for Store {
            async fn apply(&self, job: &JobId, command: lease_ports::Command, then: Option<lease_ports::ClaimNext>) -> Result<lease_ports::Applied, StoreError>;
            async fn claim_next_with(&self, claim: &lease_ports::ClaimNext) -> Result<Vec<Lease>, StoreError>;
            async fn enqueue(&self, job: &JobId) -> Result<bool, StoreError>;
            async fn state(&self, job: &JobId) -> Result<Option<JobState>, StoreError>;
            async fn claim(&self, job: &JobId, owner: &Owner, term: LeaseTerm) -> Result<ClaimOutcome, StoreError>;
            async fn renew(&self, job: &JobId, owner: &Owner, fence: Fence, term: LeaseTerm) -> Result<WriteOutcome, StoreError>;
            async fn complete(&self, job: &JobId, owner: &Owner, fence: Fence, now: Timestamp, result: &JobResult) -> Result<WriteOutcome, StoreError>;
            async fn release(&self, job: &JobId, owner: &Owner, fence: Fence) -> Result<WriteOutcome, StoreError>;
            async fn enqueue_with(&self, job: &JobId, spec: &EnqueueSpec) -> Result<bool, StoreError>;
            async fn enqueue_many(&self, jobs: &[(JobId, EnqueueSpec)]) -> Result<Vec<bool>, StoreError>;
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
        #[async_trait::async_trait]
        impl lease_ports::control::Control for Store {
            async fn change_queue(&self, queue: &QueueName, change: lease_domain::QueueChange) -> Result<lease_domain::QueueSettings, StoreError>;
            async fn queues(&self) -> Result<Vec<(QueueName, lease_domain::QueueSettings)>, StoreError>;
            async fn put_schedule(&self, spec: &lease_domain::ScheduleSpec, now: Timestamp) -> Result<lease_domain::Schedule, StoreError>;
            async fn remove_schedule(&self, name: &lease_domain::ScheduleName) -> Result<bool, StoreError>;
            async fn schedules(&self) -> Result<Vec<lease_domain::Schedule>, StoreError>;
            async fn fire_schedule(&self, fire: &lease_ports::control::Fire) -> Result<Option<Vec<bool>>, StoreError>;
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
            .block_on(execute(request, store, Timestamp::ZERO))
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

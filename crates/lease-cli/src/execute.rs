//! Runs a checked request against any [`lease_ports::LeaseStore`] and builds its report
//! (rendered by `render`).

use lease_domain::Timestamp;
use lease_ports::StoreError;
use lease_ports::control::Controlled;

use crate::cli::Request;
use crate::render::Report;

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
        Request::Jobs(request) => crate::jobs::execute(request, store, now).await?,
        Request::Leases(request) => crate::leases::execute(request, store, now).await?,
        Request::Init
        | Request::Demo
        | Request::Work(_)
        | Request::Serve(_)
        | Request::Keys(_)
        | Request::Guard(_)
        | Request::Migrate { .. }
        | Request::Backup(_)
        | Request::Restore(_)
        | Request::Epoch { .. }
        | Request::Heads { .. }
        | Request::Audit(_) => {
            return Err(StoreError::Unavailable(
                "init, demo, work, serve, keys, guard, migrate, backup, restore, epoch, heads and \
                 audit are run by main"
                    .to_owned()
                    .into(),
            ));
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
    use crate::jobs::JobsRequest;
    use crate::leases::LeasesRequest;
    use crate::render::{EXIT_ERROR, EXIT_OK, EXIT_REFUSED, Response, respond};
    use lease_ports::LeaseStore;
    use serde_json::Value;

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
            async fn checkpoints(&self, job: &JobId) -> Result<Vec<lease_domain::KeptCheckpoint>, StoreError>;
            async fn attempts(&self, job: &JobId) -> Result<lease_domain::Attempts, StoreError>;
            async fn trace(&self, job: &JobId) -> Result<Option<lease_domain::TraceContext>, StoreError>;
            async fn complete_and_claim_next(&self, job: &JobId, owner: &Owner, fence: Fence, result: &JobResult, queue: &QueueName, term: LeaseTerm, limit: usize) -> Result<CompleteAndClaim, StoreError>;
        }
        #[async_trait::async_trait]
        impl lease_ports::control::Control for Store {
            async fn change_queue(&self, queue: &QueueName, change: lease_domain::QueueChange) -> Result<lease_domain::QueueSettings, StoreError>;
            async fn queues(&self) -> Result<Vec<(QueueName, lease_domain::QueueSettings)>, StoreError>;
            async fn put_schedule(&self, spec: &lease_domain::ScheduleSpec, now: Timestamp) -> Result<lease_domain::Schedule, StoreError>;
            async fn remove_schedule(&self, name: &lease_domain::ScheduleName) -> Result<bool, StoreError>;
            async fn schedules(&self) -> Result<Vec<lease_domain::Schedule>, StoreError>;
            async fn throttle(&self, queue: &QueueName, now: Timestamp) -> Result<lease_domain::Throttle, StoreError>;
            async fn group_loads(&self, queue: &QueueName, now: Timestamp, limit: usize) -> Result<Vec<lease_ports::control::GroupLoad>, StoreError>;
            async fn fire_schedule(&self, fire: &lease_ports::control::Fire) -> Result<Option<Vec<bool>>, StoreError>;
        }
    }

    fn claim_request() -> Request {
        Request::Leases(LeasesRequest::Claim(
            JobId::new("j").unwrap(),
            Owner::new("a").unwrap(),
            LeaseTerm::new(0.0, 1.0).unwrap(),
        ))
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
        store.expect_checkpoints().returning(|_| {
            Ok(vec![lease_domain::KeptCheckpoint {
                name: lease_domain::CheckpointName::new("step\u{1b}[2J").unwrap(),
                value: lease_domain::CheckpointValue::new("v").unwrap(),
                fence: Fence::new(1).unwrap(),
                at: Timestamp::new(0.5).unwrap(),
            }])
        });
        store
            .expect_attempts()
            .returning(|_| Ok(lease_domain::Attempts::default()));
        store.expect_trace().returning(|_| {
            Ok(Some(
                lease_domain::TraceContext::new(
                    "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                    Some("k=v"),
                )
                .unwrap(),
            ))
        });
        let request = Request::Jobs(JobsRequest::State(
            JobId::new("j\nfake line\u{1b}[2J").unwrap(),
            Timestamp::new(0.0).unwrap(),
        ));
        let human = answer(&request, &store, false).stdout;
        assert_eq!(human.lines().count(), 1, "{human}");
        assert!(
            !human.chars().any(|c| c.is_control() && c != '\n'),
            "{human:?}"
        );
        assert!(human.contains("\\u{1b}]0;pwned\\u{7}"), "{human}");
        assert!(human.contains("step\\u{1b}[2J"), "{human}");
        let json = answer(&request, &store, true).stdout;
        let value: Value = serde_json::from_str(&json).unwrap();
        assert_eq!(value["owner"], "evil\u{1b}]0;pwned\u{7}");
        assert_eq!(value["checkpoints"]["step\u{1b}[2J"], "v");
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
        let request = Request::Leases(LeasesRequest::Complete(
            JobId::new("j").unwrap(),
            Owner::new("a").unwrap(),
            Fence::new(1).unwrap(),
            Timestamp::new(0.0).unwrap(),
            JobResult::new("r").unwrap(),
        ));
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
        let request = Request::Leases(LeasesRequest::Release(
            JobId::new("j").unwrap(),
            Owner::new("a").unwrap(),
            Fence::new(2).unwrap(),
            false,
        ));
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
        let request = Request::Leases(LeasesRequest::ClaimMany(
            JobId::new("j").unwrap(),
            owners,
            LeaseTerm::new(0.0, 1.0).unwrap(),
        ));
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
        let request = Request::Leases(LeasesRequest::ClaimMany(
            JobId::new("j").unwrap(),
            owners,
            LeaseTerm::new(0.0, 1.0).unwrap(),
        ));
        let response = answer(&request, &store, true);
        assert_eq!(
            (response.code, response.stdout.as_str()),
            (EXIT_OK, "{\"fences\":[null,4,null]}\n")
        );
    }
}

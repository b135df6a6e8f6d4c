//! Each write of the port as the service's route for it: a claim, a holder's write (with its
//! lease token), an enqueue, an admin's cancel and retry, a completion carrying the next
//! claim, and how a settled write's answer is read; and the audit trail's reads.

use async_trait::async_trait;
use lease_domain::{
    EnqueueSpec, ErrorText, Failed, Fence, JobId, JobResult, LeaseTerm, Owner, QueueName, Retry,
    Status, Timestamp,
};
use lease_ports::{
    ClaimNext, ClaimOutcome, CompleteAndClaim, FailOutcome, Lease, StoreError, WriteOutcome,
};
use serde_json::{Value, json};

use crate::answers::{Answer, claim_refused, path, write_refused};
use crate::{HttpLeaseStore, answers};

/// Each write of the port as the service's route for it.
impl HttpLeaseStore {
    pub(crate) async fn http_claim(
        &self,
        job: &JobId,
        owner: &Owner,
        term: LeaseTerm,
    ) -> Result<ClaimOutcome, StoreError> {
        let mut body = json!({
            "ttl": term.until().get() - term.now().get(),
            "owner": owner.as_str(),
        });
        if let Some(now) = self.now(term.now()) {
            body["now"] = json!(now);
        }
        let answer = self
            .post(
                &format!("/v1/jobs/{}/claim", path(job.as_str())),
                body,
                None,
            )
            .await?;
        match answer.status {
            200 => Ok(Ok(self.lease_of(&answer.body, term.now())?.fence)),
            404 | 409 => Ok(Err(claim_refused(&answer)?)),
            _ => Err(answer.error()),
        }
    }

    pub(crate) async fn http_renew(
        &self,
        job: &JobId,
        owner: &Owner,
        fence: Fence,
        term: LeaseTerm,
    ) -> Result<WriteOutcome, StoreError> {
        let body = json!({ "ttl": term.until().get() - term.now().get() });
        Ok(self
            .holder_write("renew", job, owner, fence, body, Some(term.now()))
            .await?
            .map(drop))
    }

    pub(crate) async fn http_complete(
        &self,
        job: &JobId,
        owner: &Owner,
        fence: Fence,
        now: Timestamp,
        result: &JobResult,
    ) -> Result<WriteOutcome, StoreError> {
        let write = json!({ "result": result.as_str() });
        let (written, _) = self
            .settle_write("complete", job, owner, fence, write, Some(now))
            .await?;
        Ok(written)
    }

    /// A release; `unstarted`: of a lease whose job never started, giving its attempt back.
    pub(crate) async fn http_release(
        &self,
        job: &JobId,
        owner: &Owner,
        fence: Fence,
        unstarted: bool,
    ) -> Result<WriteOutcome, StoreError> {
        let write = if unstarted {
            json!({"unstarted": true})
        } else {
            json!({})
        };
        let (written, _) = self
            .settle_write("release", job, owner, fence, write, None)
            .await?;
        Ok(written)
    }

    pub(crate) async fn http_enqueue_with(
        &self,
        job: &JobId,
        spec: &EnqueueSpec,
    ) -> Result<bool, StoreError> {
        let answer = self
            .post(
                &format!("/v1/queues/{}/jobs", path(spec.queue.as_str())),
                self.spec_json(job, spec),
                None,
            )
            .await?;
        match answer.status {
            200 | 201 => answers::boolean(&answer.body["inserted"], "inserted"),
            _ => Err(answer.error()),
        }
    }

    pub(crate) async fn http_claim_next(
        &self,
        queue: &QueueName,
        owner: &Owner,
        term: LeaseTerm,
        limit: usize,
    ) -> Result<Vec<Lease>, StoreError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let mut body = json!({
            "ttl": term.until().get() - term.now().get(),
            "owner": owner.as_str(),
            "limit": limit.min(100),
        });
        if let Some(now) = self.now(term.now()) {
            body["now"] = json!(now);
        }
        let answer = self
            .post(
                &format!("/v1/queues/{}/claims", path(queue.as_str())),
                body,
                None,
            )
            .await?;
        if answer.status != 200 {
            return Err(answer.error());
        }
        answer.body["leases"]
            .as_array()
            .ok_or_else(|| answers::corrupt(&answer, "leases"))?
            .iter()
            .map(|lease| self.lease_of(lease, term.now()))
            .collect()
    }

    pub(crate) async fn http_fail(
        &self,
        job: &JobId,
        owner: &Owner,
        fence: Fence,
        now: Timestamp,
        error: &ErrorText,
        retry: Retry,
    ) -> Result<FailOutcome, StoreError> {
        let mut write = json!({ "error": error.as_str() });
        match retry {
            Retry::No => write["retry"] = json!(false),
            Retry::Backoff(backoff) => write["backoff"] = answers::backoff(&backoff),
        }
        let (written, failed) = self
            .settle_write("fail", job, owner, fence, write, Some(now))
            .await?;
        match written {
            Ok(()) => Ok(Ok(Failed {
                status: Status::parse(failed["state"].as_str().unwrap_or_default())
                    .map_err(|_| StoreError::Corrupt("the server named no state".into()))?,
                run_at: failed["run_at"]
                    .as_f64()
                    .map(Timestamp::new)
                    .transpose()
                    .map_err(|_| StoreError::Corrupt("the server's run_at is not finite".into()))?,
            })),
            Err(refused) => Ok(Err(refused)),
        }
    }

    pub(crate) async fn http_cancel(
        &self,
        job: &JobId,
        now: Timestamp,
    ) -> Result<WriteOutcome, StoreError> {
        self.admin_write("cancel", job, now).await
    }

    pub(crate) async fn http_retry(
        &self,
        job: &JobId,
        now: Timestamp,
    ) -> Result<WriteOutcome, StoreError> {
        self.admin_write("retry", job, now).await
    }

    pub(crate) async fn http_complete_and_claim_next(
        &self,
        job: &JobId,
        owner: &Owner,
        fence: Fence,
        result: &JobResult,
        claim: &ClaimNext,
    ) -> Result<CompleteAndClaim, StoreError> {
        let (queue, term, limit) = (&claim.queue, claim.term, claim.limit);
        // One transaction: the completion carries the next claim (none when none is asked).
        let mut write = json!({ "result": result.as_str() });
        if limit > 0 {
            write["claim"] = json!({
                "queue": queue.as_str(),
                "ttl": term.until().get() - term.now().get(),
                "limit": limit.min(100),
            });
        }
        let (completed, answer) = self
            .settle_write("complete", job, owner, fence, write, Some(term.now()))
            .await?;
        if limit == 0 {
            return Ok((completed, Ok(Vec::new())));
        }
        let claimed = if answer["claim_refused"].is_object() {
            Err(self.answer_of(&answer["claim_refused"]).error())
        } else {
            answer["leases"]
                .as_array()
                .ok_or_else(|| StoreError::Corrupt("the server's `leases` is missing".into()))?
                .iter()
                .map(|lease| self.lease_of(lease, term.now()))
                .collect::<Result<Vec<_>, _>>()
        };
        Ok((completed, claimed))
    }

    /// A problem the server answered inside a body (a write's refusal), as an answer of its own.
    pub(crate) fn answer_of(&self, problem: &Value) -> Answer {
        Answer {
            status: problem["status"]
                .as_u64()
                .and_then(|s| u16::try_from(s).ok())
                .unwrap_or(0),
            body: problem.clone(),
            server: self.link.base.clone(),
        }
    }

    /// A holder's write (`op` and its fields in `write`) on the lease `job` at `fence`, sent
    /// with the other writes of this client made meanwhile (`POST /v1/leases/settle`), with the
    /// lease's token when this client holds it: whether it was applied or why it was refused,
    /// and the server's whole answer to it.
    pub(crate) async fn settle_write(
        &self,
        op: &str,
        job: &JobId,
        owner: &Owner,
        fence: Fence,
        mut write: Value,
        now: Option<Timestamp>,
    ) -> Result<(WriteOutcome, Value), StoreError> {
        write["op"] = json!(op);
        write["id"] = json!(job.as_str());
        write["fence"] = json!(fence.get());
        write["owner"] = json!(owner.as_str());
        if let Some(token) = self.token(job, fence) {
            write["lease_token"] = json!(token);
        }
        if let Some(now) = now.and_then(|n| self.now(n)) {
            write["now"] = json!(now);
        }
        let answer = self
            .gather
            .send(&self.link, write, self.traceparent())
            .await?;
        if answer["ok"] == json!(true) {
            // A completion, failure or release ends the lease: its token is spent.
            self.forget_token(job, fence);
            return Ok((Ok(()), answer));
        }
        let refused = self.answer_of(&answer["refused"]);
        match refused.status {
            404 | 409 => Ok((Err(write_refused(&refused, owner, fence, now)?), answer)),
            _ => Err(refused.error()),
        }
    }
}

impl HttpLeaseStore {
    pub(crate) async fn admin_write(
        &self,
        op: &str,
        job: &JobId,
        now: Timestamp,
    ) -> Result<WriteOutcome, StoreError> {
        let body = match self.now(now) {
            Some(now) => json!({ "now": now }),
            None => json!({}),
        };
        let answer = self
            .post(&format!("/v1/jobs/{}/{op}", path(job.as_str())), body, None)
            .await?;
        match answer.status {
            200 => Ok(Ok(())),
            404 | 409 => {
                let nobody = Owner::new("-").map_err(StoreError::InvalidInput)?;
                Ok(Err(write_refused(
                    &answer,
                    &nobody,
                    Fence::ZERO,
                    Some(now),
                )?))
            }
            _ => Err(answer.error()),
        }
    }
}

/// The server's audit trail (`GET /v1/refusals`); a client records no refusal of its own.
#[async_trait]
impl lease_ports::audit::AuditTrail for HttpLeaseStore {
    async fn refusals(
        &self,
        filter: &lease_ports::audit::AuditFilter,
    ) -> Result<Vec<lease_ports::audit::AuditRow>, StoreError> {
        let limit = if filter.limit == 0 {
            1000
        } else {
            filter.limit.min(1000)
        };
        let mut query = vec![format!("limit={limit}")];
        if let Some(job) = &filter.job {
            query.push(format!("job={}", path(job.as_str())));
        }
        if let Some(since) = filter.since {
            query.push(format!("since={}", since.get()));
        }
        let answer = self
            .get(&format!("/v1/refusals?{}", query.join("&")))
            .await?;
        if answer.status != 200 {
            return Err(answer.error());
        }
        answer.body["refusals"]
            .as_array()
            .ok_or_else(|| answers::corrupt(&answer, "refusals"))?
            .iter()
            .map(|row| answers::refusal(row).ok_or_else(|| answers::corrupt(&answer, "refusals")))
            .collect()
    }
}

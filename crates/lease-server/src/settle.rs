//! Many leases in one request: completions (each may carry its next claim), failures and
//! releases, each with its own lease token and fence and answered on its own; then, if asked,
//! a claim of the next due jobs. Each write is the command its own endpoint would make, judged
//! in the store's own transaction; they are sent to the store together, so its group commit
//! settles them in one transaction where it can. A worker with many slots sends one request
//! where it sent one per job.

use crate::auth::Caller;
use crate::extract::{Checked, Holder, Params};
use crate::fields::{FenceNo, Name, Text, Time, Ttl};
use crate::input::bad_value;
use crate::leases::{
    BackoffBody, LeaseView, NextClaim, claimant, link_claimed, retry_of, tokened_claim,
};
use crate::problem::{Problem, ProblemBody};
use crate::respond::{Answer, AppState, as_holder, credential, json_response, no_store, now, term};
use axum::extract::State;
use axum::http::StatusCode;
use lease_domain::{Command, ErrorText, JobId, JobResult, Outcome, Timestamp};
use lease_ports::{Applied, ClaimNext, StoreError};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// The most writes one request carries.
pub(crate) const MAX_WRITES: usize = 100;

/// Complete, fail or release several leases, and claim the next jobs.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({
    "writes": [
        {"op": "complete", "id": "report-41", "fence": 3, "lease_token": "lst_...", "result": "stored"},
        {"op": "fail", "id": "report-42", "fence": 1, "lease_token": "lst_...", "error": "timed out"}
    ],
    "claim": {"queue": "reports", "ttl": 30, "limit": 2}
}))]
pub(crate) struct SettleBody {
    /// The writes, each on its own lease, each answered on its own, in this order.
    #[schema(max_items = 100)]
    pub(crate) writes: Vec<LeaseWrite>,
    /// After the writes, lease the next due jobs of a queue, as a claim with no `wait` would.
    pub(crate) claim: Option<SettleClaim>,
}

/// What a write does to its lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum WriteOp {
    /// Store a result (`result`; may carry the next claim, `claim`).
    Complete,
    /// Report a failure (`error`; `retry`, `backoff`).
    Fail,
    /// Give the lease back (`unstarted`).
    Release,
}

impl WriteOp {
    fn name(self) -> &'static str {
        match self {
            Self::Complete => "complete",
            Self::Fail => "fail",
            Self::Release => "release",
        }
    }
}

/// One lease's write, as its own endpoint takes it, with the lease's token in the body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct LeaseWrite {
    /// What to do.
    pub(crate) op: WriteOp,
    /// The job.
    pub(crate) id: Name,
    /// The lease's fence.
    pub(crate) fence: FenceNo,
    /// The lease's token, as a claim gave it (the `Lease-Token` of a write on its own).
    #[schema(max_length = 256)]
    pub(crate) lease_token: Option<String>,
    /// Write as exactly this owner (default: any owner the key may act as).
    pub(crate) owner: Option<Name>,
    /// `complete`: the result to store.
    pub(crate) result: Option<Text>,
    /// `complete`: also lease the next due jobs of a queue in the completion's transaction,
    /// as the owner that completes; its leases are in this write's answer.
    pub(crate) claim: Option<NextClaim>,
    /// `fail`: what went wrong.
    pub(crate) error: Option<Text>,
    /// `fail`: `false` sends the job straight to dead (default `true`).
    pub(crate) retry: Option<bool>,
    /// `fail`: the backoff before the retry.
    pub(crate) backoff: Option<BackoffBody>,
    /// `release`: the job was never started; its attempt is given back too (default false).
    pub(crate) unstarted: Option<bool>,
    /// The caller's time, taken only by a server started to trust caller clocks.
    pub(crate) now: Option<Time>,
}

/// The claim made after the writes.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct SettleClaim {
    /// The queue to claim from.
    pub(crate) queue: Name,
    /// How long each lease lasts, in seconds.
    pub(crate) ttl: Ttl,
    /// At most this many leases (default 1).
    #[schema(minimum = 1, maximum = 100)]
    pub(crate) limit: Option<u64>,
    /// The owner to claim as: the key's principal (the default) or `principal/...`.
    pub(crate) owner: Option<Name>,
    /// The caller's time, taken only by a server started to trust caller clocks.
    pub(crate) now: Option<Time>,
}

/// Each write's answer, in the request's order, and the claim's leases.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Settled {
    /// One answer per write.
    pub(crate) writes: Vec<WriteAnswer>,
    /// With a `claim`: the leases it granted, possibly none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) leases: Option<Vec<LeaseView>>,
    /// A `claim` that failed (the writes' answers stand): why.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<ProblemBody>)]
    pub(crate) claim_refused: Option<serde_json::Value>,
}

/// One write's answer: `ok`, or `refused` with the problem its own endpoint would answer.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct WriteAnswer {
    /// `true` when the write was applied.
    pub(crate) ok: bool,
    /// A stored completion: the fence the result was stored with.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) result_fence: Option<u64>,
    /// A recorded failure: `pending` (it will be retried) or `dead`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) state: Option<String>,
    /// A recorded failure that will be retried: when it becomes due again.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) run_at: Option<f64>,
    /// With `ok` false: why, as the write's own endpoint would answer it (its `status`
    /// included: 404, 409, 400 and 403 are refusals of this write alone; 500
    /// `outcome_unknown` says it may have been applied).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<ProblemBody>)]
    pub(crate) refused: Option<serde_json::Value>,
    /// A completion that carried a claim: the leases it granted, possibly none (the claim is
    /// made whether or not the completion was applied).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) leases: Option<Vec<LeaseView>>,
    /// A completion whose carried claim failed (the completion stands): why.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<ProblemBody>)]
    pub(crate) claim_refused: Option<serde_json::Value>,
}

impl WriteAnswer {
    fn applied() -> Self {
        Self {
            ok: true,
            result_fence: None,
            state: None,
            run_at: None,
            refused: None,
            leases: None,
            claim_refused: None,
        }
    }

    fn refused(problem: &Problem) -> Self {
        Self {
            ok: false,
            refused: Some(problem.body()),
            ..Self::applied()
        }
    }
}

/// What a write asks of its lease, read and checked.
enum Kind {
    Complete(JobResult),
    Fail(ErrorText, lease_domain::Retry),
    /// `true`: unstarted, its attempt given back.
    Release(bool),
}

impl Kind {
    fn command(
        self,
        owner: lease_domain::Owner,
        fence: lease_domain::Fence,
        now: Timestamp,
    ) -> Command {
        match self {
            Self::Complete(result) => Command::Complete(owner, fence, now, result),
            Self::Fail(error, retry) => Command::Fail(owner, fence, now, error, retry),
            Self::Release(true) => Command::GiveBack(owner, fence),
            Self::Release(false) => Command::Release(owner, fence),
        }
    }
}

/// A write read and checked, ready for the store.
struct Ready {
    id: JobId,
    op: WriteOp,
    fence: lease_domain::Fence,
    command: Result<Command, Problem>,
    claim: Option<(ClaimNext, Vec<String>)>,
}

/// `problem` about the write at `index`, named so.
fn at(index: usize, problem: &Problem) -> Problem {
    Problem::new(
        problem.status(),
        problem.reason(),
        format!("writes[{index}]: {}", problem.detail()),
    )
}

/// Reads and checks one write: every error of the request's input is found before anything is
/// sent to the store (which fields each op takes, the document's rule for `LeaseWrite`, was
/// checked before this). A credential this key may not use is this write's refusal, not the
/// request's.
fn ready(app: &crate::App, caller: &Caller, write: LeaseWrite) -> Result<Ready, Problem> {
    let op = write.op;
    let id = write.id.job()?;
    let fence = write.fence.fence()?;
    let now = now(app, write.now.as_ref())?;
    let (kind, claim) = match op {
        WriteOp::Complete => {
            let text = write
                .result
                .ok_or_else(|| Problem::invalid("op `complete` needs field `result`"))?;
            let result = JobResult::new(text.0).map_err(|e| bad_value("result", &e))?;
            let claim = write.claim.map(|next| next.read(now)).transpose()?;
            (Kind::Complete(result), claim)
        }
        WriteOp::Fail => {
            let text = write
                .error
                .ok_or_else(|| Problem::invalid("op `fail` needs field `error`"))?;
            let error = ErrorText::new(text.0).map_err(|e| bad_value("error", &e))?;
            (
                Kind::Fail(error, retry_of(write.retry, write.backoff)?),
                None,
            )
        }
        WriteOp::Release => (Kind::Release(write.unstarted.unwrap_or(false)), None),
    };
    let holder = Holder {
        caller: caller.clone(),
        token: write
            .lease_token
            .map(|token| crate::secrets::digest(token.trim())),
    };
    let credential = credential(holder, write.owner);
    let claim = match (claim, &credential) {
        // The claim is made as the owner that completes, a token per lease.
        (Some((queue, term, limit)), Ok(credential)) => {
            Some(tokened_claim(&queue, &credential.writer(), term, limit)?)
        }
        _ => None,
    };
    Ok(Ready {
        id,
        op,
        fence,
        command: credential
            .map(|credential| as_holder(credential, |owner| kind.command(owner, fence, now))),
        claim,
    })
}

/// Sends the writes whose credential this key may use to the store in one call (so a store
/// with group commit takes them as one batch), and answers each, in order.
async fn run(app: &crate::App, writes: Vec<Ready>) -> Vec<WriteAnswer> {
    // What each write is answered from: its refusal, or its place among the writes sent.
    let mut sent = Vec::with_capacity(writes.len());
    let mut answers_of = Vec::with_capacity(writes.len());
    for write in writes {
        match write.command {
            Ok(command) => {
                let (then, tokens) = match write.claim {
                    Some((claim, tokens)) => (Some(claim), tokens),
                    None => (None, Vec::new()),
                };
                sent.push((write.id, command, then));
                answers_of.push(Ok((write.op, write.fence, tokens)));
            }
            Err(problem) => answers_of.push(Err(problem)),
        }
    }
    let mut applied = app.store.apply_many(sent).await.into_iter();
    let mut answers = Vec::with_capacity(answers_of.len());
    for of in answers_of {
        answers.push(match (of, applied.next()) {
            (Err(problem), _) => WriteAnswer::refused(&problem),
            (Ok(_), None) => WriteAnswer::refused(&Problem::store(&StoreError::Corrupt(
                "the store answered fewer writes than it was sent".into(),
            ))),
            (Ok((op, fence, tokens)), Some(applied)) => {
                answer(app, op, fence, &tokens, applied).await
            }
        });
    }
    answers
}

/// One write's answer, from what the store answered it.
async fn answer(
    app: &crate::App,
    op: WriteOp,
    fence: lease_domain::Fence,
    tokens: &[String],
    applied: Result<Applied, StoreError>,
) -> WriteAnswer {
    let applied = match applied {
        Ok(applied) => applied,
        Err(err) => return WriteAnswer::refused(&Problem::store(&err)),
    };
    let Applied { outcome, claimed } = applied;
    let mut answer = match (op, outcome) {
        (WriteOp::Complete, Outcome::Wrote(Ok(()))) => WriteAnswer {
            result_fence: Some(fence.get()),
            ..WriteAnswer::applied()
        },
        (WriteOp::Fail, Outcome::Failed(Ok(failed))) => WriteAnswer {
            state: Some(failed.status.as_str().to_owned()),
            run_at: failed.run_at.map(Timestamp::get),
            ..WriteAnswer::applied()
        },
        (WriteOp::Release, Outcome::Wrote(Ok(()))) => WriteAnswer::applied(),
        (_, Outcome::Wrote(Err(refused)) | Outcome::Failed(Err(refused))) => {
            WriteAnswer::refused(&Problem::refused_write(&refused))
        }
        (_, other) => WriteAnswer::refused(&Problem::store(&StoreError::Corrupt(
            format!("the store answered a {} with {other:?}", op.name()).into(),
        ))),
    };
    match claimed {
        Some(Ok(leases)) => {
            link_claimed(app, &leases).await;
            answer.leases = Some(LeaseView::all(&leases, tokens));
        }
        Some(Err(err)) => {
            answer.leases = Some(Vec::new());
            answer.claim_refused = Some(Problem::store(&err).body());
        }
        None => {}
    }
    answer
}

#[utoipa::path(post, path = "/v1/leases/settle", tag = "jobs",
    request_body = SettleBody,
    responses(
        (status = 200, description = "Each write's answer, and the claim's leases", body = Settled),
        (status = "4XX", description = "Refused as a whole, nothing written: a write or the claim that cannot be read (400/422, named by its index), no key (401), a key that may not claim as the claim's owner (403)", body = ProblemBody, content_type = "application/problem+json"),
    ),
)]
pub(crate) async fn settle(
    State(app): AppState,
    holder: Holder,
    _: Params,
    Checked(body): Checked<SettleBody>,
) -> Answer {
    if holder.token.is_some() {
        return Err(Problem::invalid(
            "send each lease's token as its write's `lease_token`, not as a Lease-Token header",
        ));
    }
    if body.writes.len() > MAX_WRITES {
        return Err(Problem::invalid(format!(
            "field `writes` holds at most {MAX_WRITES} writes"
        )));
    }
    let caller = holder.caller;
    let writes = body
        .writes
        .into_iter()
        .enumerate()
        .map(|(index, write)| ready(&app, &caller, write).map_err(|p| at(index, &p)))
        .collect::<Result<Vec<_>, _>>()?;
    let claim = match body.claim {
        Some(asked) => {
            let queue = asked.queue.queue("claim.queue")?;
            let limit = usize::try_from(asked.limit.unwrap_or(1)).unwrap_or(1);
            let owner = claimant(&caller, asked.owner)?;
            let term = term(now(&app, asked.now.as_ref())?, &asked.ttl)?;
            Some(tokened_claim(&queue, &owner, term, limit)?)
        }
        None => None,
    };
    // Sent together: a store with group commit settles them as one batch.
    let answers = run(&app, writes).await;
    // The claim after the writes, so that it sees what they freed (a group's next job).
    // Its failure is answered beside the writes': they stand, whatever the claim met.
    let (leases, claim_refused) = match claim {
        Some((claim, tokens)) => match app.store.claim_next_with(&claim).await {
            Ok(leases) => {
                link_claimed(&app, &leases).await;
                (Some(LeaseView::all(&leases, &tokens)), None)
            }
            Err(err) => (Some(Vec::new()), Some(Problem::store(&err).body())),
        },
        None => (None, None),
    };
    Ok(no_store(json_response(
        StatusCode::OK,
        Settled {
            writes: answers,
            leases,
            claim_refused,
        },
    )))
}

//! Leases: claims (the next due jobs of a queue, with long polling, or one job by id), and a
//! holder's writes: renew, progress, complete (which may carry the next claim), fail and
//! release, each judged in the store's own transaction (`Command::AsHolder`).

use crate::auth::Caller;
use crate::extract::{Checked, Holder, Param, Worker};
use crate::fields::{FenceNo, Name, ProgressText as ProgressField, Text, Time, Ttl};
use crate::input::bad_value;
use crate::problem::{Problem, ProblemBody};
use crate::respond::{
    Answer, AppState, OkBody, PayloadView, as_holder, credential, holder_write, json_response,
    no_store, now, term,
};
use crate::secrets;
use axum::extract::State;
use axum::http::StatusCode;
use lease_domain::{Command, ErrorText, JobResult, Owner, ProgressText, Renewal, Retry, Timestamp};
use lease_ports::{ClaimNext, Lease, WriteOutcome};
use serde::{Deserialize, Serialize};
use std::time::Duration;
use utoipa::ToSchema;

pub(crate) const MAX_WAIT: f64 = 20.0;

/// The route of a claim, whose long poll may take `MAX_WAIT` beyond the request timeout.
pub(crate) const CLAIMS_ROUTE: &str = "/v1/queues/{queue}/claims";

/// Claim due jobs of a queue.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"ttl": 30, "limit": 1}))]
pub(crate) struct ClaimBody {
    /// How long each lease lasts, in seconds.
    pub(crate) ttl: Ttl,
    /// At most this many leases (default 1).
    #[schema(minimum = 1, maximum = 100)]
    pub(crate) limit: Option<u64>,
    /// Wait up to this many seconds (default 0) for a job to come due.
    #[schema(minimum = 0, maximum = 20)]
    pub(crate) wait: Option<f64>,
    /// The owner to claim as: the key's principal (the default) or `principal/...`.
    pub(crate) owner: Option<Name>,
    /// The caller's time, taken only by a server started to trust caller clocks.
    pub(crate) now: Option<Time>,
}

/// One lease granted.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct LeaseView {
    /// The job.
    pub(crate) id: String,
    /// The fence: present it with every write, and to every resource the job writes to.
    pub(crate) fence: u64,
    /// The lease is live until then (Unix seconds).
    pub(crate) until: f64,
    /// Which attempt this is (1 for the first; 0 for a claim by id).
    pub(crate) attempt: u32,
    /// How long this attempt may run, in seconds (the job's timeout, else its queue's), if
    /// it has a limit: stop after that, and fail it as "timed out".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) timeout: Option<f64>,
    /// The job's group in its queue, if it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) group: Option<String>,
    /// The job's payload, if it has one.
    #[serde(flatten)]
    pub(crate) payload: PayloadView,
    /// The lease's secret: send it as `Lease-Token` with every write. Shown once; every lease
    /// has its own.
    pub(crate) lease_token: String,
}

impl LeaseView {
    fn of(lease: &Lease, token: &str) -> Self {
        Self {
            id: lease.job.as_str().to_owned(),
            fence: lease.fence.get(),
            until: lease.until.get(),
            attempt: lease.attempt,
            timeout: lease.timeout.map(lease_domain::Ttl::get),
            group: lease.group.as_ref().map(|g| g.as_str().to_owned()),
            payload: PayloadView::of(lease.payload.as_deref()),
            lease_token: token.to_owned(),
        }
    }

    /// The views of `leases`, each with its own token.
    pub(crate) fn all(leases: &[Lease], tokens: &[String]) -> Vec<Self> {
        leases
            .iter()
            .zip(tokens)
            .map(|(lease, token)| Self::of(lease, token))
            .collect()
    }
}

/// The leases granted (none when nothing came due within `wait`).
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Leases {
    /// The leases.
    pub(crate) leases: Vec<LeaseView>,
    /// When none was granted because the queue's rate (or, for every group with a due job,
    /// its group's rate) lets none now: when it lets one again (Unix seconds; the response's
    /// `Retry-After` says the same in whole seconds). Absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) throttled_until: Option<f64>,
}

/// When the rates of `queue` let a claim lease again, if they let none at `now`: the queue's
/// own rate, else the earliest of its throttled groups.
async fn throttled_until(
    app: &crate::App,
    queue: &lease_domain::QueueName,
    now: lease_domain::Timestamp,
) -> Result<Option<lease_domain::Timestamp>, Problem> {
    let throttle = lease_ports::control::Control::throttle(&*app.store, queue, now).await?;
    Ok(throttle.opens_at())
}

pub(crate) fn claimant(caller: &Caller, owner: Option<Name>) -> Result<Owner, Problem> {
    let owner = match owner {
        Some(name) => name.owner()?,
        None => caller.default_owner()?,
    };
    if !caller.may_act_as(&owner) {
        return Err(caller.not_as_owner());
    }
    Ok(owner)
}

/// `count` fresh lease tokens and their digests, one per lease a claim may grant.
pub(crate) fn new_tokens(
    count: usize,
) -> Result<(Vec<String>, Vec<lease_domain::TokenDigest>), Problem> {
    (0..count)
        .map(|_| new_token())
        .collect::<Result<Vec<_>, _>>()
        .map(|pairs| pairs.into_iter().unzip())
}

/// A claim of up to `limit` leases of `queue` as `owner` over `term`, with a fresh token for
/// each lease it may grant: the claim as the store takes it (the tokens' digests), and the
/// tokens, which the answer shows once.
pub(crate) fn tokened_claim(
    queue: &lease_domain::QueueName,
    owner: &Owner,
    term: lease_domain::LeaseTerm,
    limit: usize,
) -> Result<(ClaimNext, Vec<String>), Problem> {
    let (tokens, digests) = new_tokens(limit)?;
    let claim = ClaimNext {
        tokens: digests,
        ..ClaimNext::new(queue, owner, term, limit)
    };
    Ok((claim, tokens))
}

pub(crate) fn new_token() -> Result<(String, lease_domain::TokenDigest), Problem> {
    secrets::new_lease_token().map_err(|e| {
        tracing::error!(error = %e, "no lease token could be made");
        Problem::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            "the server cannot make a lease token now",
        )
        .retry_after(1)
    })
}

#[utoipa::path(post, path = "/v1/queues/{queue}/claims", tag = "queue",
    params(("queue" = Name, Path, description = "The queue, percent-encoded")),
    request_body = ClaimBody,
    responses(
        (status = 200, description = "The leases granted, possibly none", body = Leases, headers(
            ("Retry-After" = Option<u64>, description = "With no lease because of a rate: whole seconds until it lets one again"),
        ), links(
            ("renew" = (operation_id = "renew", parameters(("path.id" = "$response.body#/leases/0/id"), ("header.Lease-Token" = "$response.body#/leases/0/lease_token")), request_body = json!({"fence": "$response.body#/leases/0/fence"}))),
            ("complete" = (operation_id = "complete", parameters(("path.id" = "$response.body#/leases/0/id"), ("header.Lease-Token" = "$response.body#/leases/0/lease_token")), request_body = json!({"fence": "$response.body#/leases/0/fence"}))),
            ("fail" = (operation_id = "fail", parameters(("path.id" = "$response.body#/leases/0/id"), ("header.Lease-Token" = "$response.body#/leases/0/lease_token")), request_body = json!({"fence": "$response.body#/leases/0/fence"}))),
            ("release" = (operation_id = "release", parameters(("path.id" = "$response.body#/leases/0/id"), ("header.Lease-Token" = "$response.body#/leases/0/lease_token")), request_body = json!({"fence": "$response.body#/leases/0/fence"}))),
            ("progress" = (operation_id = "progress", parameters(("path.id" = "$response.body#/leases/0/id"), ("header.Lease-Token" = "$response.body#/leases/0/lease_token")), request_body = json!({"fence": "$response.body#/leases/0/fence"}))),
            ("hold_group" = (operation_id = "hold_group", parameters(("path.id" = "$response.body#/leases/0/id"), ("header.Lease-Token" = "$response.body#/leases/0/lease_token")), request_body = json!({"fence": "$response.body#/leases/0/fence"}))),
            ("keep" = (operation_id = "keep", parameters(("path.id" = "$response.body#/leases/0/id"), ("header.Lease-Token" = "$response.body#/leases/0/lease_token")), request_body = json!({"fence": "$response.body#/leases/0/fence"}))),
            ("get_job" = (operation_id = "get_job", parameters(("path.id" = "$response.body#/leases/0/id")))),
        )),
        (status = "4XX", description = "Refused", body = ProblemBody, content_type = "application/problem+json"),
    ),
)]
pub(crate) async fn claim_next(
    State(app): AppState,
    Worker(caller): Worker,
    Param(queue): Param,
    Checked(body): Checked<ClaimBody>,
) -> Answer {
    let queue = Name(queue).queue("queue")?;
    let limit = usize::try_from(body.limit.unwrap_or(1)).unwrap_or(1);
    let wait = body.wait.unwrap_or(0.0);
    term(now(&app, body.now.as_ref())?, &body.ttl)?;
    let owner = claimant(&caller, body.owner)?;
    // A secret of its own for every lease the claim may grant.
    let (tokens, digests) = new_tokens(limit)?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs_f64(wait);
    let mut waiting = None;
    loop {
        let claim = ClaimNext {
            tokens: digests.clone(),
            ..ClaimNext::new(
                &queue,
                &owner,
                term(now(&app, body.now.as_ref())?, &body.ttl)?,
                limit,
            )
        };
        let leases = app.store.claim_next_with(&claim).await?;
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        // Nothing granted: a rate may be why, and says until when.
        let throttled = if leases.is_empty() {
            throttled_until(&app, &queue, claim.term.now()).await?
        } else {
            None
        };
        if !leases.is_empty() || left.is_zero() {
            link_claimed(&app, &leases).await;
            let leases = LeaseView::all(&leases, &tokens);
            let wait = throttled.map(|at| (at.get() - claim.term.now().get()).max(0.0));
            let mut response = no_store(json_response(
                StatusCode::OK,
                Leases {
                    leases,
                    throttled_until: throttled.map(lease_domain::Timestamp::get),
                },
            ));
            if let Some(wait) = wait {
                // Whole seconds, rounded up, as the header takes them.
                let seconds = Duration::try_from_secs_f64(wait.ceil().clamp(0.0, 86_400.0))
                    .map_or(1, |d| d.as_secs());
                response.headers_mut().insert(
                    axum::http::header::RETRY_AFTER,
                    axum::http::HeaderValue::from(seconds),
                );
            }
            return Ok(response);
        }
        if waiting.is_none() {
            waiting = Some(app.waiters.join(queue.as_str()).ok_or_else(|| {
                Problem::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "overloaded",
                    "too many claims are waiting; try again",
                )
                .retry_after(1)
            })?);
        }
        if let Some(waiting) = &waiting {
            // A rate that opens sooner than the poll interval is waited for exactly.
            let opens = throttled.map_or(app.config.poll_interval, |at| {
                Duration::from_secs_f64((at.get() - claim.term.now().get()).clamp(0.001, 3_600.0))
            });
            waiting
                .wait(left.min(app.config.poll_interval).min(opens))
                .await;
        }
    }
}

/// With traces joined, links the request's span to the trace each job it granted was
/// enqueued in: a claim serves jobs it cannot know beforehand, of any number of traces, so they
/// are links (as OpenTelemetry's messaging conventions have a receive span do). One read of
/// each granted job's context, made only when the server exports its spans; tracing never fails
/// a claim.
pub(crate) async fn link_claimed(app: &crate::App, leases: &[Lease]) {
    let Some(join) = &app.config.trace else {
        return;
    };
    let span = tracing::Span::current();
    if span.is_disabled() {
        return;
    }
    for lease in leases {
        if let Ok(Some(trace)) = app.store.trace(&lease.job).await {
            (join.0)(&span, &trace, lease_ports::observe::Join::Link);
        }
    }
}

/// Claim one job by id.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"ttl": 30}))]
pub(crate) struct ClaimOneBody {
    /// How long the lease lasts, in seconds.
    pub(crate) ttl: Ttl,
    /// The owner to claim as: the key's principal (the default) or `principal/...`.
    pub(crate) owner: Option<Name>,
    /// The caller's time, taken only by a server started to trust caller clocks.
    pub(crate) now: Option<Time>,
}

#[utoipa::path(post, path = "/v1/jobs/{id}/claim", tag = "jobs",
    params(("id" = Name, Path, description = "The job id, percent-encoded")),
    request_body = ClaimOneBody,
    responses(
        (status = 200, description = "The lease", body = LeaseView, links(
            ("renew" = (operation_id = "renew", parameters(("path.id" = "$response.body#/id"), ("header.Lease-Token" = "$response.body#/lease_token")), request_body = json!({"fence": "$response.body#/fence"}))),
            ("complete" = (operation_id = "complete", parameters(("path.id" = "$response.body#/id"), ("header.Lease-Token" = "$response.body#/lease_token")), request_body = json!({"fence": "$response.body#/fence"}))),
            ("fail" = (operation_id = "fail", parameters(("path.id" = "$response.body#/id"), ("header.Lease-Token" = "$response.body#/lease_token")), request_body = json!({"fence": "$response.body#/fence"}))),
            ("release" = (operation_id = "release", parameters(("path.id" = "$response.body#/id"), ("header.Lease-Token" = "$response.body#/lease_token")), request_body = json!({"fence": "$response.body#/fence"}))),
            ("progress" = (operation_id = "progress", parameters(("path.id" = "$response.body#/id"), ("header.Lease-Token" = "$response.body#/lease_token")), request_body = json!({"fence": "$response.body#/fence"}))),
            ("hold_group" = (operation_id = "hold_group", parameters(("path.id" = "$response.body#/id"), ("header.Lease-Token" = "$response.body#/lease_token")), request_body = json!({"fence": "$response.body#/fence"}))),
            ("keep" = (operation_id = "keep", parameters(("path.id" = "$response.body#/id"), ("header.Lease-Token" = "$response.body#/lease_token")), request_body = json!({"fence": "$response.body#/fence"}))),
        )),
        (status = "4XX", description = "Refused: 404 no such job, 409 live, done, cancelled, dead or not_due", body = ProblemBody, content_type = "application/problem+json"),
    ),
)]
pub(crate) async fn claim(
    State(app): AppState,
    Worker(caller): Worker,
    Param(id): Param,
    Checked(body): Checked<ClaimOneBody>,
) -> Answer {
    let id = Name(id).job()?;
    let now = now(&app, body.now.as_ref())?;
    let term = term(now, &body.ttl)?;
    let owner = claimant(&caller, body.owner)?;
    let (token, digest) = new_token()?;
    let term = term.with_token(digest);
    let fence = app
        .store
        .claim(&id, &owner, term)
        .await?
        .map_err(|refused| Problem::refused_claim(&refused))?;
    let record = app.store.record(&id).await?;
    let timeout = match &record {
        Some(r) => {
            let settings =
                lease_ports::control::Control::settings_of(&*app.store, &r.job.queue).await?;
            r.job.timeout_in(&settings)
        }
        None => None,
    };
    let (payload, group) = record.map_or((None, None), |r| (r.job.payload, r.job.group));
    let lease = Lease {
        job: id,
        fence,
        now,
        until: term.until(),
        attempt: 0,
        payload,
        timeout,
        group,
    };
    Ok(no_store(json_response(
        StatusCode::OK,
        LeaseView::of(&lease, &token),
    )))
}

/// Renew a lease.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"fence": 1, "ttl": 30}))]
pub(crate) struct RenewBody {
    /// The lease's fence.
    pub(crate) fence: FenceNo,
    /// The new length from now, in seconds.
    pub(crate) ttl: Ttl,
    /// Write as exactly this owner (default: any owner the key may act as).
    pub(crate) owner: Option<Name>,
    /// The caller's time, taken only by a server started to trust caller clocks.
    pub(crate) now: Option<Time>,
}

/// When the renewed lease ends.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Renewed {
    /// Unix seconds.
    pub(crate) until: f64,
}

#[utoipa::path(post, path = "/v1/jobs/{id}/renew", tag = "jobs",
    params(("id" = Name, Path, description = "The job id, percent-encoded"),
        ("Lease-Token" = String, Header, description = "The lease's token")),
    request_body = RenewBody,
    responses(
        (status = 200, description = "Renewed", body = Renewed),
        (status = "4XX", description = "Refused: 404, 409 stale/done/cancelled/dead/not_owner/expired, 400 no token, 403 wrong token", body = ProblemBody, content_type = "application/problem+json"),
    ),
)]
pub(crate) async fn renew(
    State(app): AppState,
    holder: Holder,
    Param(id): Param,
    Checked(body): Checked<RenewBody>,
) -> Answer {
    let id = Name(id).job()?;
    let term = term(now(&app, body.now.as_ref())?, &body.ttl)?;
    let fence = body.fence.fence()?;
    let credential = credential(holder, body.owner)?;
    let renew = as_holder(credential, |owner| Command::Renew(owner, fence, term));
    holder_write::<WriteOutcome>(&app, &id, renew)
        .await?
        .map_err(|refused| Problem::refused_write(&refused))?;
    Ok(json_response(
        StatusCode::OK,
        Renewed {
            until: term.until().get(),
        },
    ))
}

/// The next claim a completion carries, made in the completion's transaction.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"queue": "reports", "ttl": 30}))]
pub(crate) struct NextClaim {
    /// The queue to claim from.
    pub(crate) queue: Name,
    /// How long each lease lasts, in seconds.
    pub(crate) ttl: Ttl,
    /// At most this many leases (default 1).
    #[schema(minimum = 1, maximum = 100)]
    pub(crate) limit: Option<u64>,
}

impl NextClaim {
    /// Its queue, its leases' term from `now`, and its limit (default 1).
    pub(crate) fn read(
        self,
        now: Timestamp,
    ) -> Result<(lease_domain::QueueName, lease_domain::LeaseTerm, usize), Problem> {
        let queue = self.queue.queue("claim.queue")?;
        let limit = usize::try_from(self.limit.unwrap_or(1)).unwrap_or(1);
        Ok((queue, term(now, &self.ttl)?, limit))
    }
}

/// Complete a job.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"fence": 1, "result": "stored at s3://reports/42"}))]
pub(crate) struct CompleteBody {
    /// The lease's fence.
    pub(crate) fence: FenceNo,
    /// The result to store.
    pub(crate) result: Text,
    /// Write as exactly this owner (default: any owner the key may act as).
    pub(crate) owner: Option<Name>,
    /// Also lease the next due jobs of a queue, in the same transaction, as a claim would (as
    /// `owner`, else the key's principal): the answer is then 200 with `ok`, the refusal's
    /// fields when the completion was refused (the claim is made either way), and `leases`,
    /// each with a token of its own.
    pub(crate) claim: Option<NextClaim>,
    /// The caller's time, taken only by a server started to trust caller clocks.
    pub(crate) now: Option<Time>,
}

/// The job is done; or, for a completion that carried a claim and was refused, `ok` false
/// with the refusal's fields as a problem names them.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Completed {
    /// `true` when the result was stored.
    pub(crate) ok: bool,
    /// The fence the result was stored with.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) result_fence: Option<u64>,
    /// With a `claim`: the leases it granted, possibly none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) leases: Option<Vec<LeaseView>>,
    /// With `ok` false: why the completion was refused, as a problem's `reason`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) reason: Option<String>,
    /// With `ok` false: the refusal in words.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) detail: Option<String>,
    /// With `ok` false: the status the refusal has on its own.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) status: Option<u16>,
    /// With a `stale` refusal: the fence presented.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) presented_fence: Option<u64>,
    /// With a `stale` refusal: the job's current fence.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) current_fence: Option<u64>,
}

impl Completed {
    fn stored(fence: lease_domain::Fence, leases: Option<Vec<LeaseView>>) -> Self {
        Self {
            ok: true,
            result_fence: Some(fence.get()),
            leases,
            reason: None,
            detail: None,
            status: None,
            presented_fence: None,
            current_fence: None,
        }
    }

    fn refused(refused: &lease_domain::WriteRefused, leases: Vec<LeaseView>) -> Self {
        let problem = Problem::refused_write(refused);
        let body = problem.body();
        Self {
            ok: false,
            result_fence: None,
            leases: Some(leases),
            reason: Some(problem.reason().to_owned()),
            detail: Some(problem.detail().to_owned()),
            status: Some(problem.status().as_u16()),
            presented_fence: body["presented_fence"].as_u64(),
            current_fence: body["current_fence"].as_u64(),
        }
    }
}

#[utoipa::path(post, path = "/v1/jobs/{id}/complete", tag = "jobs",
    params(("id" = Name, Path, description = "The job id, percent-encoded"),
        ("Lease-Token" = String, Header, description = "The lease's token")),
    request_body = CompleteBody,
    responses(
        (status = 200, description = "Stored (or, with a claim, refused and the claim made)", body = Completed),
        (status = "4XX", description = "Refused: 404, 409 stale/done/cancelled/dead/not_owner/expired, 400 no token, 403 wrong token", body = ProblemBody, content_type = "application/problem+json"),
    ),
)]
pub(crate) async fn complete(
    State(app): AppState,
    holder: Holder,
    Param(id): Param,
    Checked(body): Checked<CompleteBody>,
) -> Answer {
    let id = Name(id).job()?;
    let now = now(&app, body.now.as_ref())?;
    let result = JobResult::new(body.result.0).map_err(|e| bad_value("result", &e))?;
    let fence = body.fence.fence()?;
    let credential = credential(holder, body.owner)?;
    let claimant = credential.writer();
    let complete = as_holder(credential, |owner| {
        Command::Complete(owner, fence, now, result)
    });
    let Some(next) = body.claim else {
        holder_write::<WriteOutcome>(&app, &id, complete)
            .await?
            .map_err(|refused| Problem::refused_write(&refused))?;
        return Ok(json_response(
            StatusCode::OK,
            Completed::stored(fence, None),
        ));
    };
    // The completion and the next claim in one transaction, the claim as the owner that
    // completes (the one the request named, else the key's principal); a token per lease.
    let (queue, term, limit) = next.read(now)?;
    let (claim, tokens) = tokened_claim(&queue, &claimant, term, limit)?;
    let applied = app.store.apply(&id, complete, Some(claim)).await?;
    let completed: WriteOutcome = lease_ports::outcome_as(applied.outcome)?;
    let leases = applied.claimed.unwrap_or_else(|| Ok(Vec::new()))?;
    link_claimed(&app, &leases).await;
    let leases = LeaseView::all(&leases, &tokens);
    let answer = match completed {
        Ok(()) => Completed::stored(fence, Some(leases)),
        Err(refused) => Completed::refused(&refused, leases),
    };
    Ok(no_store(json_response(StatusCode::OK, answer)))
}

/// Report a failure.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"fence": 1, "error": "the upstream timed out"}))]
pub(crate) struct FailBody {
    /// The lease's fence.
    pub(crate) fence: FenceNo,
    /// What went wrong.
    pub(crate) error: Text,
    /// Write as exactly this owner (default: any owner the key may act as).
    pub(crate) owner: Option<Name>,
    /// `false`: straight to dead, whatever attempts are left (default `true`); then no
    /// `backoff`.
    pub(crate) retry: Option<bool>,
    /// The backoff before the retry (default: 1 s, doubling, at most 1 h, up to 25% shorter).
    pub(crate) backoff: Option<BackoffBody>,
    /// The caller's time, taken only by a server started to trust caller clocks.
    pub(crate) now: Option<Time>,
}

/// The backoff before a retry: `base * factor^(attempt-1)` seconds, at most `max`, up to
/// `jitter` shorter.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"base": 1, "factor": 2, "max": 3600, "jitter": 0.25}))]
pub(crate) struct BackoffBody {
    /// Seconds before the first retry.
    #[schema(exclusive_minimum = 0, maximum = 1_000_000_000_000_i64)]
    pub(crate) base: f64,
    /// Growth per attempt.
    #[schema(minimum = 1, maximum = 1_000_000_i64)]
    pub(crate) factor: f64,
    /// The longest delay, in seconds.
    #[schema(exclusive_minimum = 0, maximum = 1_000_000_000_000_i64)]
    pub(crate) max: f64,
    /// How much shorter a delay may be.
    #[schema(minimum = 0, maximum = 1)]
    pub(crate) jitter: f64,
}

/// What a failure's `retry` and `backoff` ask for.
pub(crate) fn retry_of(
    retry: Option<bool>,
    backoff: Option<BackoffBody>,
) -> Result<Retry, Problem> {
    Ok(match (retry, backoff) {
        (Some(false), Some(_)) => {
            return Err(Problem::invalid(
                "field `backoff` has no meaning with `retry` false",
            ));
        }
        (Some(false), None) => Retry::No,
        (_, None) => Retry::default(),
        (_, Some(b)) => Retry::Backoff(
            lease_domain::Backoff::new(b.base, b.factor, b.max, b.jitter)
                .map_err(|e| bad_value("backoff", &e))?,
        ),
    })
}

/// Where the job went.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct FailedView {
    /// `pending` (it will be retried) or `dead`.
    pub(crate) state: String,
    /// When it becomes due again, when pending.
    pub(crate) run_at: Option<f64>,
}

#[utoipa::path(post, path = "/v1/jobs/{id}/fail", tag = "jobs",
    params(("id" = Name, Path, description = "The job id, percent-encoded"),
        ("Lease-Token" = String, Header, description = "The lease's token")),
    request_body = FailBody,
    responses(
        (status = 200, description = "Recorded", body = FailedView),
        (status = "4XX", description = "Refused: 404, 409 stale/done/cancelled/dead/not_owner/expired, 400 no token, 403 wrong token", body = ProblemBody, content_type = "application/problem+json"),
    ),
)]
pub(crate) async fn fail(
    State(app): AppState,
    holder: Holder,
    Param(id): Param,
    Checked(body): Checked<FailBody>,
) -> Answer {
    let id = Name(id).job()?;
    let now = now(&app, body.now.as_ref())?;
    let error = ErrorText::new(body.error.0).map_err(|e| bad_value("error", &e))?;
    let retry = retry_of(body.retry, body.backoff)?;
    let fence = body.fence.fence()?;
    let credential = credential(holder, body.owner)?;
    let fail = as_holder(credential, |owner| {
        Command::Fail(owner, fence, now, error, retry)
    });
    let failed = holder_write::<lease_ports::FailOutcome>(&app, &id, fail)
        .await?
        .map_err(|refused| Problem::refused_write(&refused))?;
    Ok(json_response(
        StatusCode::OK,
        FailedView {
            state: failed.status.as_str().to_owned(),
            run_at: failed.run_at.map(Timestamp::get),
        },
    ))
}

/// Give a lease back.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"fence": 1}))]
pub(crate) struct ReleaseBody {
    /// The lease's fence.
    pub(crate) fence: FenceNo,
    /// Write as exactly this owner (default: any owner the key may act as).
    pub(crate) owner: Option<Name>,
    /// The job was never started (a lease a worker claimed ahead, or got as it stopped): the
    /// attempt its claim counted is given back too (default false).
    pub(crate) unstarted: Option<bool>,
}

#[utoipa::path(post, path = "/v1/jobs/{id}/release", tag = "jobs",
    params(("id" = Name, Path, description = "The job id, percent-encoded"),
        ("Lease-Token" = String, Header, description = "The lease's token")),
    request_body = ReleaseBody,
    responses(
        (status = 200, description = "Released", body = OkBody),
        (status = "4XX", description = "Refused: 404, 409 stale/done/cancelled/dead/not_owner, 400 no token, 403 wrong token", body = ProblemBody, content_type = "application/problem+json"),
    ),
)]
pub(crate) async fn release(
    State(app): AppState,
    holder: Holder,
    Param(id): Param,
    Checked(body): Checked<ReleaseBody>,
) -> Answer {
    let id = Name(id).job()?;
    let fence = body.fence.fence()?;
    let credential = credential(holder, body.owner)?;
    let unstarted = body.unstarted.unwrap_or(false);
    let release = as_holder(credential, |owner| {
        if unstarted {
            Command::GiveBack(owner, fence)
        } else {
            Command::Release(owner, fence)
        }
    });
    holder_write::<WriteOutcome>(&app, &id, release)
        .await?
        .map_err(|refused| Problem::refused_write(&refused))?;
    Ok(json_response(StatusCode::OK, OkBody { ok: true }))
}

/// Report a running job's progress (and renew its lease, with `ttl`).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"fence": 1, "ttl": 30, "progress": "12 of 40 files"}))]
pub(crate) struct ProgressBody {
    /// The lease's fence.
    pub(crate) fence: FenceNo,
    /// The lease's new length from now, in seconds; without it the lease keeps its end.
    pub(crate) ttl: Option<Ttl>,
    /// What the job says of its progress.
    pub(crate) progress: ProgressField,
    /// Write as exactly this owner (default: any owner the key may act as).
    pub(crate) owner: Option<Name>,
    /// The caller's time, taken only by a server started to trust caller clocks.
    pub(crate) now: Option<Time>,
}

#[utoipa::path(post, path = "/v1/jobs/{id}/progress", tag = "jobs",
    params(("id" = Name, Path, description = "The job id, percent-encoded"),
        ("Lease-Token" = String, Header, description = "The lease's token")),
    request_body = ProgressBody,
    responses(
        (status = 200, description = "Stored, and the lease renewed when a ttl was given", body = Progressed),
        (status = "4XX", description = "Refused as a renewal would be: 404, 409 stale/done/cancelled/dead/not_owner/expired, 400 no token, 403 wrong token", body = ProblemBody, content_type = "application/problem+json"),
    ),
)]
pub(crate) async fn progress(
    State(app): AppState,
    holder: Holder,
    Param(id): Param,
    Checked(body): Checked<ProgressBody>,
) -> Answer {
    let id = Name(id).job()?;
    let now = now(&app, body.now.as_ref())?;
    let renewal = match &body.ttl {
        Some(ttl) => Renewal::Renew(term(now, ttl)?),
        None => Renewal::Keep(now),
    };
    let fence = body.fence.fence()?;
    let text = ProgressText::new(body.progress.0).map_err(|e| bad_value("progress", &e))?;
    let credential = credential(holder, body.owner)?;
    let write = as_holder(credential, |owner| {
        Command::Progress(owner, fence, renewal, text.clone())
    });
    holder_write::<WriteOutcome>(&app, &id, write)
        .await?
        .map_err(|refused| Problem::refused_write(&refused))?;
    Ok(json_response(
        StatusCode::OK,
        Progressed {
            until: renewal.term().map(|term| term.until().get()),
        },
    ))
}

/// Hold the job's group until a time (its upstream answered 429).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"fence": 1, "until": 1900000000}))]
pub(crate) struct HoldGroupBody {
    /// The lease's fence.
    pub(crate) fence: FenceNo,
    /// Until when the group is held (Unix seconds).
    pub(crate) until: Time,
    /// Write as exactly this owner (default: any owner the key may act as).
    pub(crate) owner: Option<Name>,
    /// The caller's time, taken only by a server started to trust caller clocks.
    pub(crate) now: Option<Time>,
}

#[utoipa::path(post, path = "/v1/jobs/{id}/hold-group", tag = "jobs",
    params(("id" = Name, Path, description = "The job id, percent-encoded"),
        ("Lease-Token" = String, Header, description = "The lease's token")),
    request_body = HoldGroupBody,
    responses(
        (status = 200, description = "The job's group is paused until then (or later, if it already was); the lease goes on", body = OkBody),
        (status = "4XX", description = "Refused as a renewal would be (404, 409 stale/done/cancelled/dead/not_owner/expired, 400 no token, 403 wrong token), or 409 no_group for a job without a group", body = ProblemBody, content_type = "application/problem+json"),
    ),
)]
pub(crate) async fn hold_group(
    State(app): AppState,
    holder: Holder,
    Param(id): Param,
    Checked(body): Checked<HoldGroupBody>,
) -> Answer {
    let id = Name(id).job()?;
    let now = now(&app, body.now.as_ref())?;
    let until = body.until.at("until")?;
    let fence = body.fence.fence()?;
    let credential = credential(holder, body.owner)?;
    let write = as_holder(credential, |owner| {
        Command::HoldGroup(owner, fence, now, until)
    });
    holder_write::<WriteOutcome>(&app, &id, write)
        .await?
        .map_err(|refused| Problem::refused_write(&refused))?;
    Ok(json_response(StatusCode::OK, OkBody { ok: true }))
}

/// A stored progress report.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Progressed {
    /// When the renewed lease ends (Unix seconds); absent when no ttl was given and the lease
    /// kept its end.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) until: Option<f64>,
}

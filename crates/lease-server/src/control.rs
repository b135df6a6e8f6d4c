//! The handlers of flow control and schedules: a queue's settings (read by any key; a pause,
//! a resume and limits by admin keys), schedules (read by any key, made, changed, removed and
//! fired or run by hand by admin keys), and a holder's progress report, judged in the store like a renewal.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use lease_domain::{
    CatchUp, Command, Concurrency, EnqueueSpec, MAX_CATCH_UP, ProgressText, QueueChange, QueueName,
    QueueSettings, Renewal, Schedule, ScheduleName, ScheduleSpec, Timestamp,
};
use lease_ports::WriteOutcome;
use lease_ports::control::Fire;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::App;
use crate::api::{PayloadView, as_holder, credential, holder_write, json_response, now, term};
use crate::extract::{Admin, Checked, Holder, Param, Viewer};
use crate::fields::{
    CatchUpName, CronText, FenceNo, Name, ProgressText as ProgressField, ScheduleNameText, Seconds,
    Time, Ttl, ZoneText,
};
use crate::input::bad_value;
use crate::problem::{Problem, ProblemBody};

type AppState = State<Arc<App>>;
type Answer = Result<Response, Problem>;

/// A queue's settings.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct QueueView {
    /// The queue.
    pub(crate) queue: String,
    /// Whether claims take nothing from it now.
    pub(crate) paused: bool,
    /// When its pause ends (Unix seconds), if it ends at a time.
    pub(crate) paused_until: Option<f64>,
    /// The most of its leases live at once, across every worker, if it is limited.
    pub(crate) concurrency: Option<u32>,
    /// How long an attempt of a job that names no timeout may run, in seconds, if limited.
    pub(crate) timeout: Option<f64>,
}

impl QueueView {
    pub(crate) fn of(queue: &QueueName, settings: &QueueSettings, now: Timestamp) -> Self {
        Self {
            queue: queue.as_str().to_owned(),
            paused: settings.is_paused_at(now),
            paused_until: settings
                .paused
                .and_then(|p| p.until)
                .map(Timestamp::get)
                .filter(|_| settings.is_paused_at(now)),
            concurrency: settings.concurrency.map(Concurrency::get),
            timeout: settings.timeout.map(lease_domain::Ttl::get),
        }
    }
}

/// Every queue with settings.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Queues {
    /// The queues, by name.
    pub(crate) queues: Vec<QueueView>,
}

#[utoipa::path(get, path = "/v1/queues", tag = "queue",
    responses(
        (status = 200, description = "Every queue with settings (a queue without is free)", body = Queues),
        (status = "4XX", description = "Refused", body = ProblemBody, content_type = "application/problem+json"),
    ),
    security(("api_key" = []), ("session" = [])))]
pub(crate) async fn queues(State(app): AppState, _: Viewer) -> Answer {
    let now = now(&app, None)?;
    let body = queues_body(&app, now).await?;
    Ok(json_response(StatusCode::OK, body))
}

/// Every queue's settings judged at `now`, as `GET /v1/queues` and the event stream's
/// `queues` event give them.
pub(crate) async fn queues_body(app: &App, now: Timestamp) -> Result<Queues, Problem> {
    let queues = app.store.queues().await.map_err(|e| Problem::store(&e))?;
    let queues = queues
        .iter()
        .map(|(queue, settings)| QueueView::of(queue, settings, now))
        .collect();
    Ok(Queues { queues })
}

/// Pause a queue.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"until": 1900000000}))]
pub(crate) struct PauseBody {
    /// Until when (Unix seconds); absent, until it is resumed.
    pub(crate) until: Option<Time>,
}

async fn change(app: &App, queue: String, change: QueueChange) -> Answer {
    let queue = Name(queue).queue("queue")?;
    let settings = app
        .store
        .change_queue(&queue, change)
        .await
        .map_err(|e| Problem::store(&e))?;
    let now = now(app, None)?;
    if !settings.is_paused_at(now) {
        // Claims waiting on a queue that runs again may find their jobs now.
        app.wake(queue.as_str(), usize::MAX);
    }
    Ok(json_response(
        StatusCode::OK,
        QueueView::of(&queue, &settings, now),
    ))
}

#[utoipa::path(post, path = "/v1/queues/{queue}/pause", tag = "admin",
    params(("queue" = Name, Path, description = "The queue, percent-encoded")),
    request_body(content = Option<PauseBody>, description = "Empty, {} or {\"until\": time}"),
    responses(
        (status = 200, description = "Paused: no new lease from now on; running leases go on", body = QueueView),
        (status = "4XX", description = "Refused", body = ProblemBody, content_type = "application/problem+json"),
    ),
    security(("api_key" = []), ("session" = [])))]
pub(crate) async fn pause(
    State(app): AppState,
    _: Admin,
    Param(queue): Param,
    Checked(body): Checked<PauseBody>,
) -> Answer {
    let until = body.until.map(|t| t.at("until")).transpose()?;
    change(&app, queue, QueueChange::Pause(until)).await
}

/// A body that is empty or `{}`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({}))]
pub(crate) struct EmptyBody {}

#[utoipa::path(post, path = "/v1/queues/{queue}/resume", tag = "admin",
    params(("queue" = Name, Path, description = "The queue, percent-encoded")),
    request_body(content = Option<EmptyBody>, description = "Empty, or {}"),
    responses(
        (status = 200, description = "Claims take its jobs again", body = QueueView),
        (status = "4XX", description = "Refused", body = ProblemBody, content_type = "application/problem+json"),
    ),
    security(("api_key" = []), ("session" = [])))]
pub(crate) async fn resume(
    State(app): AppState,
    _: Admin,
    Param(queue): Param,
    Checked(_): Checked<EmptyBody>,
) -> Answer {
    change(&app, queue, QueueChange::Resume).await
}

/// A queue's limits; a field left out is left as it is.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"concurrency": 4, "timeout": 300}))]
pub(crate) struct LimitsBody {
    /// The most of its leases live at once, across every worker; 0 removes the limit.
    #[schema(value_type = Option<i64>, minimum = 0, maximum = 4_294_967_295_i64)]
    pub(crate) concurrency: Option<u32>,
    /// How long an attempt of a job that names no timeout may run, in seconds.
    pub(crate) timeout: Option<Seconds>,
    /// `true` removes the queue's default timeout (with no `timeout`).
    pub(crate) no_timeout: Option<bool>,
}

#[utoipa::path(put, path = "/v1/queues/{queue}/limits", tag = "admin",
    params(("queue" = Name, Path, description = "The queue, percent-encoded")),
    request_body = LimitsBody,
    responses(
        (status = 200, description = "The queue's settings now; running leases are never touched", body = QueueView),
        (status = "4XX", description = "Refused", body = ProblemBody, content_type = "application/problem+json"),
    ),
    security(("api_key" = []), ("session" = [])))]
pub(crate) async fn limits(
    State(app): AppState,
    _: Admin,
    Param(queue): Param,
    Checked(body): Checked<LimitsBody>,
) -> Answer {
    let timeout = match (body.timeout, body.no_timeout) {
        (Some(_), Some(true)) => {
            return Err(Problem::invalid("give `timeout` or `no_timeout`, not both"));
        }
        (Some(t), _) => Some(Some(t.ttl("timeout")?)),
        (None, Some(true)) => Some(None),
        (None, _) => None,
    };
    // A limit and a timeout together are one change: both are applied or neither.
    match QueueChange::limits(body.concurrency.map(Concurrency::new), timeout) {
        Some(one) => change(&app, queue, one).await,
        None => {
            let name = Name(queue).queue("queue")?;
            let now = now(&app, None)?;
            let current = app
                .store
                .settings_of(&name)
                .await
                .map_err(|e| Problem::store(&e))?;
            Ok(json_response(
                StatusCode::OK,
                QueueView::of(&name, &current, now),
            ))
        }
    }
}

/// A schedule as stored, with its next tick.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ScheduleView {
    /// Its name.
    pub(crate) name: String,
    /// Its cron expression.
    pub(crate) cron: String,
    /// Its time zone.
    pub(crate) zone: String,
    /// The queue of its jobs.
    pub(crate) queue: String,
    /// Their priority.
    pub(crate) priority: i64,
    /// Their attempts, if set.
    pub(crate) max_attempts: Option<u32>,
    /// Their timeout in seconds, if set.
    pub(crate) timeout: Option<f64>,
    /// `latest`, `none` or `all:N`.
    pub(crate) catch_up: String,
    /// Counted by every change.
    pub(crate) version: u64,
    /// When it was made (Unix seconds).
    pub(crate) created: f64,
    /// The last tick fired, if any.
    pub(crate) last_tick: Option<f64>,
    /// The next tick, if its calendar has one.
    pub(crate) next_tick: Option<f64>,
    /// Its jobs' payload, if they have one.
    #[serde(flatten)]
    pub(crate) payload: PayloadView,
}

impl ScheduleView {
    pub(crate) fn of(schedule: &Schedule, now: Timestamp) -> Self {
        let spec = &schedule.spec;
        Self {
            name: spec.name.as_str().to_owned(),
            cron: spec.cron.clone(),
            zone: spec.zone.clone(),
            queue: spec.job.queue.as_str().to_owned(),
            priority: spec.job.priority,
            max_attempts: spec.job.max_attempts,
            timeout: spec.job.timeout.map(lease_domain::Ttl::get),
            catch_up: spec.catch_up.text(),
            version: schedule.version,
            created: schedule.created.get(),
            last_tick: schedule.last_tick.map(Timestamp::get),
            next_tick: lease_schedule::next_tick(schedule, now).map(Timestamp::get),
            payload: PayloadView::of(spec.job.payload.as_ref().map(|p| p.as_bytes())),
        }
    }
}

/// Every schedule.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Schedules {
    /// The schedules, by name.
    pub(crate) schedules: Vec<ScheduleView>,
}

#[utoipa::path(get, path = "/v1/schedules", tag = "schedules",
    responses(
        (status = 200, description = "Every schedule, with its next tick", body = Schedules),
        (status = "4XX", description = "Refused", body = ProblemBody, content_type = "application/problem+json"),
    ),
    security(("api_key" = []), ("session" = [])))]
pub(crate) async fn schedules(State(app): AppState, _: Viewer) -> Answer {
    let now = now(&app, None)?;
    let schedules = app
        .store
        .schedules()
        .await
        .map_err(|e| Problem::store(&e))?;
    let schedules = schedules.iter().map(|s| ScheduleView::of(s, now)).collect();
    Ok(json_response(StatusCode::OK, Schedules { schedules }))
}

/// Make or change a schedule.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"cron": "0 3 * * *", "zone": "Europe/Paris", "queue": "reports"}))]
pub(crate) struct ScheduleBody {
    /// When: five cron fields or a shorthand such as `@hourly`.
    pub(crate) cron: CronText,
    /// In which time zone (default UTC).
    pub(crate) zone: Option<ZoneText>,
    /// The queue of its jobs.
    pub(crate) queue: Name,
    /// Their priority (default 0).
    #[schema(minimum = -9_223_372_036_854_775_808_i64, maximum = 9_223_372_036_854_775_807_i64)]
    pub(crate) priority: Option<i64>,
    /// How many leases `claims` may hand out to each (default 5).
    #[schema(value_type = Option<i64>, minimum = 0, maximum = 4_294_967_295_i64)]
    pub(crate) max_attempts: Option<u32>,
    /// How long one attempt may run.
    pub(crate) timeout: Option<Seconds>,
    /// Their payload as UTF-8 text, up to 1 MiB.
    pub(crate) payload: Option<String>,
    /// What a pass does with ticks missed while no scheduler ran (default `latest`).
    pub(crate) catch_up: Option<CatchUpName>,
    /// With `catch_up` `all`: at most this many of the newest missed ticks (default 1000).
    #[schema(minimum = 1, maximum = 1000)]
    pub(crate) catch_up_max: Option<u32>,
    /// The caller's clock, taken only by a server started with `--client-clock`.
    pub(crate) now: Option<Time>,
}

/// A schedule's name from its path.
fn schedule_name(name: String) -> Result<ScheduleName, Problem> {
    ScheduleName::new(name).map_err(|_| {
        Problem::invalid("the schedule's name must be 1 to 200 bytes, with no NUL and no @")
    })
}

/// A schedule's spec from its name and body.
fn schedule_spec(name: String, body: ScheduleBody) -> Result<ScheduleSpec, Problem> {
    let name = schedule_name(name)?;
    let zone = body.zone.map_or_else(|| "UTC".to_owned(), |z| z.0);
    lease_schedule::Calendar::new(&body.cron.0, &zone).map_err(|_| {
        if lease_schedule::is_zone(&zone) {
            Problem::invalid(
                "field `cron` is not a valid cron expression (five fields, or @yearly, \
                 @monthly, @weekly, @daily, @hourly)",
            )
        } else {
            Problem::invalid("field `zone` is not an IANA time zone name the server knows")
        }
    })?;
    let catch_up = match (body.catch_up, body.catch_up_max) {
        (Some(CatchUpName::All), max) => CatchUp::All(max.unwrap_or(MAX_CATCH_UP)),
        (_, Some(_)) => {
            return Err(Problem::invalid(
                "`catch_up_max` goes with `catch_up` `all` only",
            ));
        }
        (Some(CatchUpName::None), None) => CatchUp::Skip,
        (Some(CatchUpName::Latest) | None, None) => CatchUp::Latest,
    };
    let payload = body
        .payload
        .map(|p| lease_domain::Payload::new(p.into_bytes(), lease_domain::Payload::DEFAULT_LIMIT))
        .transpose()
        .map_err(|e| bad_value("payload", &e))?;
    Ok(ScheduleSpec {
        name,
        cron: body.cron.0,
        zone,
        job: EnqueueSpec {
            queue: body.queue.queue("queue")?,
            priority: body.priority.unwrap_or(0),
            max_attempts: body.max_attempts,
            timeout: body.timeout.map(|t| t.ttl("timeout")).transpose()?,
            payload,
            ..EnqueueSpec::default()
        },
        catch_up,
    })
}

#[utoipa::path(put, path = "/v1/schedules/{name}", tag = "schedules",
    params(("name" = ScheduleNameText, Path, description = "The schedule's name, percent-encoded")),
    request_body = ScheduleBody,
    responses(
        (status = 200, description = "Made or changed; a change keeps the ticks fired", body = ScheduleView),
        (status = "4XX", description = "Refused: 422 for a cron expression or a time zone the calendar cannot read", body = ProblemBody, content_type = "application/problem+json"),
    ),
    security(("api_key" = []), ("session" = [])))]
pub(crate) async fn put_schedule(
    State(app): AppState,
    _: Admin,
    Param(name): Param,
    Checked(body): Checked<ScheduleBody>,
) -> Answer {
    let now = now(&app, body.now.as_ref())?;
    let spec = schedule_spec(name, body)?;
    let schedule = app
        .store
        .put_schedule(&spec, now)
        .await
        .map_err(|e| Problem::store(&e))?;
    Ok(json_response(
        StatusCode::OK,
        ScheduleView::of(&schedule, now),
    ))
}

/// Whether a schedule was removed.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Removed {
    /// `false` when there was none of that name.
    pub(crate) removed: bool,
}

#[utoipa::path(delete, path = "/v1/schedules/{name}", tag = "schedules",
    params(("name" = ScheduleNameText, Path, description = "The schedule's name, percent-encoded")),
    responses(
        (status = 200, description = "Removed (the jobs its ticks made stay)", body = Removed),
        (status = "4XX", description = "Refused", body = ProblemBody, content_type = "application/problem+json"),
    ),
    security(("api_key" = []), ("session" = [])))]
pub(crate) async fn remove_schedule(State(app): AppState, _: Admin, Param(name): Param) -> Answer {
    let name = schedule_name(name)?;
    let removed = app
        .store
        .remove_schedule(&name)
        .await
        .map_err(|e| Problem::store(&e))?;
    Ok(json_response(StatusCode::OK, Removed { removed }))
}

/// One job a fire enqueues: a tick of the schedule.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct FireJob {
    /// The tick's job id.
    pub(crate) id: Name,
    /// The tick (Unix seconds): the job's enqueue time.
    pub(crate) tick: Time,
}

/// Fire a schedule: a scheduler's pass, as `lease-schedule` makes it.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"version": 1, "last_tick": null, "tick": 1900000000, "jobs": []}))]
pub(crate) struct FireBody {
    /// The schedule's version the pass read.
    #[schema(minimum = 1, maximum = 9_223_372_036_854_775_807_i64)]
    pub(crate) version: u64,
    /// Its last tick the pass read (null: it never fired).
    pub(crate) last_tick: Option<Time>,
    /// The tick to record as its last.
    pub(crate) tick: Time,
    /// The ticks' jobs, each as the schedule's job.
    #[schema(max_items = 1000)]
    pub(crate) jobs: Vec<FireJob>,
}

/// What a fire did.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct FiredView {
    /// `false` when the schedule changed since the pass read it (nothing was written).
    pub(crate) fired: bool,
    /// For each job, in order, whether it was new.
    pub(crate) inserted: Vec<bool>,
}

#[utoipa::path(post, path = "/v1/schedules/{name}/fire", tag = "schedules",
    params(("name" = ScheduleNameText, Path, description = "The schedule's name, percent-encoded")),
    request_body = FireBody,
    responses(
        (status = 200, description = "Fired in one transaction, or not at all", body = FiredView),
        (status = "4XX", description = "Refused", body = ProblemBody, content_type = "application/problem+json"),
    ),
    security(("api_key" = []), ("session" = [])))]
pub(crate) async fn fire(
    State(app): AppState,
    _: Admin,
    Param(name): Param,
    Checked(body): Checked<FireBody>,
) -> Answer {
    let name = schedule_name(name)?;
    let schedule = app
        .store
        .schedule(&name)
        .await
        .map_err(|e| Problem::store(&e))?;
    let Some(schedule) = schedule else {
        return Ok(json_response(
            StatusCode::OK,
            FiredView {
                fired: false,
                inserted: Vec::new(),
            },
        ));
    };
    let mut jobs = Vec::with_capacity(body.jobs.len());
    for job in body.jobs {
        jobs.push((job.id.job()?, schedule.spec.job_at(job.tick.at("tick")?)));
    }
    let fire = Fire {
        name,
        version: body.version,
        last_tick: body.last_tick.map(|t| t.at("last_tick")).transpose()?,
        tick: body.tick.at("tick")?,
        jobs,
    };
    let fired = app
        .store
        .fire_schedule(&fire)
        .await
        .map_err(|e| Problem::store(&e))?;
    if fired
        .as_ref()
        .is_some_and(|inserted| inserted.contains(&true))
    {
        app.wake(schedule.spec.job.queue.as_str(), fire.jobs.len());
    }
    Ok(json_response(
        StatusCode::OK,
        FiredView {
            fired: fired.is_some(),
            inserted: fired.unwrap_or_default(),
        },
    ))
}

/// What a run by hand made.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct RanView {
    /// The schedule.
    pub(crate) schedule: String,
    /// The job's id: the schedule's name, `@run-` and the time in UTC.
    pub(crate) id: String,
    /// Its queue.
    pub(crate) queue: String,
    /// `false` when a run asked for in the same second had made it already.
    pub(crate) inserted: bool,
}

#[utoipa::path(post, path = "/v1/schedules/{name}/run", tag = "schedules",
    params(("name" = ScheduleNameText, Path, description = "The schedule's name, percent-encoded")),
    request_body(content = Option<EmptyBody>, description = "Empty, or {}"),
    responses(
        (status = 200, description = "Its job enqueued now, outside its ticks (which are untouched)", body = RanView),
        (status = "4XX", description = "Refused: 404 no such schedule", body = ProblemBody, content_type = "application/problem+json"),
    ),
    security(("api_key" = []), ("session" = [])))]
pub(crate) async fn run(
    State(app): AppState,
    _: Admin,
    Param(name): Param,
    Checked(_): Checked<EmptyBody>,
) -> Answer {
    let name = schedule_name(name)?;
    let now = now(&app, None)?;
    let ran = lease_schedule::run_now(&*app.store, &name, now)
        .await
        .map_err(|e| Problem::store(&e))?
        .ok_or_else(|| Problem::new(StatusCode::NOT_FOUND, "not_found", "no such schedule"))?;
    if ran.inserted {
        app.wake(ran.queue.as_str(), 1);
    }
    Ok(json_response(
        StatusCode::OK,
        RanView {
            schedule: name.as_str().to_owned(),
            id: ran.id.as_str().to_owned(),
            queue: ran.queue.as_str().to_owned(),
            inserted: ran.inserted,
        },
    ))
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
    security(("api_key" = []), ("session" = [])))]
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

/// A stored progress report.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Progressed {
    /// When the renewed lease ends (Unix seconds); absent when no ttl was given and the lease
    /// kept its end.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) until: Option<f64>,
}

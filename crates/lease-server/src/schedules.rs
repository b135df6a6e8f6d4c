//! Schedules: read by any key; made, changed, removed, fired and run by hand by admin keys.

use crate::extract::{Admin, Checked, Param, Viewer};
use crate::fields::{CatchUpName, CronText, Name, ScheduleNameText, Seconds, Time, ZoneText};
use crate::input::bad_value;
use crate::problem::{Problem, ProblemBody};
use crate::respond::{Answer, AppState, EmptyBody, PayloadView, json_response, now};
use axum::extract::State;
use axum::http::StatusCode;
use lease_domain::{
    CatchUp, EnqueueSpec, MAX_CATCH_UP, Schedule, ScheduleName, ScheduleSpec, Timestamp,
};
use lease_ports::control::Fire;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// A schedule as stored, with its next tick.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ScheduleView {
    /// The schedule's fields.
    #[serde(flatten)]
    pub(crate) schedule: lease_schedule::ScheduleView,
    /// Its jobs' payload, if they have one.
    #[serde(flatten)]
    pub(crate) payload: PayloadView,
}

impl ScheduleView {
    pub(crate) fn of(schedule: &Schedule, now: Timestamp) -> Self {
        let schedule = lease_schedule::ScheduleView::of(schedule, now);
        let payload = PayloadView::of(schedule.payload.as_deref());
        Self { schedule, payload }
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
)]
pub(crate) async fn schedules(State(app): AppState, _: Viewer) -> Answer {
    let now = now(&app, None)?;
    let schedules = app.store.schedules().await?;
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
pub(crate) fn schedule_name(name: String) -> Result<ScheduleName, Problem> {
    ScheduleName::new(name).map_err(|_| {
        Problem::invalid("the schedule's name must be 1 to 200 bytes, with no NUL and no @")
    })
}

/// A schedule's spec from its name and body.
pub(crate) fn schedule_spec(name: String, body: ScheduleBody) -> Result<ScheduleSpec, Problem> {
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
)]
pub(crate) async fn put_schedule(
    State(app): AppState,
    _: Admin,
    Param(name): Param,
    Checked(body): Checked<ScheduleBody>,
) -> Answer {
    let now = now(&app, body.now.as_ref())?;
    let spec = schedule_spec(name, body)?;
    let schedule = app.store.put_schedule(&spec, now).await?;
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
)]
pub(crate) async fn remove_schedule(State(app): AppState, _: Admin, Param(name): Param) -> Answer {
    let name = schedule_name(name)?;
    let removed = app.store.remove_schedule(&name).await?;
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
)]
pub(crate) async fn fire(
    State(app): AppState,
    _: Admin,
    Param(name): Param,
    Checked(body): Checked<FireBody>,
) -> Answer {
    let name = schedule_name(name)?;
    let schedule = app.store.schedule(&name).await?;
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
    let fired = app.store.fire_schedule(&fire).await?;
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
)]
pub(crate) async fn run(
    State(app): AppState,
    _: Admin,
    Param(name): Param,
    Checked(_): Checked<EmptyBody>,
) -> Answer {
    let name = schedule_name(name)?;
    let now = now(&app, None)?;
    let ran = lease_schedule::run_now(&*app.store, &name, now)
        .await?
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

//! The commands of scheduling and flow control: `pause`, `resume`, `limit`, `progress` and
//! `schedule set | list | remove | run-due`. Each is checked here into a [`ControlRequest`]
//! (nothing reaches a store before every value passed) and run against any store that has
//! queue settings and schedules ([`Controlled`]): SQLite, PostgreSQL, or a server.

use clap::Subcommand;
use lease_domain::{
    CatchUp, EnqueueSpec, Payload, QueueChange, QueueName, QueueSettings, ScheduleName,
    ScheduleSpec, Timestamp, Ttl,
};
use lease_ports::StoreError;
use lease_ports::control::Controlled;
use serde_json::{Value, json};

use crate::args::{PayloadSource, ReadInput, RequestError, group_flag};
use crate::render::{Report, escape_controls};
use crate::when;

/// The `lease schedule` commands.
#[derive(Debug, Subcommand)]
pub(crate) enum ScheduleCommand {
    /// Make or change a schedule: each tick of --cron in --tz enqueues one job in --queue, with
    /// the id NAME@TICK (the tick in UTC, such as nightly@2026-12-02T02:00:00Z), so however
    /// many schedulers run there is one job per tick. `lease serve` and `lease work` run the
    /// schedules of their store; `lease schedule run-due` runs one pass (for cron).
    Set {
        /// The schedule's name: 1 to 200 bytes, no NUL, no `@`.
        name: String,
        /// Five cron fields (minute hour day-of-month month day-of-week) or @yearly,
        /// @monthly, @weekly, @daily, @hourly.
        #[arg(long)]
        cron: String,
        /// The IANA time zone the expression is read in. A time a daylight-saving change
        /// skips fires at the first instant after the gap; a repeated one fires once.
        #[arg(long, default_value = "UTC")]
        tz: String,
        /// The queue of its jobs.
        #[arg(long)]
        queue: String,
        /// Their priority (higher is claimed first).
        #[arg(long, default_value_t = 0, allow_hyphen_values = true)]
        priority: i64,
        /// How many times claim-next may lease each (default 5).
        #[arg(long)]
        max_attempts: Option<u32>,
        /// The most seconds one attempt may run (default: the queue's timeout, if any).
        #[arg(long, value_name = "SECONDS", allow_hyphen_values = true)]
        timeout: Option<f64>,
        #[command(flatten)]
        payload: PayloadSource,
        /// After downtime: `latest` (one job, for the most recent missed tick), `none` (only a
        /// tick at most a minute late), `all` or `all:N` (every missed tick, at most the newest N,
        /// up to 1000).
        #[arg(long, default_value = "latest")]
        catch_up: String,
        /// The current time (Unix seconds or RFC 3339); default: the system clock.
        #[arg(long, allow_hyphen_values = true, value_parser = crate::when::parse)]
        now: Option<f64>,
    },
    /// List every schedule with its last and next tick.
    List {
        /// The time the next tick is counted from (Unix seconds or RFC 3339); default: the
        /// system clock.
        #[arg(long, allow_hyphen_values = true, value_parser = crate::when::parse)]
        now: Option<f64>,
    },
    /// Remove a schedule (the jobs its ticks made stay).
    Remove {
        /// The schedule's name.
        name: String,
    },
    /// Run a schedule now, outside its ticks: enqueue its job as NAME@run-TIME (the time in UTC,
    /// whole seconds, so runs asked for within one second are one job). Its ticks are
    /// untouched. Exit 3 when there is no such schedule.
    Run {
        /// The schedule's name.
        name: String,
        /// The time of the run (Unix seconds or RFC 3339); default: the system clock.
        #[arg(long, allow_hyphen_values = true, value_parser = crate::when::parse)]
        now: Option<f64>,
    },
    /// Run one pass: enqueue the job of every schedule's due tick (by its catch-up policy),
    /// once, then exit. Safe to run from cron on any number of machines at once.
    RunDue {
        /// The time of the pass (Unix seconds or RFC 3339); default: the system clock.
        #[arg(long, allow_hyphen_values = true, value_parser = crate::when::parse)]
        now: Option<f64>,
    },
}

/// A scheduling or flow-control command whose inputs passed every check.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ControlRequest {
    /// Change a queue's settings (one change), judged at a time.
    Queue(QueueName, QueueChange, Timestamp),
    /// Make or change a schedule.
    SetSchedule(ScheduleSpec, Timestamp),
    /// List the schedules.
    ListSchedules(Timestamp),
    /// Remove a schedule.
    RemoveSchedule(ScheduleName),
    /// One scheduler pass.
    RunDue(Timestamp),
    /// A run of one schedule by hand.
    Run(ScheduleName, Timestamp),
    /// Show a queue's busiest groups (at most so many), judged at a time.
    Groups(QueueName, usize, Timestamp),
}

impl ControlRequest {
    /// The time the request is judged at, if it has one.
    pub(crate) fn now(&self) -> Option<Timestamp> {
        match self {
            Self::Queue(_, _, now)
            | Self::SetSchedule(_, now)
            | Self::ListSchedules(now)
            | Self::RunDue(now)
            | Self::Run(_, now)
            | Self::Groups(_, _, now) => Some(*now),
            Self::RemoveSchedule(_) => None,
        }
    }
}

fn flag(message: String) -> RequestError {
    RequestError::Flag(message)
}

/// `lease pause`'s request: the queue, or with `--group` one group of it.
pub(crate) fn pause(
    queue: String,
    group: Option<String>,
    until: Option<f64>,
    now: f64,
) -> Result<ControlRequest, RequestError> {
    let until = until
        .map(|t| {
            Timestamp::new(t).map_err(|_| flag(format!("--until must be a finite time, got {t}")))
        })
        .transpose()?;
    let change = match group_flag(group)? {
        Some(group) => QueueChange::PauseGroup(group, until),
        None => QueueChange::Pause(until),
    };
    Ok(ControlRequest::Queue(
        QueueName::new(queue)?,
        change,
        Timestamp::new(now)?,
    ))
}

/// `lease resume`'s request: the queue, or with `--group` one group of it.
pub(crate) fn resume(
    queue: String,
    group: Option<String>,
    now: f64,
) -> Result<ControlRequest, RequestError> {
    let change = match group_flag(group)? {
        Some(group) => QueueChange::ResumeGroup(group),
        None => QueueChange::Resume,
    };
    Ok(ControlRequest::Queue(
        QueueName::new(queue)?,
        change,
        Timestamp::new(now)?,
    ))
}

/// `lease limit`'s request: any of `--concurrency N` and `--per-group N` (0 removes the
/// limit), `--timeout SECONDS` or `--no-timeout`, `--ordered` or `--unordered`, `--fair` or
/// `--no-fair`, and the rates; at least one. Every flag given is one change of the store, applied together or not at all.
pub(crate) fn limit(args: LimitArgs, now: f64) -> Result<ControlRequest, RequestError> {
    let timeout = match (args.timeout, args.no_timeout) {
        (Some(_), true) => return Err(flag("give --timeout or --no-timeout, not both".to_owned())),
        (Some(seconds), false) => Some(Some(
            Ttl::new(seconds).map_err(|e| flag(format!("--timeout: {e}")))?,
        )),
        (None, true) => Some(None),
        (None, false) => None,
    };
    let ordered = switch(args.ordered, args.unordered, "--ordered or --unordered")?;
    let fair = switch(args.fair, args.no_fair, "--fair or --no-fair")?;
    let change = QueueChange::set(lease_domain::Limits {
        concurrency: args.concurrency.map(lease_domain::Concurrency::new),
        timeout,
        per_group: args.per_group.map(lease_domain::Concurrency::new),
        ordered,
        fair,
        rate: args
            .rate
            .as_deref()
            .map(|r| rate_flag("--rate", r))
            .transpose()?,
        rate_per_group: args
            .rate_per_group
            .as_deref()
            .map(|r| rate_flag("--rate-per-group", r))
            .transpose()?,
    })
    .ok_or_else(|| {
        flag(
            "give --concurrency N or --per-group N (0 removes the limit), --timeout SECONDS, \
             --no-timeout, --ordered or --unordered, --fair or --no-fair, --rate or \
             --rate-per-group N/PERIOD (none removes it)"
                .to_owned(),
        )
    })?;
    Ok(ControlRequest::Queue(
        QueueName::new(args.queue)?,
        change,
        Timestamp::new(now)?,
    ))
}

/// A setting turned on (`on`) or off (`off`) by a pair of flags, or left alone; both is an
/// error naming the pair (`names`).
fn switch(on: bool, off: bool, names: &str) -> Result<Option<bool>, RequestError> {
    match (on, off) {
        (true, true) => Err(flag(format!("give {names}, not both"))),
        (true, false) => Ok(Some(true)),
        (false, true) => Ok(Some(false)),
        (false, false) => Ok(None),
    }
}

/// A rate flag's value: `N/PERIOD` (`100/1m`, `5/500ms`), or `none` to remove the rate.
fn rate_flag(name: &str, text: &str) -> Result<Option<lease_domain::Rate>, RequestError> {
    if text == "none" {
        return Ok(None);
    }
    lease_domain::Rate::parse(text)
        .map(Some)
        .map_err(|e| flag(format!("{name}: {e}")))
}

/// A `lease schedule` command's request; `clock` is read when no `--now` was given.
pub(crate) fn schedule(
    command: ScheduleCommand,
    clock: impl FnOnce() -> f64,
    read: ReadInput<'_>,
) -> Result<ControlRequest, RequestError> {
    fn at(now: Option<f64>, clock: impl FnOnce() -> f64) -> Result<Timestamp, RequestError> {
        Ok(Timestamp::new(now.unwrap_or_else(clock))?)
    }
    Ok(match command {
        ScheduleCommand::Set {
            name,
            cron,
            tz,
            queue,
            priority,
            max_attempts,
            timeout,
            payload,
            catch_up,
            now,
        } => {
            let name = ScheduleName::new(name)?;
            // The calendar reads the expression and the zone now, so a bad one is refused
            // before anything is stored.
            lease_schedule::Calendar::new(&cron, &tz)?;
            let payload = match (payload.payload, payload.payload_file) {
                (Some(text), _) => Some(text.into_bytes()),
                (None, Some(path)) => Some(
                    read(&path, Payload::DEFAULT_LIMIT)
                        .map_err(|e| RequestError::Read(format!("--payload-file: {e}")))?,
                ),
                (None, None) => None,
            };
            let spec = ScheduleSpec {
                name,
                cron,
                zone: tz,
                job: EnqueueSpec {
                    queue: QueueName::new(queue)?,
                    priority,
                    max_attempts,
                    timeout: timeout
                        .map(|t| Ttl::new(t).map_err(|e| flag(format!("--timeout: {e}"))))
                        .transpose()?,
                    payload: payload
                        .map(|bytes| Payload::new(bytes, Payload::DEFAULT_LIMIT))
                        .transpose()?,
                    ..EnqueueSpec::default()
                },
                catch_up: CatchUp::parse(&catch_up)
                    .map_err(|e| flag(format!("--catch-up: {e}")))?,
            };
            ControlRequest::SetSchedule(spec, at(now, clock)?)
        }
        ScheduleCommand::List { now } => ControlRequest::ListSchedules(at(now, clock)?),
        ScheduleCommand::Remove { name } => {
            ControlRequest::RemoveSchedule(ScheduleName::new(name)?)
        }
        ScheduleCommand::RunDue { now } => ControlRequest::RunDue(at(now, clock)?),
        ScheduleCommand::Run { name, now } => {
            ControlRequest::Run(ScheduleName::new(name)?, at(now, clock)?)
        }
    })
}

/// A queue's settings in words: `paused until ...`, `at most N leases`, `timeout S s`, the
/// group rules, or `runs freely`.
pub(crate) fn settings_words(settings: &QueueSettings, now: Timestamp) -> String {
    let mut words = Vec::new();
    if settings.is_paused_at(now) {
        words.push(match settings.paused.and_then(|p| p.until) {
            Some(until) => format!("paused until {}", when::shown(until.get(), now.get())),
            None => "paused".to_owned(),
        });
    }
    if let Some(n) = settings.concurrency {
        words.push(format!("at most {} lease(s) at once", n.get()));
    }
    if let Some(timeout) = settings.timeout {
        words.push(format!("timeout {} s", timeout.get()));
    }
    if let Some(n) = settings.per_group {
        words.push(format!("at most {} lease(s) of a group at once", n.get()));
    }
    if settings.ordered {
        words.push("groups in order".to_owned());
    }
    if settings.fair {
        words.push("groups served in turn".to_owned());
    }
    if let Some(rate) = settings.rate {
        words.push(format!("at most {rate} lease(s)"));
    }
    if let Some(rate) = settings.rate_per_group {
        words.push(format!("at most {rate} lease(s) of a group"));
    }
    for (group, until) in &settings.paused_groups {
        if settings.is_group_paused_at(group, now) {
            words.push(match until {
                Some(until) => format!(
                    "group {} paused until {}",
                    escape_controls(group.as_str()),
                    when::shown(until.get(), now.get())
                ),
                None => format!("group {} paused", escape_controls(group.as_str())),
            });
        }
    }
    if words.is_empty() {
        "runs freely".to_owned()
    } else {
        words.join(", ")
    }
}

/// Runs a checked request and builds its report.
///
/// # Errors
/// The store's error; nothing is printed here.
pub(crate) async fn execute(
    request: &ControlRequest,
    store: &dyn Controlled,
) -> Result<Report, StoreError> {
    Ok(match request {
        ControlRequest::Queue(queue, change, now) => {
            let settings = store.change_queue(queue, change.clone()).await?;
            Report::new(
                true,
                lease_server::views::queue_json(queue, &settings, *now),
                format!(
                    "queue {}: {}",
                    escape_controls(queue.as_str()),
                    settings_words(&settings, *now)
                ),
            )
        }
        ControlRequest::SetSchedule(spec, now) => {
            let schedule = store.put_schedule(spec, *now).await?;
            let next = lease_schedule::next_tick(&schedule, *now);
            Report::new(
                true,
                lease_server::views::schedule_json(&schedule, *now),
                format!(
                    "schedule {} (version {}): {:?} in {}, jobs in queue {}; next tick {}",
                    escape_controls(schedule.spec.name.as_str()),
                    schedule.version,
                    schedule.spec.cron,
                    schedule.spec.zone,
                    escape_controls(schedule.spec.job.queue.as_str()),
                    next.map_or_else(|| "never".to_owned(), |t| when::shown(t.get(), now.get()))
                ),
            )
        }
        ControlRequest::Groups(queue, limit, now) => {
            let standings =
                lease_ports::control::busiest_groups(store, queue, *now, *limit).await?;
            let lines: Vec<String> = standings
                .iter()
                .map(|s| {
                    let mut line = format!(
                        "{}: {} waiting, {} running",
                        escape_controls(s.load.group.as_str()),
                        s.load.backlog,
                        s.load.running
                    );
                    if s.paused {
                        line.push_str(&s.paused_until.map_or_else(
                            || ", paused".to_owned(),
                            |at| format!(", paused until {}", when::shown(at.get(), now.get())),
                        ));
                    }
                    if let Some(at) = s.throttled_until {
                        line.push_str(&format!(
                            ", throttled until {}",
                            when::shown(at.get(), now.get())
                        ));
                    }
                    line
                })
                .collect();
            let json = lease_server::views::groups_json(queue, &standings);
            Report::lines(true, json, lines, "no group has unfinished jobs")
        }
        ControlRequest::ListSchedules(now) => {
            let schedules = store.schedules().await?;
            let json = json!({"schedules": schedules.iter()
                .map(|s| lease_server::views::schedule_json(s, *now)).collect::<Vec<Value>>()});
            let lines: Vec<String> = schedules
                .iter()
                .map(|s| {
                    let next = lease_schedule::next_tick(s, *now);
                    format!(
                        "{}: {:?} in {} -> queue {}, catch-up {}, last tick {}, next tick {}",
                        escape_controls(s.spec.name.as_str()),
                        s.spec.cron,
                        s.spec.zone,
                        escape_controls(s.spec.job.queue.as_str()),
                        s.spec.catch_up.text(),
                        s.last_tick
                            .map_or_else(|| "none".to_owned(), |t| when::shown(t.get(), now.get())),
                        next.map_or_else(|| "none".to_owned(), |t| when::shown(t.get(), now.get()))
                    )
                })
                .collect();
            Report::lines(true, json, lines, "no schedules")
        }
        ControlRequest::RemoveSchedule(name) => {
            let removed = store.remove_schedule(name).await?;
            let shown = escape_controls(name.as_str());
            let human = if removed {
                format!("removed schedule {shown} (the jobs its ticks made stay)")
            } else {
                format!("no schedule {shown}; nothing changed")
            };
            Report::new(removed, json!({"removed": removed}), human)
        }
        ControlRequest::RunDue(now) => {
            pass_report(&lease_schedule::run_due(store, *now).await?, *now)
        }
        ControlRequest::Run(name, now) => {
            let shown = escape_controls(name.as_str());
            match lease_schedule::run_now(store, name, *now).await? {
                Some(ran) => {
                    let id = escape_controls(ran.id.as_str());
                    let queue = escape_controls(ran.queue.as_str());
                    let human = if ran.inserted {
                        format!("enqueued job {id} in queue {queue}, a run of schedule {shown}")
                    } else {
                        format!(
                            "job {id} was already enqueued by a run this second; nothing changed"
                        )
                    };
                    Report::new(
                        true,
                        json!({"schedule": name.as_str(), "id": ran.id.as_str(),
                            "queue": ran.queue.as_str(), "inserted": ran.inserted}),
                        human,
                    )
                }
                None => Report::new(
                    false,
                    json!({"schedule": name.as_str(), "id": null, "inserted": false}),
                    format!("no schedule {shown}; nothing enqueued"),
                ),
            }
        }
    })
}

/// The report of one scheduler pass.
pub(crate) fn pass_report(pass: &lease_schedule::Pass, now: Timestamp) -> Report {
    let mut lines = Vec::new();
    let mut fired = Vec::new();
    for one in &pass.fired {
        let jobs: Vec<Value> = one
            .jobs
            .iter()
            .map(|(id, new)| json!({"id": id.as_str(), "inserted": new}))
            .collect();
        fired
            .push(json!({"schedule": one.schedule.as_str(), "tick": one.tick.get(), "jobs": jobs}));
        lines.push(pass_line(one));
    }
    let unreadable: Vec<Value> = pass
        .unreadable
        .iter()
        .map(|(name, why)| {
            lines.push(format!(
                "schedule {} cannot be read: {}",
                escape_controls(name.as_str()),
                escape_controls(why)
            ));
            json!({"schedule": name.as_str(), "error": why})
        })
        .collect();
    let next = pass.next.map(Timestamp::get);
    if lines.is_empty() {
        lines.push(match pass.next {
            Some(t) => format!(
                "no tick due; the next is {}",
                when::shown(t.get(), now.get())
            ),
            None => "no tick due, and none to come".to_owned(),
        });
    }
    Report::lines(
        true,
        json!({"fired": fired, "unreadable": unreadable, "next": next}),
        lines,
        "",
    )
}

/// What one fired tick made, in words.
pub(crate) fn pass_line(fired: &lease_schedule::Fired) -> String {
    let jobs: Vec<String> = fired
        .jobs
        .iter()
        .map(|(id, new)| {
            let id = escape_controls(id.as_str());
            if *new { id } else { format!("{id} (existed)") }
        })
        .collect();
    let made = if jobs.is_empty() {
        "no job (a missed tick, skipped by its catch-up policy)".to_owned()
    } else {
        jobs.join(", ")
    };
    format!(
        "schedule {} fired its tick of {}: {made}",
        escape_controls(fired.schedule.as_str()),
        when::calendar(fired.tick.get())
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(concurrency: Option<u32>, timeout: Option<f64>, no_timeout: bool) -> LimitArgs {
        LimitArgs {
            queue: "q".to_owned(),
            concurrency,
            timeout,
            no_timeout,
            per_group: None,
            ordered: false,
            unordered: false,
            fair: false,
            no_fair: false,
            rate: None,
            rate_per_group: None,
        }
    }

    #[test]
    fn lease_limit_with_both_flags_is_one_change_of_the_store() {
        let request = limit(args(Some(2), None, true), 5.0).unwrap();
        assert_eq!(
            request,
            ControlRequest::Queue(
                QueueName::new("q").unwrap(),
                QueueChange::Limits(lease_domain::Limits::both(
                    lease_domain::Concurrency::new(2),
                    None
                )),
                Timestamp::new(5.0).unwrap(),
            )
        );
        let one = limit(args(None, Some(3.0), false), 5.0).unwrap();
        assert!(
            matches!(
                one,
                ControlRequest::Queue(_, QueueChange::Timeout(Some(_)), _)
            ),
            "{one:?}"
        );
    }
}

/// The arguments of `lease pause`.
#[derive(Debug, clap::Args)]
pub(crate) struct PauseArgs {
    /// The queue.
    pub(crate) queue: String,
    /// Resume by itself at this time (Unix seconds or RFC 3339).
    #[arg(long, allow_hyphen_values = true, value_parser = crate::when::parse)]
    pub(crate) until: Option<f64>,
    /// Pause only this group of the queue: its jobs are not leased, the other groups run.
    #[arg(long, value_name = "GROUP")]
    pub(crate) group: Option<String>,
}

impl PauseArgs {
    /// The checked request.
    ///
    /// # Errors
    /// The first bad value, named.
    pub(crate) fn request(
        self,
        clock: impl FnOnce() -> f64,
    ) -> Result<ControlRequest, RequestError> {
        let PauseArgs {
            queue,
            until,
            group,
        } = self;
        crate::control::pause(queue, group, until, clock())
    }
}

/// The arguments of `lease resume`.
#[derive(Debug, clap::Args)]
pub(crate) struct ResumeArgs {
    /// The queue.
    pub(crate) queue: String,
    /// Resume only this paused group of the queue.
    #[arg(long, value_name = "GROUP")]
    pub(crate) group: Option<String>,
}

impl ResumeArgs {
    /// The checked request.
    ///
    /// # Errors
    /// The first bad value, named.
    pub(crate) fn request(
        self,
        clock: impl FnOnce() -> f64,
    ) -> Result<ControlRequest, RequestError> {
        let ResumeArgs { queue, group } = self;
        crate::control::resume(queue, group, clock())
    }
}

/// The arguments of `lease limit`.
#[derive(Debug, clap::Args)]
pub(crate) struct LimitArgs {
    /// The queue.
    pub(crate) queue: String,
    /// The most live leases at once (0: no limit).
    #[arg(long, value_name = "N", allow_hyphen_values = true)]
    pub(crate) concurrency: Option<u32>,
    /// How long an attempt of a job without a timeout of its own may run, in seconds.
    #[arg(long, value_name = "SECONDS", allow_hyphen_values = true)]
    pub(crate) timeout: Option<f64>,
    /// Remove the queue's timeout.
    #[arg(long)]
    pub(crate) no_timeout: bool,
    /// The most live leases of each group of the queue at once, across every worker (0: no
    /// limit). Jobs without a group are not limited.
    #[arg(long, value_name = "N", allow_hyphen_values = true)]
    pub(crate) per_group: Option<u32>,
    /// Run each group one job at a time, in claim order: a later job of a group waits while
    /// an earlier one runs, waits for its retry, or is dead (until it is retried or purged).
    #[arg(long)]
    pub(crate) ordered: bool,
    /// Stop running groups in order.
    #[arg(long)]
    pub(crate) unordered: bool,
    /// Serve the groups in turn, the group served least recently first, so a group with a
    /// large backlog cannot starve one enqueued later (jobs without a group go first;
    /// priority orders the jobs of one group).
    #[arg(long)]
    pub(crate) fair: bool,
    /// Stop serving the groups in turn: claim order across groups again.
    #[arg(long)]
    pub(crate) no_fair: bool,
    /// The most leases of the queue granted in any window of PERIOD, across every worker (a
    /// sliding window): N/PERIOD with PERIOD as 500ms, 1s, 1m or 1h; `none` removes it.
    #[arg(long, value_name = "N/PERIOD", allow_hyphen_values = true)]
    pub(crate) rate: Option<String>,
    /// The most leases of each group granted in any window of PERIOD (jobs without a group
    /// are not limited): N/PERIOD, or `none`.
    #[arg(long, value_name = "N/PERIOD", allow_hyphen_values = true)]
    pub(crate) rate_per_group: Option<String>,
}

/// The arguments of `lease groups`.
#[derive(Debug, clap::Args)]
pub(crate) struct GroupsArgs {
    /// The queue.
    pub(crate) queue: String,
    /// At most this many groups, the busiest (most unfinished jobs) first: 1 to 1,000.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u16).range(1..=1000))]
    pub(crate) limit: u16,
    /// The time statuses are judged at (Unix seconds or RFC 3339); default: the system clock.
    #[arg(long, allow_hyphen_values = true, value_parser = crate::when::parse)]
    pub(crate) now: Option<f64>,
}

impl GroupsArgs {
    /// The checked request.
    ///
    /// # Errors
    /// The first bad value, named.
    pub(crate) fn request(
        self,
        clock: impl FnOnce() -> f64,
    ) -> Result<ControlRequest, RequestError> {
        Ok(ControlRequest::Groups(
            QueueName::new(self.queue)?,
            usize::from(self.limit),
            Timestamp::new(self.now.unwrap_or_else(clock))?,
        ))
    }
}

impl LimitArgs {
    /// The checked request.
    ///
    /// # Errors
    /// The first bad value, named.
    pub(crate) fn request(
        self,
        clock: impl FnOnce() -> f64,
    ) -> Result<ControlRequest, RequestError> {
        crate::control::limit(self, clock())
    }
}

/// The arguments of `lease schedule`.
#[derive(Debug, clap::Args)]
pub(crate) struct ScheduleArgs {
    /// What to do.
    #[command(subcommand)]
    pub(crate) command: crate::control::ScheduleCommand,
}

impl ScheduleArgs {
    /// The checked request.
    ///
    /// # Errors
    /// The first bad value, named.
    pub(crate) fn request(
        self,
        clock: impl FnOnce() -> f64,
        read: ReadInput<'_>,
    ) -> Result<ControlRequest, RequestError> {
        let ScheduleArgs { command } = self;
        crate::control::schedule(command, clock, read)
    }
}

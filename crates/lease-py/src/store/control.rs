//! `StoreCore`'s methods on a queue's flow control and its schedules: pause, resume, limits,
//! the busiest groups, the throttle, every queue's settings; put, list, remove and run a
//! schedule.

use lease_domain::EnqueueSpec;
use pyo3::IntoPyObjectExt;
use pyo3::prelude::*;

use crate::args::{self, schedule_name};
use crate::errors::{Failure, invalid, to_py};
use crate::run::Pending;
use crate::values::{self, QueueSettings, Schedule, now_or_clock};

use crate::store::StoreCore;

#[pymethods]
impl StoreCore {
    /// Pauses ``queue`` (until resumed, or until the time ``until``): no claim leases its
    /// jobs from the moment the pause commits; enqueueing goes on and running leases are
    /// untouched. With ``group``, pauses only that group of the queue: its jobs are not
    /// leased while the queue's other groups run. Returns the queue's :class:`QueueSettings`.
    #[pyo3(signature = (queue, *, until = None, group = None, now = None))]
    fn pause(
        &self,
        py: Python<'_>,
        queue: &str,
        until: Option<f64>,
        group: Option<&str>,
        now: Option<f64>,
    ) -> PyResult<Pending> {
        let change = (|| {
            let until = until.map(|t| values::time("until", t)).transpose()?;
            Ok(match group.map(args::group).transpose()? {
                Some(group) => lease_domain::QueueChange::PauseGroup(group, until),
                None => lease_domain::QueueChange::Pause(until),
            })
        })();
        self.change_queue(py, queue, change, now)
    }

    /// Ends a pause of ``queue``, or with ``group`` of that group only.
    #[pyo3(signature = (queue, *, group = None, now = None))]
    fn resume(
        &self,
        py: Python<'_>,
        queue: &str,
        group: Option<&str>,
        now: Option<f64>,
    ) -> PyResult<Pending> {
        let change = group.map(args::group).transpose().map(|group| match group {
            Some(group) => lease_domain::QueueChange::ResumeGroup(group),
            None => lease_domain::QueueChange::Resume,
        });
        self.change_queue(py, queue, change, now)
    }

    /// Sets ``queue``'s concurrency limit (the most of its leases live at once, across
    /// every worker; 0 removes it), its default timeout in seconds (``no_timeout=True``
    /// removes it), the most live leases of each of its groups (``per_group``; 0 removes it)
    /// and whether each group runs one job at a time in claim order (``ordered``), the most
    /// leases of the queue granted in any window of a period (``rate``, ``"N/PERIOD"`` such as
    /// ``"100/1m"``; ``"none"`` removes it) and of each group (``rate_per_group``), and whether
    /// claims serve the groups in turn, the group served least recently first (``fair``). All
    /// given are one change, applied together or not at all.
    #[pyo3(signature = (queue, *, concurrency = None, timeout = None, no_timeout = false, per_group = None, ordered = None, rate = None, rate_per_group = None, fair = None, now = None))]
    #[allow(clippy::too_many_arguments)] // A queue's settings, as the caller names them.
    fn limit(
        &self,
        py: Python<'_>,
        queue: &str,
        concurrency: Option<u32>,
        timeout: Option<f64>,
        no_timeout: bool,
        per_group: Option<u32>,
        ordered: Option<bool>,
        rate: Option<&str>,
        rate_per_group: Option<&str>,
        fair: Option<bool>,
        now: Option<f64>,
    ) -> PyResult<Pending> {
        let rate_of = |name: &str, text: &str| -> Result<Option<lease_domain::Rate>, Failure> {
            if text == "none" {
                return Ok(None);
            }
            lease_domain::Rate::parse(text)
                .map(Some)
                .map_err(|e| Failure::Input(format!("{name}: {e}")))
        };
        let change = (|| {
            let timeout = match (timeout, no_timeout) {
                (Some(_), true) => {
                    return invalid("give timeout or no_timeout, not both".to_owned());
                }
                (Some(t), false) => Some(Some(
                    lease_domain::Ttl::new(t)
                        .map_err(|e| Failure::Input(format!("timeout: {e}")))?,
                )),
                (None, true) => Some(None),
                (None, false) => None,
            };
            // All given are one change: applied together or not at all.
            lease_domain::QueueChange::set(lease_domain::Limits {
                concurrency: concurrency.map(lease_domain::Concurrency::new),
                timeout,
                per_group: per_group.map(lease_domain::Concurrency::new),
                ordered,
                rate: rate.map(|r| rate_of("rate", r)).transpose()?,
                rate_per_group: rate_per_group
                    .map(|r| rate_of("rate_per_group", r))
                    .transpose()?,
                fair,
            })
            .map_or_else(
                || {
                    invalid(
                        "give concurrency (0 removes the limit), timeout, no_timeout, per_group, \
                         ordered, rate, rate_per_group or fair"
                            .to_owned(),
                    )
                },
                Ok,
            )
        })();
        self.change_queue(py, queue, change, now)
    }

    /// ``queue``'s busiest groups at ``now`` (most unfinished jobs first, at most ``limit``,
    /// 1 to 1,000), each as :class:`GroupLoad`: its waiting and running jobs, and whether it
    /// is paused or throttled.
    #[pyo3(signature = (queue, *, limit = 10, now = None))]
    fn groups(
        &self,
        py: Python<'_>,
        queue: &str,
        limit: usize,
        now: Option<f64>,
    ) -> PyResult<Pending> {
        let (queue, now) = to_py(
            py,
            (|| {
                if !(1..=1000).contains(&limit) {
                    return invalid(format!("limit: {limit} is not 1 to 1000"));
                }
                Ok((values::queue(queue)?, now_or_clock(now)?))
            })(),
        )?;
        self.same_process(py)?;
        let control = self.backend.control();
        self.call(
            py,
            async move {
                let standings =
                    lease_ports::control::busiest_groups(&*control, &queue, now, limit).await?;
                Ok(standings
                    .iter()
                    .map(values::GroupLoad::of)
                    .collect::<Vec<_>>())
            },
            |py, loads| loads.into_py_any(py),
        )
    }

    /// Where ``queue``'s rates stand at ``now``, as :class:`Throttle`: when its rate lets a
    /// claim lease again, if it lets none now, and the same for each throttled group.
    #[pyo3(signature = (queue, *, now = None))]
    fn throttle(&self, py: Python<'_>, queue: &str, now: Option<f64>) -> PyResult<Pending> {
        let (queue, now) = to_py(py, (|| Ok((values::queue(queue)?, now_or_clock(now)?)))())?;
        self.same_process(py)?;
        let control = self.backend.control();
        self.call(
            py,
            async move {
                let throttle = control.throttle(&queue, now).await?;
                Ok((queue, throttle))
            },
            |py, (queue, throttle)| values::Throttle::of(&queue, &throttle).into_py_any(py),
        )
    }

    /// Every queue that has settings, as :class:`QueueSettings` (``paused`` as of ``now``).
    #[pyo3(signature = (*, now = None))]
    fn queues(&self, py: Python<'_>, now: Option<f64>) -> PyResult<Pending> {
        let now = to_py(py, now_or_clock(now))?;
        self.same_process(py)?;
        let control = self.backend.control();
        self.call(
            py,
            async move { Ok(control.queues().await?) },
            move |py, rows| {
                let rows: Vec<QueueSettings> = rows
                    .iter()
                    .map(|(queue, settings)| QueueSettings::of(queue, settings, now))
                    .collect();
                rows.into_py_any(py)
            },
        )
    }

    /// Makes or changes the schedule ``name``: each tick of ``cron`` in the time zone ``tz``
    /// enqueues one job in ``queue``, its id ``NAME@TICK`` (the tick in UTC). ``catch_up`` is
    /// what a pass does after downtime: ``latest``, ``none``, ``all`` or ``all:N``. A change
    /// keeps the last tick, so no tick fires twice. Every ``lease serve`` and ``lease work``
    /// on the store runs the schedules.
    #[pyo3(signature = (name, *, cron, queue, tz = "UTC", priority = 0, max_attempts = None, timeout = None, payload = None, catch_up = "latest", now = None))]
    #[allow(clippy::too_many_arguments)] // A schedule's fields, each a keyword.
    fn put_schedule(
        &self,
        py: Python<'_>,
        name: &str,
        cron: &str,
        queue: &str,
        tz: &str,
        priority: i64,
        max_attempts: Option<u32>,
        timeout: Option<f64>,
        payload: Option<&Bound<'_, PyAny>>,
        catch_up: &str,
        now: Option<f64>,
    ) -> PyResult<Pending> {
        let payload = args::payload(payload)?;
        let spec = to_py(
            py,
            (|| {
                let name = schedule_name(name)?;
                // The calendar reads the expression and the zone now, so a bad one is refused
                // before anything is sent.
                lease_schedule::Calendar::new(cron, tz).or_else(|e| invalid(e.to_string()))?;
                Ok(lease_domain::ScheduleSpec {
                    name,
                    cron: cron.to_owned(),
                    zone: tz.to_owned(),
                    job: EnqueueSpec {
                        queue: values::queue(queue)?,
                        priority,
                        max_attempts,
                        timeout: timeout
                            .map(|t| {
                                lease_domain::Ttl::new(t)
                                    .map_err(|e| Failure::Input(format!("timeout: {e}")))
                            })
                            .transpose()?,
                        payload: payload?,
                        ..EnqueueSpec::default()
                    },
                    catch_up: lease_domain::CatchUp::parse(catch_up)
                        .or_else(|e| invalid(format!("catch_up: {e}")))?,
                })
            })(),
        )?;
        let now = to_py(py, now_or_clock(now))?;
        self.same_process(py)?;
        let control = self.backend.control();
        self.call(
            py,
            async move { Ok(control.put_schedule(&spec, now).await?) },
            move |py, schedule| Schedule::of(&schedule, now).into_py_any(py),
        )
    }

    /// Every schedule, as :class:`Schedule` (with its next tick after ``now``).
    #[pyo3(signature = (*, now = None))]
    fn schedules(&self, py: Python<'_>, now: Option<f64>) -> PyResult<Pending> {
        let now = to_py(py, now_or_clock(now))?;
        self.same_process(py)?;
        let control = self.backend.control();
        self.call(
            py,
            async move { Ok(control.schedules().await?) },
            move |py, schedules| {
                let rows: Vec<Schedule> = schedules.iter().map(|s| Schedule::of(s, now)).collect();
                rows.into_py_any(py)
            },
        )
    }

    /// Removes a schedule (the jobs its ticks made stay); ``False`` when there was none.
    #[pyo3(signature = (name))]
    fn remove_schedule(&self, py: Python<'_>, name: &str) -> PyResult<Pending> {
        let name = to_py(py, schedule_name(name))?;
        self.same_process(py)?;
        let control = self.backend.control();
        self.call(
            py,
            async move { Ok(control.remove_schedule(&name).await?) },
            |py, removed| removed.into_py_any(py),
        )
    }

    /// Enqueues the schedule's job now, outside its ticks, as ``NAME@run-TIME`` (runs asked
    /// for within one second are one job). Returns ``(job_id, inserted)``, or ``None`` when
    /// there is no such schedule.
    #[pyo3(signature = (name, *, now = None))]
    fn run_schedule(&self, py: Python<'_>, name: &str, now: Option<f64>) -> PyResult<Pending> {
        let name = to_py(py, schedule_name(name))?;
        let now = to_py(py, now_or_clock(now))?;
        self.same_process(py)?;
        let control = self.backend.control();
        self.call(
            py,
            async move { Ok(lease_schedule::run_now(&*control, &name, now).await?) },
            |py, ran| {
                ran.map(|ran| (ran.id.as_str().to_owned(), ran.inserted))
                    .into_py_any(py)
            },
        )
    }
}

//! Queue settings and schedules (the port's `Control`) through the service's admin routes.

use async_trait::async_trait;
use lease_domain::{QueueName, Timestamp};
use lease_ports::StoreError;
use serde_json::{Value, json};

use crate::HttpLeaseStore;
use crate::answers::{self, path};

/// Queue settings and schedules through the service's admin routes.
#[async_trait]
impl lease_ports::control::Control for HttpLeaseStore {
    async fn change_queue(
        &self,
        queue: &QueueName,
        change: lease_domain::QueueChange,
    ) -> Result<lease_domain::QueueSettings, StoreError> {
        use lease_domain::QueueChange;
        let base = format!("/v1/queues/{}", path(queue.as_str()));
        let answer = match change {
            QueueChange::Pause(until) => {
                let body = match until {
                    Some(t) => json!({ "until": t.get() }),
                    None => json!({}),
                };
                self.post(&format!("{base}/pause"), body, None).await?
            }
            QueueChange::Resume => {
                self.post(&format!("{base}/resume"), json!({}), None)
                    .await?
            }
            QueueChange::Concurrency(limit) => {
                let limits = lease_domain::Limits {
                    concurrency: Some(limit),
                    ..lease_domain::Limits::default()
                };
                self.put_limits(&base, limits).await?
            }
            QueueChange::Timeout(timeout) => {
                let limits = lease_domain::Limits {
                    timeout: Some(timeout),
                    ..lease_domain::Limits::default()
                };
                self.put_limits(&base, limits).await?
            }
            QueueChange::Limits(limits) => self.put_limits(&base, limits).await?,
            QueueChange::PauseGroup(group, until) => {
                let body = match until {
                    Some(t) => json!({ "until": t.get() }),
                    None => json!({}),
                };
                let at = format!("{base}/groups/{}/pause", path(group.as_str()));
                self.post(&at, body, None).await?
            }
            // A hold is a lease holder's write (`LeaseStore::hold_group`), not an admin's.
            QueueChange::HoldGroup(..) => {
                return Err(StoreError::Incompatible {
                    path: base,
                    reason: "a group is held by its job's lease holder (hold_group); an \
                             admin pauses it (PauseGroup)"
                        .into(),
                });
            }
            QueueChange::ResumeGroup(group) => {
                let at = format!("{base}/groups/{}/resume", path(group.as_str()));
                self.post(&at, json!({}), None).await?
            }
        };
        if answer.status != 200 {
            return Err(answer.error());
        }
        Ok(answers::queue(&answer.body)?.1)
    }

    async fn queues(&self) -> Result<Vec<(QueueName, lease_domain::QueueSettings)>, StoreError> {
        self.list_of("/v1/queues", "queues", answers::queue).await
    }

    async fn throttle(
        &self,
        queue: &QueueName,
        now: Timestamp,
    ) -> Result<lease_domain::Throttle, StoreError> {
        // A server that trusts caller clocks judges at `now`, any other at its own.
        let at = format!("/v1/queues/{}/throttle", path(queue.as_str()));
        let at = match self.now(now) {
            Some(now) => format!("{at}?now={now}"),
            None => at,
        };
        let answer = self.get(&at).await?;
        if answer.status != 200 {
            return Err(answer.error());
        }
        answers::throttle(&answer.body)
    }

    async fn group_loads(
        &self,
        queue: &QueueName,
        now: Timestamp,
        limit: usize,
    ) -> Result<Vec<lease_ports::control::GroupLoad>, StoreError> {
        // The server answers at most 1,000, as does every store's page.
        let limit = limit.clamp(1, 1000);
        let mut at = format!("/v1/queues/{}/groups?limit={limit}", path(queue.as_str()));
        if let Some(now) = self.now(now) {
            at = format!("{at}&now={now}");
        }
        let answer = self.get(&at).await?;
        if answer.status != 200 {
            return Err(answer.error());
        }
        answers::group_loads(&answer.body)
    }

    async fn put_schedule(
        &self,
        spec: &lease_domain::ScheduleSpec,
        now: Timestamp,
    ) -> Result<lease_domain::Schedule, StoreError> {
        let job = &spec.job;
        let mut body = json!({
            "cron": spec.cron,
            "zone": spec.zone,
            "queue": job.queue.as_str(),
            "priority": job.priority,
        });
        if let Some(now) = self.now(now) {
            body["now"] = json!(now);
        }
        if let Some(max) = job.max_attempts {
            body["max_attempts"] = json!(max);
        }
        if let Some(timeout) = job.timeout {
            body["timeout"] = json!(timeout.get());
        }
        if let Some(payload) = &job.payload {
            let text = std::str::from_utf8(payload.as_bytes()).map_err(|_| {
                StoreError::InvalidInput(lease_domain::InputError::InvalidSetting(
                    "a schedule's payload through the service must be UTF-8 text".to_owned(),
                ))
            })?;
            body["payload"] = json!(text);
        }
        match spec.catch_up {
            lease_domain::CatchUp::Latest => body["catch_up"] = json!("latest"),
            lease_domain::CatchUp::Skip => body["catch_up"] = json!("none"),
            lease_domain::CatchUp::All(n) => {
                body["catch_up"] = json!("all");
                body["catch_up_max"] = json!(n);
            }
        }
        let answer = self
            .send(
                reqwest::Method::PUT,
                &format!("/v1/schedules/{}", path(spec.name.as_str())),
                Some(body),
                None,
                true,
            )
            .await?;
        if answer.status != 200 {
            return Err(answer.error());
        }
        answers::schedule(&answer.body)
    }

    async fn remove_schedule(&self, name: &lease_domain::ScheduleName) -> Result<bool, StoreError> {
        let answer = self
            .send(
                reqwest::Method::DELETE,
                &format!("/v1/schedules/{}", path(name.as_str())),
                None,
                None,
                true,
            )
            .await?;
        if answer.status != 200 {
            return Err(answer.error());
        }
        answers::boolean(&answer.body["removed"], "removed")
    }

    async fn schedules(&self) -> Result<Vec<lease_domain::Schedule>, StoreError> {
        self.list_of("/v1/schedules", "schedules", answers::schedule)
            .await
    }

    async fn fire_schedule(
        &self,
        fire: &lease_ports::control::Fire,
    ) -> Result<Option<Vec<bool>>, StoreError> {
        let jobs: Vec<Value> = fire
            .jobs
            .iter()
            .map(|(id, spec)| {
                json!({
                    "id": id.as_str(),
                    "tick": spec.enqueued_at.unwrap_or(fire.tick).get(),
                })
            })
            .collect();
        let body = json!({
            "version": fire.version,
            "last_tick": fire.last_tick.map(Timestamp::get),
            "tick": fire.tick.get(),
            "jobs": jobs,
        });
        let answer = self
            .post(
                &format!("/v1/schedules/{}/fire", path(fire.name.as_str())),
                body,
                None,
            )
            .await?;
        if answer.status != 200 {
            return Err(answer.error());
        }
        if !answers::boolean(&answer.body["fired"], "fired")? {
            return Ok(None);
        }
        answer.body["inserted"]
            .as_array()
            .ok_or_else(|| answers::corrupt(&answer, "inserted"))?
            .iter()
            .map(|v| answers::boolean(v, "inserted"))
            .collect::<Result<Vec<bool>, _>>()
            .map(Some)
    }
}

//! Queue settings and schedules (migration 8). A claim reads its queue's settings `FOR SHARE`
//! in its own transaction; a change of settings locks the table (`EXCLUSIVE`, which every such
//! read conflicts with), so it waits for the claims in flight and every later claim sees it.
//! Claims of a queue with a concurrency limit or group rules take a transaction-scoped
//! advisory lock on the queue before they count its live leases or read its groups' standing,
//! so two of them never decide on the same count.
//! A fire locks its schedule's row, decides with the domain, enqueues and records its tick in
//! one transaction.

use async_trait::async_trait;
use lease_domain::{
    Command, Fence, QueueChange, QueueName, QueueSettings, Schedule, ScheduleName, ScheduleSpec,
    Timestamp, decide_put_schedule,
};
use lease_ports::StoreError;
use lease_ports::control::{Control, Fire};

use crate::PgLeaseStore;
use crate::changes::Changes;
use crate::connection::{Conn, Statements};
use crate::control_sql::{change_in, decode_grants, decode_schedule, write_schedule};
use crate::error::{self, Stage};
use crate::row;
use crate::tx::rollback;

impl PgLeaseStore {
    /// A pooled connection inside a new transaction. An error before [`PgLeaseStore::end`]
    /// drops the connection unclean: it is closed, and the server rolls the transaction back.
    async fn begin(&self) -> Result<(Conn, Statements), StoreError> {
        let conn = self.conn().await?;
        let s = Statements::prepare(&conn, &self.sql).await?;
        conn.client()
            .execute(&s.begin, &[])
            .await
            .map_err(|e| error::map(e, Stage::BeforeCommit))?;
        Ok((conn, s))
    }

    /// Commits (or, without `commit`, rolls back) the transaction `begin` opened.
    async fn end(mut conn: Conn, s: &Statements, commit: bool) -> Result<(), StoreError> {
        if commit {
            conn.client()
                .execute(&s.commit, &[])
                .await
                .map_err(|e| error::map(e, Stage::Commit))?;
        } else {
            rollback(conn.client(), s).await?;
        }
        conn.clean();
        Ok(())
    }
}

#[async_trait]
impl Control for PgLeaseStore {
    async fn change_queue(
        &self,
        queue: &QueueName,
        change: QueueChange,
    ) -> Result<QueueSettings, StoreError> {
        let (conn, s) = self.begin().await?;
        let next = change_in(conn.client(), &self.control, queue, change).await?;
        Self::end(conn, &s, true).await?;
        Ok(next)
    }

    async fn queues(&self) -> Result<Vec<(QueueName, QueueSettings)>, StoreError> {
        let conn = self.conn().await?;
        let rows = conn
            .client()
            .query(&self.control.all_queues, &[])
            .await
            .map_err(|e| error::map(e, Stage::BeforeCommit))?;
        let mut conn = conn;
        conn.clean();
        rows.iter().map(crate::row::decode_queue).collect()
    }

    async fn throttle(
        &self,
        queue: &QueueName,
        now: Timestamp,
    ) -> Result<lease_domain::Throttle, StoreError> {
        let settings = self.settings_of(queue).await?;
        if !settings.limits_rate() {
            return Ok(lease_domain::Throttle::default());
        }
        let conn = self.conn().await?;
        let rows = conn
            .client()
            .query(&self.control.queue_grants, &[&queue.as_str(), &now.get()])
            .await
            .map_err(|e| error::map(e, Stage::BeforeCommit))?;
        let mut conn = conn;
        conn.clean();
        let grants = decode_grants(&rows)?;
        Ok(lease_domain::Throttle::of(&settings, &grants, now))
    }

    async fn put_schedule(
        &self,
        spec: &ScheduleSpec,
        now: Timestamp,
    ) -> Result<Schedule, StoreError> {
        let sql = &self.control;
        let (conn, s) = self.begin().await?;
        let c = conn.client();
        let before = |e| error::map(e, Stage::BeforeCommit);
        let row = c
            .query_opt(&sql.schedule_for_update, &[&spec.name.as_str()])
            .await
            .map_err(before)?;
        let current = row.as_ref().map(decode_schedule).transpose()?;
        let next = decide_put_schedule(current.as_ref(), spec.clone(), now);
        write_schedule(c, sql, &next).await.map_err(before)?;
        Self::end(conn, &s, true).await?;
        Ok(next)
    }

    async fn group_loads(
        &self,
        queue: &QueueName,
        now: Timestamp,
        limit: usize,
    ) -> Result<Vec<lease_ports::control::GroupLoad>, StoreError> {
        let conn = self.conn().await?;
        let rows = conn
            .client()
            .query(&self.control.group_loads, &[&queue.as_str(), &now.get()])
            .await
            .map_err(|e| error::map(e, Stage::BeforeCommit))?;
        let mut conn = conn;
        conn.clean();
        let read = |e: tokio_postgres::Error| {
            StoreError::Corrupt(lease_ports::Detail::caused_by(
                format!("a group's load cannot be read: {e}"),
                e,
            ))
        };
        let loads = rows
            .iter()
            .map(|row| {
                let group: String = row.try_get(0).map_err(read)?;
                Ok(lease_ports::control::GroupLoad {
                    group: lease_domain::GroupKey::stored(group).map_err(|e| {
                        StoreError::Corrupt(format!("a job's stored group: {e}").into())
                    })?,
                    running: lease_ports::codec::count(
                        row.try_get(1).map_err(read)?,
                        "a group's running jobs",
                    )?,
                    backlog: lease_ports::codec::count(
                        row.try_get(2).map_err(read)?,
                        "a group's waiting jobs",
                    )?,
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        Ok(lease_ports::control::busiest(loads, limit))
    }

    async fn remove_schedule(&self, name: &ScheduleName) -> Result<bool, StoreError> {
        let conn = self.conn().await?;
        let removed = conn
            .client()
            .execute(&self.control.delete_schedule, &[&name.as_str()])
            .await
            .map_err(|e| error::map(e, Stage::Commit))?;
        let mut conn = conn;
        conn.clean();
        Ok(removed > 0)
    }

    async fn schedules(&self) -> Result<Vec<Schedule>, StoreError> {
        let conn = self.conn().await?;
        let rows = conn
            .client()
            .query(&self.control.all_schedules, &[])
            .await
            .map_err(|e| error::map(e, Stage::BeforeCommit))?;
        let mut conn = conn;
        conn.clean();
        rows.iter().map(decode_schedule).collect()
    }

    async fn fire_schedule(&self, fire: &Fire) -> Result<Option<Vec<bool>>, StoreError> {
        let sql = &self.control;
        let (conn, s) = self.begin().await?;
        let s = &s;
        {
            let c = conn.client();
            let before = |e| error::map(e, Stage::BeforeCommit);
            let row = c
                .query_opt(&sql.schedule_for_update, &[&fire.name.as_str()])
                .await
                .map_err(before)?;
            let current = row.as_ref().map(decode_schedule).transpose()?;
            let Some(fired) = fire.decide(current.as_ref()) else {
                Self::end(conn, s, false).await?;
                return Ok(None);
            };
            // Each job decided in order (after its row lock), its changes written set by set
            // with the schedule's row.
            let mut changes = Changes::default();
            let mut decided = Vec::with_capacity(fire.jobs.len());
            let mut current_of = std::collections::HashMap::new();
            for (at, (id, spec)) in fire.jobs.iter().enumerate() {
                let key = id.as_str();
                let row = c.query_opt(&s.lock, &[&key]).await.map_err(before)?;
                let stored = row.map(|r| row::decode(id, &r, 0)).transpose()?;
                let current = match current_of.get(id) {
                    Some(decided) => Some(Clone::clone(decided)),
                    None => stored,
                };
                let purged = match &current {
                    None => c
                        .query_opt(&s.lock_purged, &[&key])
                        .await
                        .map_err(before)?
                        .map(|r| {
                            let f: i64 = r.get(0);
                            Fence::try_from(f).map_err(|f| {
                                StoreError::Corrupt(
                                    format!("job {id}: stored purged fence {f} is negative").into(),
                                )
                            })
                        })
                        .transpose()?,
                    Some(_) => None,
                };
                let command = Command::EnqueueWith(spec.clone());
                let decision = command.decided(id, current.as_ref(), purged);
                if let Some(next) = decision.row() {
                    current_of.insert(id.clone(), next.clone());
                }
                changes.add(at, id, current.as_ref(), decision.changes)?;
                decided.push(decision.outcome);
            }
            write_schedule(c, sql, &fired).await.map_err(before)?;
            changes.wrote();
            let written = changes.commit(self, &conn, s, None).await?;
            for at in written.lost {
                if let Some(outcome @ lease_domain::Outcome::Enqueued(true)) = decided.get_mut(at) {
                    *outcome = lease_domain::Outcome::Enqueued(false);
                }
            }
            let mut conn = conn;
            conn.clean();
            decided
                .into_iter()
                .map(lease_ports::outcome_as)
                .collect::<Result<Vec<bool>, _>>()
                .map(Some)
        }
    }
}

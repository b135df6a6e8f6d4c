//! Export and import of every job, purge mark, queue setting and schedule, for `lease migrate`.

use async_trait::async_trait;
use lease_domain::{Epoch, JobId};
use lease_ports::transfer::{Imported, Snapshot, TargetView, Transfer, plan_import};
use lease_ports::{JobRecord, StoreError};
use rusqlite::Connection;

use crate::{SqliteLeaseStore, error, row, tx, write};

/// Every job id in enqueue order (a job without a queue row last, in id order).
const SELECT_ORDER: &str = "SELECT j.id FROM jobs j LEFT JOIN jobs_queue q ON q.id = j.id \
    ORDER BY q.seq IS NULL, q.seq, j.id";
const SELECT_MARKS: &str = "SELECT id, fence FROM purged ORDER BY id";

fn ids(conn: &Connection) -> Result<Vec<JobId>, StoreError> {
    let texts: Vec<String> = conn
        .prepare_cached(SELECT_ORDER)
        .and_then(|mut stmt| stmt.query_map([], |r| r.get(0))?.collect())
        .map_err(error::sql(conn))?;
    texts.into_iter().map(lease_ports::codec::job_id).collect()
}

fn snapshot(conn: &Connection) -> Result<Snapshot, StoreError> {
    let mut snapshot = Snapshot::default();
    for id in ids(conn)? {
        if let Some(job) = row::load(conn, &id)? {
            snapshot.jobs.push(JobRecord { id, job });
        }
    }
    let marks: Vec<(String, i64)> = conn
        .prepare_cached(SELECT_MARKS)
        .and_then(|mut stmt| {
            stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect()
        })
        .map_err(error::sql(conn))?;
    for (id, fence) in marks {
        let id = lease_ports::codec::job_id(id)?;
        let fence = lease_ports::codec::fence(fence, &format!("purged job {id}: fence"))?;
        snapshot.purged.push((id, fence));
    }
    snapshot.queues = crate::control::queues(conn)?;
    snapshot.schedules = crate::control::schedules(conn)?;
    snapshot.checkpoints = crate::checkpoint::all(conn)?;
    snapshot.traces = crate::trace::all(conn)?;
    snapshot.attempts = crate::attempts::all(conn)?;
    snapshot.epoch = crate::epoch::read(conn)?;
    Ok(snapshot)
}

/// Writes the snapshot inside the open transaction, as the shared plan says.
fn write(
    conn: &Connection,
    target: &str,
    incoming: &Snapshot,
    merge: bool,
) -> Result<Imported, StoreError> {
    let held = TargetView::of(&snapshot(conn)?);
    let plan = plan_import(target, held, incoming, merge)?;
    crate::epoch::raise(conn, plan.epoch)?;
    for (id, job) in &plan.inserts {
        row::store(conn, true, id, job)?;
        row::run_with(conn, write::FORGET_PURGED, id.as_str())?;
        if !job.after.is_empty() {
            crate::workflow::write_parents(conn, id, job)?;
        }
    }
    for (id, job) in &plan.updates {
        row::store(conn, false, id, job)?;
        crate::workflow::write_parents(conn, id, job)?;
    }
    for (id, fence) in &plan.marks {
        conn.prepare_cached(write::REMEMBER_PURGED)
            .and_then(|mut stmt| stmt.execute(rusqlite::params![id.as_str(), i64::from(*fence)]))
            .map_err(error::sql(conn))?;
    }
    for (queue, settings) in &plan.queues {
        crate::control::write_settings(conn, queue, settings)?;
    }
    for schedule in &plan.schedules {
        crate::control::write_schedule(conn, schedule)?;
    }
    for id in &plan.cleared {
        crate::checkpoint::clear(conn, id)?;
    }
    crate::checkpoint::put(conn, &plan.checkpoints)?;
    for id in &plan.cleared {
        crate::trace::set(conn, id, None)?;
    }
    for (id, trace) in &plan.traces {
        crate::trace::set(conn, id, Some(trace))?;
    }
    for id in &plan.cleared {
        crate::attempts::clear(conn, id)?;
    }
    for (id, attempt) in &plan.attempts {
        crate::attempts::keep(conn, id, attempt)?;
    }
    Ok(plan.imported)
}

#[async_trait]
impl Transfer for SqliteLeaseStore {
    async fn export(&self) -> Result<Snapshot, StoreError> {
        self.run(|store| store.with_conn(|conn| tx::reading(conn, snapshot)))
            .await
    }

    async fn import(&self, incoming: &Snapshot, merge: bool) -> Result<Imported, StoreError> {
        self.refuse_if_read_only()?;
        let incoming = incoming.clone();
        self.run(move |store| {
            let target = store.path().display().to_string();
            store.with_conn(|conn| {
                tx::run(conn, "BEGIN IMMEDIATE").map_err(error::sql(conn))?;
                match write(conn, &target, &incoming, merge) {
                    Ok(imported) => match tx::run(conn, "COMMIT") {
                        Ok(()) => Ok(imported),
                        Err(e) => {
                            let err = error::sql(conn)(e);
                            tx::roll_back(conn);
                            Err(StoreError::Indeterminate(
                                format!("the migration's commit failed: {err}").into(),
                            ))
                        }
                    },
                    Err(e) => {
                        tx::roll_back(conn);
                        Err(e)
                    }
                }
            })
        })
        .await
    }

    async fn epoch(&self) -> Result<Epoch, StoreError> {
        self.run(|store| store.with_conn(|conn| tx::reading(conn, crate::epoch::read)))
            .await
    }

    async fn raise_epoch(&self, at_least: Epoch) -> Result<Epoch, StoreError> {
        self.refuse_if_read_only()?;
        self.run(move |store| {
            store.with_conn(|conn| tx::immediate(conn, |conn| crate::epoch::raise(conn, at_least)))
        })
        .await
    }

    async fn check_heads(
        &self,
        rebuild: bool,
    ) -> Result<lease_ports::transfer::HeadCheck, StoreError> {
        if rebuild {
            self.refuse_if_read_only()?;
        }
        self.run(move |store| {
            store.with_conn(|conn| {
                if rebuild {
                    tx::immediate(conn, |conn| {
                        crate::heads::rebuild(conn)?;
                        crate::heads::check(conn)
                    })
                } else {
                    tx::reading(conn, crate::heads::check)
                }
            })
        })
        .await
    }
}

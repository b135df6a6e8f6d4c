//! Workflows inside the open transaction: a batch's parents checked before anything is
//! written, a job's parent rows written with it, a child judged against its parents, and the
//! jobs waiting on a job that has just finished released or cancelled (the domain decides:
//! `lease_domain::{check_workflow, decide_child, propagate}`).

use std::collections::BTreeSet;

use lease_domain::{
    EnqueueSpec, InputError, Job, JobId, Status, Timestamp, Waiting, check_workflow, decide_child,
    propagate,
};
use lease_ports::StoreError;
use rusqlite::Connection;

use crate::error;
use crate::row::{load, store};

/// Each parent of `?1` with the columns its status is read from (NULL `done` for a parent
/// that is gone: purged after it finished).
const SELECT_STANDS: &str = "SELECT p.parent, j.done, q.finished FROM lease_parents p \
    LEFT JOIN jobs j ON j.id = p.parent LEFT JOIN jobs_queue q ON q.id = p.parent \
    WHERE p.child = ?1 ORDER BY p.ord";

/// The jobs waiting on `?1`.
const SELECT_WAITING_CHILDREN: &str = "SELECT p.child FROM lease_parents p \
    JOIN jobs_queue q ON q.id = p.child WHERE p.parent = ?1 AND q.finished = 'waiting' \
    ORDER BY p.child";

const SELECT_CHILDREN: &str = "SELECT child FROM lease_parents WHERE parent = ?1 \
    AND (?2 IS NULL OR child > ?2) ORDER BY child LIMIT ?3";

const DELETE_PARENTS: &str = "DELETE FROM lease_parents WHERE child = ?1";

const INSERT_PARENT: &str = "INSERT INTO lease_parents(child, parent, ord) VALUES (?1, ?2, ?3)";

const EXISTS: &str = "SELECT 1 FROM jobs WHERE id = ?1";

/// The jobs that name `parent`, in id order after `after`, at most `limit`.
pub(crate) fn children(
    conn: &Connection,
    parent: &JobId,
    after: Option<&JobId>,
    limit: usize,
) -> Result<Vec<JobId>, StoreError> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let mut stmt = conn
        .prepare_cached(SELECT_CHILDREN)
        .map_err(error::sql(conn))?;
    let ids: Vec<String> = stmt
        .query_map(
            rusqlite::params![parent.as_str(), after.map(JobId::as_str), limit],
            |r| r.get(0),
        )
        .and_then(Iterator::collect)
        .map_err(error::sql(conn))?;
    ids.into_iter().map(lease_ports::codec::job_id).collect()
}

/// Refuses a batch whose workflow the domain refuses (a missing parent, a job naming
/// itself, a cycle, too many parents), before anything of it is written.
pub(crate) fn check(conn: &Connection, batch: &[(JobId, EnqueueSpec)]) -> Result<(), StoreError> {
    if batch.iter().all(|(_, spec)| spec.after.is_empty()) {
        return Ok(());
    }
    let in_batch: BTreeSet<&JobId> = batch.iter().map(|(id, _)| id).collect();
    let mut stored = BTreeSet::new();
    let mut stmt = conn.prepare_cached(EXISTS).map_err(error::sql(conn))?;
    for parent in batch.iter().flat_map(|(_, spec)| &spec.after) {
        if !in_batch.contains(parent)
            && !stored.contains(parent)
            && stmt.exists([parent.as_str()]).map_err(error::sql(conn))?
        {
            stored.insert(parent.clone());
        }
    }
    let named: Vec<(JobId, Vec<JobId>)> = batch
        .iter()
        .map(|(id, spec)| (id.clone(), spec.after.clone()))
        .collect();
    check_workflow(&named, |p| stored.contains(p))
        .map_err(|e| StoreError::InvalidInput(InputError::from(e)))?;
    Ok(())
}

/// Writes the parent rows of `child` as `job` names them (replacing any it had).
pub(crate) fn write_parents(conn: &Connection, child: &JobId, job: &Job) -> Result<(), StoreError> {
    crate::row::run_with(conn, DELETE_PARENTS, child.as_str())?;
    let mut stmt = conn
        .prepare_cached(INSERT_PARENT)
        .map_err(error::sql(conn))?;
    for (ord, parent) in job.after.iter().enumerate() {
        let ord = i64::try_from(ord).unwrap_or(i64::MAX);
        stmt.execute(rusqlite::params![child.as_str(), parent.as_str(), ord])
            .map_err(error::sql(conn))?;
    }
    Ok(())
}

/// How each parent of `child` stands: its end, `None` while it can still run; a parent that
/// is gone was purged after it finished and counts as done.
fn stands(conn: &Connection, child: &JobId) -> Result<Vec<(JobId, Option<Status>)>, StoreError> {
    let mut stmt = conn
        .prepare_cached(SELECT_STANDS)
        .map_err(error::sql(conn))?;
    let rows: Vec<(String, Option<bool>, Option<String>)> = stmt
        .query_map([child.as_str()], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .and_then(Iterator::collect)
        .map_err(error::sql(conn))?;
    rows.into_iter()
        .map(|(parent, done, finished)| {
            let parent = lease_ports::codec::job_id(parent)?;
            let stands = lease_ports::codec::parent_end(&parent, done, finished.as_deref())?;
            Ok((parent, stands))
        })
        .collect()
}

/// Judges `id` against its parents and stores what that decides (a cancel releases its own
/// waiting children in turn).
pub(crate) fn judge(conn: &Connection, id: &JobId) -> Result<(), StoreError> {
    let Some(job) = load(conn, id)? else {
        return Ok(());
    };
    let fate = decide_child(job.on_parent_failure, &stands(conn, id)?);
    if let Some(next) = job.settled(&fate, job.updated) {
        store(conn, false, id, &next)?;
        if let Some(end) = next.finished() {
            release(conn, id, end, next.updated)?;
        }
    }
    Ok(())
}

/// Settles the jobs waiting on `finished`, which ended as `end` at `at`, transitively.
pub(crate) fn release(
    conn: &Connection,
    finished: &JobId,
    end: Status,
    at: Option<Timestamp>,
) -> Result<(), StoreError> {
    let mut failed = None;
    let mut children_of = |parent: &JobId| match waiting_on(conn, parent) {
        Ok(children) => children,
        Err(e) => {
            failed.get_or_insert(e);
            Vec::new()
        }
    };
    let fates = propagate(finished, end, &mut children_of);
    if let Some(e) = failed {
        return Err(e);
    }
    for (child, fate) in fates {
        if let Some(next) = load(conn, &child)?.and_then(|job| job.settled(&fate, at)) {
            store(conn, false, &child, &next)?;
        }
    }
    Ok(())
}

/// The jobs waiting on `parent`, each with how its parents stand.
fn waiting_on(conn: &Connection, parent: &JobId) -> Result<Vec<Waiting>, StoreError> {
    let mut stmt = conn
        .prepare_cached(SELECT_WAITING_CHILDREN)
        .map_err(error::sql(conn))?;
    let ids: Vec<String> = stmt
        .query_map([parent.as_str()], |r| r.get(0))
        .and_then(Iterator::collect)
        .map_err(error::sql(conn))?;
    let mut waiting = Vec::with_capacity(ids.len());
    for id in ids {
        let id = lease_ports::codec::job_id(id)?;
        let Some(job) = load(conn, &id)? else {
            continue;
        };
        waiting.push(Waiting {
            parents: stands(conn, &id)?,
            policy: job.on_parent_failure,
            id,
        });
    }
    Ok(waiting)
}

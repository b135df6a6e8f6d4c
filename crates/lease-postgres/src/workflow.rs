//! Workflows inside the open transaction: a batch's parents checked (and locked `FOR SHARE`,
//! so a parent cannot finish unseen while its child is written), a job's parent rows written
//! with it, a child judged against its parents, and the jobs waiting on a job that has just
//! finished released or cancelled. The domain decides (`lease_domain::{check_workflow,
//! decide_child, Propagation}`); these are its reads and writes.
//!
//! Locks are taken from parent to child (a finishing parent's row, then each waiting child's),
//! the order every writer of a workflow follows, so two of them never wait on each other.

use std::collections::{BTreeSet, HashMap};

use lease_domain::{
    EnqueueSpec, InputError, Job, JobId, Propagation, Status, Timestamp, Waiting, check_workflow,
    decide_child,
};
use lease_ports::{JobRecord, StoreError};

use crate::connection::Conn;
use crate::error::{self, Stage};
use crate::row;
use crate::row::{Encoded, Standing};
use crate::sql;

/// The statements of workflows, spelled for one schema.
#[derive(Debug)]
pub(crate) struct WorkflowSql {
    /// Whether job `$1` has children waiting on it.
    pub(crate) has_waiting: String,
    /// Reads and locks the children waiting on `$1` with their policy, in id order (a
    /// finishing job's first statement of each generation).
    lock_children: String,
    /// How each unfinished parent of each child waiting on `$1` stands, each child's in its
    /// order (sent with [`WorkflowSql::lock_children`], in the same round trip).
    stands_of_children: String,
    /// The jobs that name `$1`, in id order after `$2` (when not NULL), at most `$3`.
    pub(crate) children: String,
    /// Reads and locks the jobs `$1` with their policy, in id order.
    lock_many: String,
    /// How each parent of each job of `$1` stands, each job's in its order.
    stands_many: String,
    /// The parents of the jobs `$1`, each job's in its order.
    parents_of: String,
    /// The ids of `$1` that exist, locked `FOR SHARE`.
    lock_shared: String,
    /// Writes the parents and the policy of jobs, replacing any: deletes the parents of the
    /// jobs `$1`, inserts the rows (`$1` child, `$2` parent, `$3` order), sets each job's
    /// policy (`$1` ids, `$2` policies).
    delete_parents: String,
    insert_parents: String,
    set_policy: String,
    /// Writes a generation of settled children in one statement (`sql::update_many`).
    update_many: String,
}

impl WorkflowSql {
    pub(crate) fn new(s: &str) -> Self {
        Self {
            has_waiting: format!(
                "SELECT EXISTS (SELECT 1 FROM {s}.parents p JOIN {s}.jobs c ON c.id = p.child \
                 WHERE p.parent = $1 AND c.ended = 'waiting')"
            ),
            lock_children: format!(
                "SELECT id, {} FROM {s}.jobs WHERE id IN \
                 (SELECT child FROM {s}.parents WHERE parent = $1) AND ended = 'waiting' \
                 ORDER BY id COLLATE \"C\" FOR UPDATE",
                sql::READ_COLUMNS
            ),
            stands_of_children: format!(
                "SELECT p.child, p.parent, j.done, j.ended FROM {s}.parents p \
                 JOIN {s}.jobs j ON j.id = p.parent WHERE p.child IN \
                 (SELECT q.child FROM {s}.parents q JOIN {s}.jobs c ON c.id = q.child \
                 WHERE q.parent = $1 AND c.ended = 'waiting') \
                 AND NOT j.done ORDER BY p.child, p.ord"
            ),
            children: format!(
                "SELECT child FROM {s}.parents WHERE parent = $1 \
                 AND ($2::text IS NULL OR child COLLATE \"C\" > $2) \
                 ORDER BY child COLLATE \"C\" LIMIT $3"
            ),
            lock_many: format!(
                "SELECT id, {} FROM {s}.jobs WHERE id = ANY($1::text[]) \
                 ORDER BY id COLLATE \"C\" FOR UPDATE",
                sql::READ_COLUMNS
            ),
            // Done parents (and parents gone, which count as done) are left out: how a child
            // is decided depends only on the others (`lease_domain::decide_child`).
            stands_many: format!(
                "SELECT p.child, p.parent, j.done, j.ended FROM {s}.parents p \
                 JOIN {s}.jobs j ON j.id = p.parent WHERE p.child = ANY($1::text[]) \
                 AND NOT j.done ORDER BY p.child, p.ord"
            ),
            parents_of: format!(
                "SELECT child, parent FROM {s}.parents WHERE child = ANY($1::text[]) \
                 ORDER BY child, ord"
            ),
            lock_shared: format!(
                "SELECT id FROM {s}.jobs WHERE id = ANY($1::text[]) ORDER BY id FOR SHARE"
            ),
            delete_parents: format!("DELETE FROM {s}.parents WHERE child = ANY($1::text[])"),
            insert_parents: format!(
                "INSERT INTO {s}.parents (child, parent, ord) \
                 SELECT * FROM unnest($1::text[], $2::text[], $3::integer[])"
            ),
            update_many: sql::update_many(s),
            set_policy: format!(
                "UPDATE {s}.jobs j SET on_parent_failure = u.p \
                 FROM unnest($1::text[], $2::text[]) AS u(id, p) WHERE j.id = u.id"
            ),
        }
    }
}

fn before(e: tokio_postgres::Error) -> StoreError {
    error::map(e, Stage::BeforeCommit)
}

fn stored_id(id: String) -> Result<JobId, StoreError> {
    lease_ports::codec::job_id(id)
}

/// Fills the parents of each job of `jobs` whose row named any (`named`), in one request.
pub(crate) async fn with_parents(
    conn: &Conn,
    w: &WorkflowSql,
    jobs: &mut [JobRecord],
    named: &[bool],
) -> Result<(), StoreError> {
    let ids: Vec<&str> = jobs
        .iter()
        .zip(named)
        .filter(|(_, named)| **named)
        .map(|(record, _)| record.id.as_str())
        .collect();
    if ids.is_empty() {
        return Ok(());
    }
    let stmt = conn.prepare(&w.parents_of).await?;
    let rows = conn.client().query(&stmt, &[&ids]).await.map_err(before)?;
    let mut parents: HashMap<String, Vec<JobId>> = HashMap::new();
    for row in rows {
        let (child, parent): (String, String) = (row.get(0), row.get(1));
        parents.entry(child).or_default().push(stored_id(parent)?);
    }
    for record in jobs.iter_mut() {
        if let Some(found) = parents.remove(record.id.as_str()) {
            record.job.after = found;
        }
    }
    Ok(())
}

/// Refuses a batch whose workflow the domain refuses (a missing parent, a job naming itself,
/// a cycle, too many parents) before anything of it is written, and locks the stored
/// parents it names `FOR SHARE` until the transaction ends.
pub(crate) async fn check(
    conn: &Conn,
    w: &WorkflowSql,
    batch: &[(JobId, EnqueueSpec)],
) -> Result<(), StoreError> {
    if batch.iter().all(|(_, spec)| spec.after.is_empty()) {
        return Ok(());
    }
    let in_batch: BTreeSet<&JobId> = batch.iter().map(|(id, _)| id).collect();
    let named: BTreeSet<&str> = batch
        .iter()
        .flat_map(|(_, spec)| &spec.after)
        .filter(|p| !in_batch.contains(p))
        .map(JobId::as_str)
        .collect();
    let named: Vec<&str> = named.into_iter().collect();
    let stmt = conn.prepare(&w.lock_shared).await?;
    let rows = conn
        .client()
        .query(&stmt, &[&named])
        .await
        .map_err(before)?;
    let stored: BTreeSet<String> = rows.iter().map(|r| r.get::<_, String>(0)).collect();
    let batch: Vec<(JobId, Vec<JobId>)> = batch
        .iter()
        .map(|(id, spec)| (id.clone(), spec.after.clone()))
        .collect();
    check_workflow(&batch, |p| stored.contains(p.as_str()))
        .map_err(|e| StoreError::InvalidInput(InputError::from(e)))?;
    Ok(())
}

/// Writes the parent rows and the policy of each job of `jobs` as it names them (replacing
/// any), in one round trip.
pub(crate) async fn write_parents(
    conn: &Conn,
    w: &WorkflowSql,
    jobs: &[(&JobId, &Job)],
) -> Result<(), StoreError> {
    if jobs.is_empty() {
        return Ok(());
    }
    let ids: Vec<&str> = jobs.iter().map(|(id, _)| id.as_str()).collect();
    let policies: Vec<Option<&str>> = jobs
        .iter()
        .map(|(_, job)| (!job.after.is_empty()).then(|| job.on_parent_failure.as_str()))
        .collect();
    let (mut children, mut parents, mut order) = (Vec::new(), Vec::new(), Vec::new());
    for (id, job) in jobs {
        for (n, parent) in job.after.iter().enumerate() {
            children.push(id.as_str());
            parents.push(parent.as_str());
            order.push(i32::try_from(n).unwrap_or(i32::MAX));
        }
    }
    let delete = conn.prepare(&w.delete_parents).await?;
    let insert = conn.prepare(&w.insert_parents).await?;
    let set = conn.prepare(&w.set_policy).await?;
    let c = conn.client();
    futures::future::try_join3(
        c.execute(&delete, &[&ids]),
        c.execute(&insert, &[&children, &parents, &order]),
        c.execute(&set, &[&ids, &policies]),
    )
    .await
    .map_err(before)?;
    Ok(())
}

/// One parent and how it stands, from columns `at..at + 3` (id, `done`, `ended`).
fn stand(row: &tokio_postgres::Row, at: usize) -> Result<(JobId, Option<Status>), StoreError> {
    let parent = stored_id(row.get(at))?;
    let done: Option<bool> = row.get(at + 1);
    let ended: Option<String> = row.get(at + 2);
    let stands = lease_ports::codec::parent_end(&parent, done, ended.as_deref())?;
    Ok((parent, stands))
}

/// Judges each job of `ids` against its parents and stores what that decides (a cancel
/// releases its own waiting children in turn), the jobs locked together in id order, after
/// their parents (locked by the batch's check, or the retried job's own, read after its lock).
pub(crate) async fn judge(
    conn: &Conn,
    s: &crate::connection::Statements,
    w: &WorkflowSql,
    ids: &[&JobId],
) -> Result<(), StoreError> {
    if ids.is_empty() {
        return Ok(());
    }
    let ids: Vec<&str> = ids.iter().map(|id| id.as_str()).collect();
    let lock_many = conn.prepare(&w.lock_many).await?;
    let stands_many = conn.prepare(&w.stands_many).await?;
    let c = conn.client();
    let (locked, stood) =
        futures::future::try_join(c.query(&lock_many, &[&ids]), c.query(&stands_many, &[&ids]))
            .await
            .map_err(before)?;
    let mut parents = stands_by_child(&stood)?;
    let mut writes = Vec::new();
    let mut cancelled = Vec::new();
    for row in &locked {
        let (id, job) = row::decode_with_id(row, 0)?;
        let stands = parents.remove(id.as_str()).unwrap_or_default();
        let fate = decide_child(job.on_parent_failure, &stands);
        if let Some(next) = job.settled(&fate, job.updated) {
            writes.push(Encoded::from_to(&id, Some(Standing::of(&job)), &next));
            if let Some(end) = next.finished() {
                cancelled.push((id, end, next.updated));
            }
        }
    }
    update_all(conn, s, w, &writes).await?;
    for (id, end, at) in cancelled {
        release(conn, s, w, &id, end, at).await?;
    }
    Ok(())
}

/// Writes the decided rows, pipelined.
async fn update_all(
    conn: &Conn,
    s: &crate::connection::Statements,
    w: &WorkflowSql,
    writes: &[Encoded],
) -> Result<(), StoreError> {
    let c = conn.client();
    if writes.len() < 2 {
        // One row: the plain statement, as any write.
        futures::future::try_join_all(
            writes
                .iter()
                .map(|row| crate::tx::update(c, &s.update, &s.update_counted, row)),
        )
        .await
        .map_err(before)?;
        return Ok(());
    }
    // Many: one statement, its columns arrays, its counts summed.
    let update_many = conn.prepare(&w.update_many).await?;
    let columns = row::Columns::of(writes);
    let row = c
        .query_one(&update_many, &columns.params())
        .await
        .map_err(before)?;
    let written = row.get::<_, i64>(0);
    if usize::try_from(written).ok() != Some(writes.len()) {
        return Err(StoreError::Corrupt(
            format!(
                "a write of {} locked children changed {written} rows",
                writes.len()
            )
            .into(),
        ));
    }
    Ok(())
}

/// Each parent of a child and how it stands (`None` while it can still run).
type Stands = Vec<(JobId, Option<Status>)>;

/// How the parents that are not done stand, by child, each child's in its order.
fn stands_by_child(rows: &[tokio_postgres::Row]) -> Result<HashMap<String, Stands>, StoreError> {
    let mut parents: HashMap<String, Stands> = HashMap::new();
    for row in rows {
        parents
            .entry(row.get::<_, String>(0))
            .or_default()
            .push(stand(row, 1)?);
    }
    Ok(parents)
}

/// Settles the jobs waiting on `finished`, which ended as `end` at `at`, transitively, a
/// generation at a time: the children waiting on a job are locked together (in id order),
/// then how their parents stand is read (pipelined in the same round trip, and run by the
/// server after the locks are held, so a parent that finished in a transaction that held a
/// child before is seen finished), then each decided row is written.
pub(crate) async fn release(
    conn: &Conn,
    s: &crate::connection::Statements,
    w: &WorkflowSql,
    finished: &JobId,
    end: Status,
    at: Option<Timestamp>,
) -> Result<(), StoreError> {
    let mut propagation = Propagation::new(finished, end);
    let lock_children = conn.prepare(&w.lock_children).await?;
    let stands_of_children = conn.prepare(&w.stands_of_children).await?;
    let c = conn.client();
    while let Some(parent) = propagation.next_parent() {
        // One round trip a generation: the waiting children, locked in id order after their
        // parent, and how their other parents stand.
        let key = parent.as_str();
        let (locked, stood) = futures::future::try_join(
            c.query(&lock_children, &[&key]),
            c.query(&stands_of_children, &[&key]),
        )
        .await
        .map_err(before)?;
        if locked.is_empty() {
            continue;
        }
        let mut parents = stands_by_child(&stood)?;
        let mut waiting = Vec::with_capacity(locked.len());
        let mut read = HashMap::new();
        for row in &locked {
            let (id, job) = row::decode_with_id(row, 0)?;
            // Made due or cancelled by a transaction that held it before this one.
            if !job.waiting {
                continue;
            }
            let stands = parents.remove(id.as_str()).unwrap_or_default();
            waiting.push(Waiting {
                parents: stands,
                policy: job.on_parent_failure,
                id: id.clone(),
            });
            read.insert(id, job);
        }
        let mut writes = Vec::new();
        for (child, fate) in propagation.judge(waiting) {
            if let Some((job, next)) = read
                .get(&child)
                .and_then(|job| job.settled(&fate, at).map(|next| (job, next)))
            {
                writes.push(Encoded::from_to(&child, Some(Standing::of(job)), &next));
            }
        }
        update_all(conn, s, w, &writes).await?;
    }
    Ok(())
}

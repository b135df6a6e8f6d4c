//! The lease store on PostgreSQL: the same fenced guarantees as the SQLite store, for workers
//! on many machines, with one authoritative clock when asked.
//!
//! Every write is one transaction that locks the job's row (`SELECT ... FOR UPDATE`), lets
//! `lease_domain` decide, stores the decision and commits; `claim_next` takes its candidates
//! with `FOR UPDATE SKIP LOCKED` from the ready index and lets the domain decide each. Requests
//! are pipelined: a write costs two round trips (BEGIN with the locking read, then the write
//! with COMMIT), where a plain loop of the same statements costs four. The queue loop's writes
//! (`claim_next`, and a completion followed by it) are one statement, a call of the schema's
//! `step` function, the one place a rule is restated in SQL: every row it decides is decided
//! again by the domain here (`complete_and_claim.rs`). See docs/ARCHITECTURE.md for why READ COMMITTED is
//! enough.

// Library and binary code may not unwrap, expect or panic on what it meets, nor export what is
// unreachable (each exception allowed in place with its reason); tests may.
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        unreachable_pub
    )
)]

mod audit;
mod batch;
mod batch_share;
mod changes;
mod checkpoint;
mod claim;
mod complete_and_claim;
mod config;
mod connection;
mod control;
mod control_sql;
mod enqueues;
mod error;
pub mod guard;
mod heads;
mod keys;
mod list;
mod renewals;
mod row;
mod schema;
#[cfg(feature = "test-support")]
// Test support (built only with the feature), where a failed setup is a failed test: it may
// unwrap, expect and panic.
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod scratch;
mod settle;
mod signal;
mod sql;
mod tls;
mod trace;
mod transfer;
mod tx;
mod workflow;
mod write;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use deadpool_postgres::{Hook, Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use futures::future::try_join;
use lease_domain::{
    Change, ClockMode, Command, EnqueueSpec, JobId, KeptCheckpoint, Status, Timestamp, Ttl,
    is_purgeable,
};
use lease_ports::codec::{StoredDue, StoredGroup, StoredMinute};
use lease_ports::{
    Applied, ClaimNext, JobRecord, Lease, LeaseStore, ListFilter, StatsRow, StoreError,
};
use tokio_postgres_rustls::MakeRustlsConnect;

pub use config::{connection_config, describe, is_postgres_url, redact};
pub use schema::{CURRENT_VERSION, check_schema_name};
#[cfg(feature = "test-support")]
pub use scratch::ScratchDatabase;
#[cfg(feature = "test-support")]
pub use sql::Sql as StatementTexts;

pub use sql::CLAIM_NEXT_SETTINGS;

use config::connection_settings;
use connection::{Conn, Statements, setup};
use row::stored_now;
use tx::rollback;

use error::Stage;
use row::{Encoded, Standing};
use sql::Sql;

/// How long making a connection may take when neither the target (`connect_timeout`) nor
/// `PGCONNECT_TIMEOUT` says.
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How a [`PgLeaseStore`] is opened.
#[derive(Debug, Clone)]
pub struct PgOptions {
    /// The PostgreSQL schema holding the lease tables (default `lease`).
    pub schema: String,
    /// The most connections the store's pool opens (default 16).
    pub pool_size: usize,
    /// Whose clock decides `now` (default: the caller's, unchecked).
    pub clock: ClockMode,
    /// How long an operation waits for a free pooled connection (default 30 s).
    pub wait_timeout: Duration,
    /// The server ends a session that sits idle inside a transaction this long, so a stalled
    /// client cannot hold a job's row lock (default 30 s). Its write is then never committed.
    pub idle_in_transaction_timeout: Duration,
    /// The audit trail of refused holder writes: `Some(n)` records each refusal in the
    /// refusing transaction (which then commits: one more write and flush per refusal) and
    /// keeps the newest `n` rows; `None` (the default) records nothing.
    pub audit: Option<u64>,
    /// Whether the queue loop's writes (`claim_next`, and a completion followed by
    /// `claim_next`) run as one call of the schema's `step` function: one statement, one round
    /// trip and one commit (the default), every row it decides checked against `lease_domain`
    /// (see docs/ARCHITECTURE.md). `false` runs them as separate statements, decided by the
    /// domain in this process. A store with a skew bound, or an audit trail when a completion
    /// is refused, takes the statements either way.
    pub step: bool,
    /// Group commit: the most queue-loop writes (claims, and completions with the claim that
    /// follows) of concurrent callers that share one transaction and one commit (default 128),
    /// decided set by set in this process over one locking read. A write is still answered
    /// only after its commit, and decided by the domain as a lone write is. `1` turns it off:
    /// each write is its own call of `step`. Without `step`, nothing is batched.
    pub max_batch: usize,
    /// Whether a lone write is also settled as a batch is (by default it is a plain call of
    /// `step`): for tests that check the batch's way with one caller.
    #[cfg(feature = "test-support")]
    pub alone_in_batch: bool,
}

impl Default for PgOptions {
    fn default() -> Self {
        Self {
            schema: "lease".to_owned(),
            pool_size: 16,
            clock: ClockMode::default(),
            wait_timeout: Duration::from_secs(30),
            idle_in_transaction_timeout: Duration::from_secs(30),
            audit: None,
            step: true,
            max_batch: 128,
            #[cfg(feature = "test-support")]
            alone_in_batch: false,
        }
    }
}

impl PgOptions {
    /// The defaults with the store's clock deciding `now`.
    #[must_use]
    pub fn store_clock(mut self) -> Self {
        self.clock = ClockMode::Store;
        self
    }

    /// The defaults with the caller's clock, refused when further than `bound` from the
    /// server's.
    #[must_use]
    pub fn skew_bound(mut self, bound: Ttl) -> Self {
        self.clock = ClockMode::Caller {
            max_skew: Some(bound),
        };
        self
    }
}

#[async_trait]
impl lease_ports::overview::Overview for PgLeaseStore {
    async fn due(&self, now: Timestamp) -> Result<Vec<lease_ports::overview::DueRow>, StoreError> {
        let rows = self.read_rows(&self.sql.due, now.get()).await?;
        rows.iter()
            .map(|row| {
                StoredDue {
                    queue: row.try_get(0).map_err(overview_read)?,
                    due: row.try_get(1).map_err(overview_read)?,
                    oldest: row.try_get(2).map_err(overview_read)?,
                }
                .decode()
            })
            .collect()
    }

    async fn activity(
        &self,
        since: Timestamp,
    ) -> Result<Vec<lease_ports::overview::MinuteRow>, StoreError> {
        let from = lease_ports::overview::minute_of(since).get();
        let mut counts = Vec::new();
        use lease_ports::overview::Counted;
        for (sql, counted) in [
            (&self.sql.completions, Counted::Completed),
            (&self.sql.failed, Counted::Failed),
            (&self.sql.dead, Counted::Dead),
            (&self.sql.cancelled, Counted::Cancelled),
            (&self.sql.refused, Counted::Refused),
        ] {
            for row in self.read_rows(sql, from).await? {
                let (queue, minute, n) = StoredMinute {
                    queue: row.try_get(0).map_err(overview_read)?,
                    minute: row.try_get(1).map_err(overview_read)?,
                    count: row.try_get(2).map_err(overview_read)?,
                }
                .decode()?;
                counts.push((queue, minute, counted, n));
            }
        }
        Ok(lease_ports::overview::minute_rows(counts))
    }
}

fn overview_read(e: tokio_postgres::Error) -> StoreError {
    StoreError::Corrupt(lease_ports::Detail::caused_by(format!("overview: {e}"), e))
}

/// A lease store in a PostgreSQL database.
#[derive(Clone)]
pub struct PgLeaseStore {
    pool: Pool,
    /// How to connect, for the connection that listens for enqueue signals.
    config: tokio_postgres::Config,
    /// The TLS connector the pool's connections use (unused when TLS is off).
    tls: MakeRustlsConnect,
    /// Enqueue signals waiting for a NOTIFY.
    outbox: Arc<signal::Outbox>,
    sql: Arc<Sql>,
    /// The statements of queue settings and schedules.
    control: Arc<control_sql::ControlSql>,
    /// The statements of workflows.
    workflow: Arc<workflow::WorkflowSql>,
    /// The statements of checkpoints.
    checkpoints: Arc<checkpoint::CheckpointSql>,
    /// The statements of trace contexts.
    traces: Arc<trace::TraceSql>,
    clock: ClockMode,
    target: Arc<str>,
    schema: Arc<str>,
    audit: Option<u64>,
    /// [`PgOptions::step`].
    step_enabled: bool,
    /// Group commit of the queue loop's writes ([`PgOptions::max_batch`]); `None` when off.
    batcher: Option<Arc<batch::Batcher>>,
    /// The settings a claim last read for each queue: a claim reads ahead by them
    /// (`claim.rs`), and uses what it read only if the settings it reads are the same.
    seen: Arc<
        std::sync::Mutex<
            std::collections::HashMap<lease_domain::QueueName, lease_domain::QueueSettings>,
        >,
    >,
}

impl std::fmt::Debug for PgLeaseStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgLeaseStore")
            .field("target", &self.target)
            .field("schema", &self.schema)
            .field("clock", &self.clock)
            .finish_non_exhaustive()
    }
}

impl PgLeaseStore {
    /// The rows of a read-only statement taking one `float8`, on a pooled connection.
    async fn read_rows(
        &self,
        sql: &str,
        value: f64,
    ) -> Result<Vec<tokio_postgres::Row>, StoreError> {
        let mut conn = self.conn().await?;
        let stmt = conn.prepare(sql).await?;
        let rows = conn
            .client()
            .query(&stmt, &[&value])
            .await
            .map_err(|e| error::map(e, Stage::BeforeCommit))?;
        conn.clean();
        Ok(rows)
    }

    /// Opens the lease schema in the database `target` names (a `postgres://` URL or libpq's
    /// `key=value` form; `PG*` variables fill what it leaves out), bringing an older schema up
    /// to date.
    ///
    /// # Errors
    /// [`StoreError::NotFound`] without a lease schema (create it with [`PgLeaseStore::init`])
    /// or without the database; [`StoreError::Incompatible`] for a schema holding anything
    /// else (left untouched) or a malformed target; [`StoreError::Unavailable`] when the
    /// server cannot be reached.
    pub async fn open(target: &str, options: PgOptions) -> Result<Self, StoreError> {
        Self::connect(target, options, false).await
    }

    /// As [`PgLeaseStore::open`], creating the schema if it is missing or empty.
    ///
    /// # Errors
    /// As [`PgLeaseStore::open`], except that a missing schema is created.
    pub async fn init(target: &str, options: PgOptions) -> Result<Self, StoreError> {
        Self::connect(target, options, true).await
    }

    async fn connect(target: &str, options: PgOptions, create: bool) -> Result<Self, StoreError> {
        check_schema_name(&options.schema)?;
        let (config, tls) = connection_settings(target)?;
        let shown = describe(&config);
        let tls = tls.connector().map_err(|reason| StoreError::Incompatible {
            path: shown.clone(),
            reason: reason.into(),
        })?;
        // The whole making of a connection (TCP, TLS, startup, authentication, the session
        // settings) is bounded by the connect timeout, not only the TCP connect.
        let connect_timeout = config
            .get_connect_timeout()
            .copied()
            .unwrap_or(DEFAULT_CONNECT_TIMEOUT);
        let idle = options.idle_in_transaction_timeout;
        let manager = Manager::from_config(
            config.clone(),
            tls.clone(),
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(options.pool_size.max(1))
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(options.wait_timeout))
            .create_timeout(Some(connect_timeout))
            .post_create(Hook::async_fn(move |client, _| {
                Box::pin(async move { setup(client, idle).await })
            }))
            .build()
            .map_err(|e| {
                StoreError::Unavailable(lease_ports::Detail::caused_by(
                    format!("cannot build the pool: {e}"),
                    e,
                ))
            })?;
        #[cfg(feature = "test-support")]
        let alone_in_batch = options.alone_in_batch;
        #[cfg(not(feature = "test-support"))]
        let alone_in_batch = false;
        let store = Self {
            pool,
            config,
            tls,
            outbox: Arc::default(),
            sql: Arc::new(Sql::new(&options.schema)),
            control: Arc::new(control_sql::ControlSql::new(&options.schema)),
            workflow: Arc::new(workflow::WorkflowSql::new(&options.schema)),
            checkpoints: Arc::new(checkpoint::CheckpointSql::new(&options.schema)),
            traces: Arc::new(trace::TraceSql::new(&options.schema)),
            clock: options.clock,
            target: shown.into(),
            schema: options.schema.as_str().into(),
            audit: options.audit,
            step_enabled: options.step,
            seen: Arc::default(),
            batcher: (options.step && options.max_batch > 1)
                .then(|| Arc::new(batch::Batcher::new(options.max_batch, alone_in_batch))),
        };
        let mut conn = store.conn().await?;
        schema::prepare(conn.client_mut(), &options.schema, create, &store.target).await?;
        conn.clean();
        Ok(store)
    }

    /// The target as it can be shown (no password).
    #[must_use]
    pub fn target(&self) -> &str {
        &self.target
    }

    /// The PostgreSQL schema the store uses.
    #[must_use]
    pub fn schema(&self) -> &str {
        &self.schema
    }

    /// What group commit has done so far; `None` when it is off ([`PgOptions::max_batch`] 1,
    /// or `step` off).
    #[must_use]
    pub fn group_commit_stats(&self) -> Option<lease_ports::GroupCommitStats> {
        self.batcher.as_ref().map(|b| b.stats())
    }

    /// This store without group commit: what a batch's runner uses, so that it holds no
    /// handle of the queue it serves.
    pub(crate) fn without_batcher(&self) -> Self {
        Self {
            batcher: None,
            ..self.clone()
        }
    }

    /// Completes `completion` (when given) and claims as `claim` says with `step`: in the next
    /// batch when group commit takes the queue, else alone on a pooled connection. `None`:
    /// declined, so the caller decides the write through statements.
    pub(crate) async fn stepped(
        &self,
        completion: Option<(&JobId, &Command)>,
        claim: &ClaimNext,
    ) -> Result<Option<complete_and_claim::Stepped>, StoreError> {
        if let Some(batcher) = self.batcher.as_ref().filter(|b| b.takes(&claim.queue)) {
            return self.batched_step(batcher, completion, claim).await;
        }
        let mut conn = self.conn().await?;
        let stepped = self.step(&conn, completion, claim).await?;
        conn.clean();
        Ok(stepped)
    }

    /// Whose clock decides `now`.
    #[must_use]
    pub fn clock_mode(&self) -> ClockMode {
        self.clock
    }

    /// The server's clock (`clock_timestamp()`), in seconds since the Unix epoch.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when the server cannot be reached.
    pub async fn server_now(&self) -> Result<Timestamp, StoreError> {
        let mut conn = self.conn().await?;
        let stmt = conn.prepare(&self.sql.clock).await?;
        let row = conn
            .client()
            .query_one(&stmt, &[])
            .await
            .map_err(|e| error::map(e, Stage::BeforeCommit))?;
        conn.clean();
        stored_now(row.get(0))
    }

    /// A server setting as a pooled connection of this store sees it (for example
    /// `synchronous_commit`, which every connection sets to `on` and reads back).
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when the server cannot be reached or has no such setting.
    pub async fn setting(&self, name: &str) -> Result<String, StoreError> {
        let mut conn = self.conn().await?;
        let row = conn
            .client()
            .query_one("SELECT current_setting($1)", &[&name])
            .await
            .map_err(|e| error::map(e, Stage::BeforeCommit))?;
        conn.clean();
        Ok(row.get(0))
    }

    /// Closes the pool: open connections are dropped, later calls fail.
    pub fn close(&self) {
        self.pool.close();
    }

    async fn conn(&self) -> Result<Conn, StoreError> {
        match self.pool.get().await {
            Ok(object) => Ok(Conn {
                object: Some(object),
                clean: false,
            }),
            Err(e) => Err(error::pool(e, &self.target)),
        }
    }
}

#[async_trait]
impl LeaseStore for PgLeaseStore {
    async fn apply(
        &self,
        job: &JobId,
        command: Command,
        then: Option<ClaimNext>,
    ) -> Result<Applied, StoreError> {
        lease_ports::claim_may_follow(&command, then.as_ref())?;
        let Some(claim) = then else {
            // Renewals, and plain enqueues, arriving together share a commit (group commit:
            // `renewals`, `enqueues`).
            // A holder's completion, failure or release shares the queue loop's batches.
            let outcome = match (&self.batcher, enqueues::batchable(&command)) {
                (Some(batcher), _) if matches!(command, Command::Renew(..)) => {
                    self.batched_renew(batcher, job, command).await?
                }
                (Some(batcher), Some(spec)) => self.batched_enqueue(batcher, job, spec).await?,
                (Some(batcher), None) if self.settles(&command) => {
                    match self.batched_write(batcher, job, command.clone()).await? {
                        Some(outcome) => outcome,
                        None => self.write_alone(job, command).await?,
                    }
                }
                _ => self.write_alone(job, command).await?,
            };
            return Ok(Applied {
                outcome,
                claimed: None,
            });
        };
        if self.steps(Some(&command), &claim.queue) {
            let stepped = self.stepped(Some((job, &command)), &claim).await?;
            if let Some(stepped) = stepped {
                let outcome = stepped.outcome.ok_or_else(|| {
                    StoreError::Corrupt("the step function answered no completion".into())
                })?;
                return Ok(Applied {
                    outcome,
                    claimed: Some(Ok(stepped.leases)),
                });
            }
            // Declined and rolled back: the statements decide it.
        }
        let mut conn = self.conn().await?;
        let s = Statements::prepare(&conn, &self.sql).await?;
        let c = conn.client();
        let key = job.as_str();
        let needs_clock = self.clock.needs_clock(&command);
        // One round trip: BEGIN, the completed job's row lock (and the clock after it), the
        // claim's settings and its first page of candidates.
        let key: [&(dyn tokio_postgres::types::ToSql + Sync); 1] = [&key];
        let probe = conn.prepare(&self.workflow.has_waiting).await?;
        // With the lock: whether jobs wait on the completed job (read after the lock).
        let lock = try_join(
            try_join(c.query_opt(&s.lock, &key), tx::clock_if(c, &s, needs_clock)),
            async { c.query_one(&probe, &key).await.map(|r| r.get::<_, bool>(0)) },
        );
        let (mut claimed, ((row, now), waited_on)) =
            self.claim_next_on(&conn, &s, &claim, true, lock).await?;
        let current = row.map(|r| row::decode(job, &r, 0)).transpose()?;
        let command = self.resolved(c, &s, command, now).await?;
        let decided = command.decided(job, current.as_ref(), None);
        lease_ports::observe::decided(&command, current.as_ref(), &decided);
        // A completion changes its job's row and settles the jobs waiting on it (when any
        // do, as read after its lock), or is refused (recorded in the audit trail when the
        // store keeps one); nothing else.
        let (mut completion, mut released, mut refused) = (None, None, None);
        let mut ended = None;
        for change in decided.changes {
            match change {
                Change::Attempt(attempt) => ended = Some(attempt),
                Change::Row { job: next, .. } => {
                    completion = Some(Encoded::from_to(
                        job,
                        current.as_ref().map(Standing::of),
                        &next,
                    ));
                }
                Change::Release(end, at) => released = Some((end, at)).filter(|_| waited_on),
                Change::Refused(entry) => refused = Some(entry),
                other => {
                    rollback(c, &s).await?;
                    return Err(StoreError::Corrupt(
                        format!("job {job}: a completion decided {other:?}").into(),
                    ));
                }
            }
        }
        let outcome = decided.outcome;
        let completion = completion.map(|w: Encoded| w.ending(ended.as_ref()));
        let mut writes = std::mem::take(&mut claimed.writes);
        let mut wrote = claimed.wrote || completion.is_some();
        writes.extend(completion);
        // A workflow's jobs settle after the rows that finished their parents are written.
        if released.is_some() || !claimed.buried.is_empty() {
            for write in writes.drain(..) {
                tx::update(c, &s.update, &s.update_counted, &write)
                    .await
                    .map_err(|e| error::map(e, Stage::BeforeCommit))?;
                wrote = true;
            }
            let finished = claimed
                .buried
                .iter()
                .map(|(id, at)| (id.clone(), Status::Dead, *at))
                .chain(released.map(|(end, at)| (job.clone(), end, at)));
            for (id, end, at) in finished {
                workflow::release(&conn, &s, &self.workflow, &id, end, at).await?;
            }
        }
        // The second round trip: the refusal's audit row (in this transaction), the writes
        // and COMMIT.
        match (&refused, self.audit) {
            (Some(entry), Some(retention)) => {
                try_join(
                    self.audit_rows(c, &s, job, entry, retention),
                    claimed.commit(&conn, &s, &self.control, &claim.queue, &writes, true),
                )
                .await?;
            }
            _ => {
                claimed
                    .commit(&conn, &s, &self.control, &claim.queue, &writes, wrote)
                    .await?;
            }
        }

        conn.clean();
        Ok(Applied {
            outcome,
            claimed: Some(Ok(claimed.leases)),
        })
    }

    async fn claim_next_with(&self, claim: &ClaimNext) -> Result<Vec<Lease>, StoreError> {
        if claim.limit == 0 {
            return Ok(Vec::new());
        }
        if self.steps(None, &claim.queue) {
            if let Some(stepped) = self.stepped(None, claim).await? {
                return Ok(stepped.leases);
            }
            // Declined and rolled back: the statements decide it.
        }
        let mut conn = self.conn().await?;
        let s = Statements::prepare(&conn, &self.sql).await?;
        let (mut claimed, ()) = self
            .claim_next_on(&conn, &s, claim, true, async { Ok(()) })
            .await?;
        claimed.settle(&conn, &s, &self.workflow).await?;
        claimed
            .commit(
                &conn,
                &s,
                &self.control,
                &claim.queue,
                &claimed.writes,
                claimed.wrote,
            )
            .await?;
        conn.clean();
        Ok(claimed.leases)
    }

    async fn enqueue_many(&self, jobs: &[(JobId, EnqueueSpec)]) -> Result<Vec<bool>, StoreError> {
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        let mut conn = self.conn().await?;
        let inserted = self.enqueue_many_on(&mut conn, jobs).await?;
        conn.clean();
        Ok(inserted)
    }

    async fn record(&self, job: &JobId) -> Result<Option<JobRecord>, StoreError> {
        let mut conn = self.conn().await?;
        let stmt = conn.prepare(&self.sql.select).await?;
        let row = conn
            .client()
            .query_opt(&stmt, &[&job.as_str()])
            .await
            .map_err(|e| error::map(e, Stage::BeforeCommit))?;
        let Some(row) = row else {
            conn.clean();
            return Ok(None);
        };
        let mut found = [JobRecord {
            id: job.clone(),
            job: row::decode(job, &row, 0)?,
        }];
        workflow::with_parents(
            &conn,
            &self.workflow,
            &mut found,
            &[row::names_parents(&row, 0)],
        )
        .await?;
        conn.clean();
        let [record] = found;
        Ok(Some(record))
    }

    async fn purge(&self, before: Timestamp, statuses: &[Status]) -> Result<u64, StoreError> {
        let mut conn = self.conn().await?;
        let s = Statements::prepare(&conn, &self.sql).await?;
        let purgeable = conn.prepare(&self.sql.purgeable).await?;
        let remember = conn.prepare(&self.sql.remember_purged).await?;
        let delete = conn.prepare(&self.sql.delete).await?;
        let c = conn.client();
        let (_, rows) = try_join(
            c.execute(&s.begin, &[]),
            c.query(&purgeable, &[&before.get()]),
        )
        .await
        .map_err(|e| error::map(e, Stage::BeforeCommit))?;
        let mut ids = Vec::new();
        let mut fences = Vec::new();
        for row in &rows {
            let (id, job) = row::decode_with_id(row, 0)?;
            if is_purgeable(&job, before, statuses) {
                ids.push(id.as_str().to_owned());
                fences.push(i64::from(job.fence));
            }
        }
        if ids.is_empty() {
            rollback(c, &s).await?;
        } else {
            try_join(
                try_join(
                    c.execute(&remember, &[&ids, &fences]),
                    c.execute(&delete, &[&ids]),
                ),
                c.execute(&s.commit, &[]),
            )
            .await
            .map_err(|e| error::map(e, Stage::Commit))?;
        }
        // The counts each server process kept (migration 6), folded into one row each, so
        // that reading them stays as cheap as the number of queues.
        for fold in [&self.sql.fold_finished, &self.sql.fold_completions] {
            let stmt = conn.prepare(fold).await?;
            conn.client()
                .execute(&stmt, &[])
                .await
                .map_err(|e| error::map(e, Stage::Commit))?;
        }
        conn.clean();
        Ok(u64::try_from(ids.len()).unwrap_or(u64::MAX))
    }

    async fn list(&self, filter: &ListFilter) -> Result<Vec<JobRecord>, StoreError> {
        let mut conn = self.conn().await?;
        let c = conn.client();
        c.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            .await
            .map_err(|e| error::map(e, Stage::BeforeCommit))?;
        let mut found = Vec::new();
        // Each source gives ids in order; each gives its first `limit` matches and the merge
        // keeps the first `limit` of all.
        // An end's page is read in order from its index and stops at the limit; the planner,
        // misjudging how many rows the range holds (seen: 487 for 100,000), would otherwise
        // read the whole range and sort it (98 ms at a million jobs, against 1 ms). The open
        // jobs come from two indexes and are sorted either way. Set when it changes.
        let mut sorting = "on";
        for source in self.list_sources(&conn, filter).await? {
            let sort = if matches!(source, list::Source::Ended(..)) {
                "off"
            } else {
                "on"
            };
            if sort != sorting {
                let set = conn
                    .prepare("SELECT set_config('enable_sort', $1, true)")
                    .await?;
                conn.client()
                    .execute(&set, &[&sort])
                    .await
                    .map_err(|e| error::map(e, Stage::BeforeCommit))?;
                sorting = sort;
            }
            found.extend(self.list_from(&conn, &source, filter).await?);
        }
        let named = vec![true; found.len()];
        workflow::with_parents(&conn, &self.workflow, &mut found, &named).await?;
        conn.client()
            .batch_execute("COMMIT")
            .await
            .map_err(|e| error::map(e, Stage::BeforeCommit))?;
        conn.clean();
        if filter.status.is_some() {
            // Merged from pages read in byte order (the whole table's page is in the
            // database's order, and alone).
            found.sort_by(|a, b| a.id.as_str().cmp(b.id.as_str()));
            found.truncate(filter.limit);
        }
        Ok(found)
    }

    async fn stats(&self, now: Timestamp) -> Result<Vec<StatsRow>, StoreError> {
        let rows = self.read_rows(&self.sql.stats, now.get()).await?;
        let read = |e: tokio_postgres::Error| {
            StoreError::Corrupt(lease_ports::Detail::caused_by(format!("stats: {e}"), e))
        };
        let mut groups = Vec::new();
        for row in &rows {
            let stored = StoredGroup {
                queue: row.try_get(0).map_err(read)?,
                done: row.try_get(1).map_err(read)?,
                ended: row.try_get(2).map_err(read)?,
                live: row.try_get(3).map_err(read)?,
                exhausted: row.try_get(4).map_err(read)?,
                count: row.try_get(5).map_err(read)?,
            };
            groups.push(stored.decode()?);
        }
        Ok(lease_ports::tally_groups(groups, now))
    }

    async fn children(
        &self,
        job: &JobId,
        after: Option<&JobId>,
        limit: usize,
    ) -> Result<Vec<JobId>, StoreError> {
        let mut conn = self.conn().await?;
        let stmt = conn.prepare(&self.workflow.children).await?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = conn
            .client()
            .query(&stmt, &[&job.as_str(), &after.map(JobId::as_str), &limit])
            .await
            .map_err(|e| error::map(e, Stage::BeforeCommit))?;
        conn.clean();
        rows.iter()
            .map(|r| lease_ports::codec::job_id(r.get::<_, String>(0)))
            .collect()
    }

    async fn checkpoints(&self, job: &JobId) -> Result<Vec<KeptCheckpoint>, StoreError> {
        let mut conn = self.conn().await?;
        let kept = checkpoint::of(&conn, &self.checkpoints, job).await?;
        conn.clean();
        Ok(kept)
    }

    async fn attempts(&self, job: &JobId) -> Result<lease_domain::Attempts, StoreError> {
        let mut conn = self.conn().await?;
        let stmt = conn.prepare(&self.sql.attempts).await?;
        let rows = conn
            .client()
            .query(&stmt, &[&job.as_str()])
            .await
            .map_err(|e| error::map(e, error::Stage::BeforeCommit))?;
        conn.clean();
        let read = |e: tokio_postgres::Error| {
            StoreError::Corrupt(format!("job {job}: an attempt cannot be read: {e}").into())
        };
        let kept = rows
            .iter()
            .map(|r| {
                let row = row::stored_attempt(r, 0).map_err(read)?;
                lease_ports::codec::attempt(job.as_str(), row)
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(lease_domain::Attempts::of(kept))
    }

    async fn trace(&self, job: &JobId) -> Result<Option<lease_domain::TraceContext>, StoreError> {
        let mut conn = self.conn().await?;
        let trace = trace::of(&conn, &self.traces, job).await?;
        conn.clean();
        Ok(trace)
    }
}

//! The embedded SQLite lease store: rusqlite (bundled SQLite) with an r2d2 connection pool.
//!
//! Every write is one `BEGIN IMMEDIATE` transaction that loads the job, asks `lease_domain`
//! for the decision, stores it and commits; no lease rule is written here a second time.
//! Every connection runs in WAL mode with `synchronous=FULL` and a busy timeout.
//!
//! Two ways in:
//! - [`SqliteLeaseStore`], which implements the [`LeaseStore`] port and keeps a pool open
//!   (the fast path for library users);
//! - the seed-contract functions ([`init_db`], [`enqueue`], [`state`], [`claim`], [`renew`],
//!   [`complete`], [`release`], [`claim_many`]), synchronous and path-based: each call opens
//!   the file afresh, so they stay correct when the file is replaced between calls.

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

mod attempts;
mod audit;
mod backup;
mod checkpoint;
mod claim;
mod clock;
mod connection;
mod control;
mod epoch;
mod error;
mod filesystem;
mod group_commit;
mod heads;
mod keys;
mod ops;
mod options;
mod path_api;
mod reads;
mod row;
mod schema;
mod trace;
mod transfer;
mod tx;
mod workflow;
mod write;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use lease_domain::{Command, EnqueueSpec, JobId, KeptCheckpoint, QueueName, Status, Timestamp};
use lease_ports::blocking::BlockingCore;
use lease_ports::{
    Applied, ClaimNext, JobRecord, Lease, LeaseStore, ListFilter, StatsRow, outcome_as,
};
use ops::Op;
use r2d2_sqlite::SqliteConnectionManager;
use rusqlite::Connection;

pub use backup::{Restored, restore};
pub use clock::HostClock;
use connection::Access;
pub use connection::{ConnectionSettings, MIN_SQLITE_VERSION};
pub use group_commit::GroupCommitStats;
pub use lease_ports::{JobState, StoreError};
pub use options::{ConnectFn, ConnectHook, SqliteOptions, Synchronous};
pub use path_api::{
    KEPT_PATHS, claim, claim_many, complete, enqueue, init_db, release, renew, state,
};
pub use schema::{APPLICATION_ID, SCHEMA_VERSION};

/// The SQL the store runs for every operation, for benchmarks that compare it with raw SQLite
/// (feature `test-support`).
#[cfg(feature = "test-support")]
pub mod sql {
    pub use crate::claim::{REFILE_ENDED_LEASES, SELECT_CANDIDATES};
    pub use crate::row::{INSERT_JOB, SELECT_JOB, UPDATE_JOB, UPDATE_QUEUE, UPSERT_QUEUE};
}

#[cfg(feature = "test-support")]
// Test support (built only with the feature), where a failed setup is a failed test: it may
// unwrap, expect and panic.
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
pub mod testing;

/// The error type of this crate: the port's [`StoreError`].
pub type Error = StoreError;

/// A lease store in one SQLite file, with a pool of configured connections.
///
/// Cloning is cheap and shares the pool.
#[derive(Clone)]
pub struct SqliteLeaseStore {
    pool: r2d2::Pool<SqliteConnectionManager>,
    path: Arc<PathBuf>,
    /// The write queue, when group commit is on.
    group: Option<Arc<group_commit::GroupCommit>>,
    /// Why the store can only read, when its storage cannot be written.
    read_only: Option<Arc<String>>,
    /// Whose clock decides `now`.
    clock: lease_domain::ClockMode,
    host_clock: Option<HostClock>,
    /// The audit trail's retention, when it is on.
    audit: Option<u64>,
}

impl std::fmt::Debug for SqliteLeaseStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteLeaseStore")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl SqliteLeaseStore {
    /// Opens the store at `path` with the default options, creating and initialising the file
    /// if it does not exist (its directory must exist).
    ///
    /// # Errors
    /// [`StoreError::Incompatible`] for a directory, a file that is not an SQLite database or a
    /// database that is not a lease database (left unchanged); [`StoreError::Unavailable`] when
    /// the directory is missing or the file cannot be opened.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        Self::open_with(path, SqliteOptions::default())
    }

    /// Opens an existing store; never creates a file.
    ///
    /// # Errors
    /// As [`SqliteLeaseStore::open`], and [`StoreError::NotFound`] when there is no file.
    pub fn open_existing(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        Self::open_with(
            path,
            SqliteOptions {
                create: false,
                ..SqliteOptions::default()
            },
        )
    }

    /// Opens the store at `path` with explicit options.
    ///
    /// # Errors
    /// As [`SqliteLeaseStore::open`].
    pub fn open_with(path: impl AsRef<Path>, options: SqliteOptions) -> Result<Self, StoreError> {
        let path = path.as_ref().to_path_buf();
        // The connection the statement's functions keep for the path goes: the store's
        // connections are then the file's last in this process, and its close checkpoints.
        path_api::let_go_of(&path);
        // Check, create and migrate with one connection first, so that problems surface here
        // with a clear error instead of as pool time-outs later.
        let access = connection::open(&path, &options)?.access;
        let init_options = options.clone();
        let manager = match &access {
            Access::ReadWrite => SqliteConnectionManager::file(&path)
                .with_flags(connection::existing_file_flags())
                .with_init(move |conn| connection::configure(conn, &init_options)),
            Access::ReadOnly { target, flags, .. } => SqliteConnectionManager::file(target)
                .with_flags(*flags)
                .with_init(move |conn| conn.busy_timeout(init_options.busy_timeout)),
        };
        // In exclusive mode the one connection holds the file's lock; a second would wait on it.
        let pool_size = if options.exclusive {
            1
        } else {
            options.pool_size.max(1)
        };
        let pool = r2d2::Pool::builder()
            .max_size(pool_size)
            .min_idle(Some(0))
            .connection_timeout(options.busy_timeout)
            // Connections are checked when made; a check on every checkout costs a statement.
            .test_on_check_out(false)
            .build(manager)
            .map_err(error::pool)?;
        let group = (options.max_batch > 1)
            .then(|| Arc::new(group_commit::GroupCommit::new(options.max_batch)));
        let read_only = match access {
            Access::ReadWrite => None,
            Access::ReadOnly { reason, .. } => Some(Arc::new(reason)),
        };
        let store = Self {
            pool,
            path: Arc::new(path),
            group,
            read_only,
            clock: options.clock,
            host_clock: options.host_clock.clone(),
            audit: options.audit,
        };
        Ok(store)
    }

    /// The path of the database file.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The settings a pooled connection actually runs with, read back from SQLite.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when no connection can be had.
    pub fn settings(&self) -> Result<ConnectionSettings, StoreError> {
        self.with_conn(|conn| connection::read_settings(conn))
    }

    /// What group commit has done so far; `None` when it is off (`max_batch` 1).
    #[must_use]
    pub fn group_commit_stats(&self) -> Option<GroupCommitStats> {
        self.group.as_ref().map(|g| g.stats())
    }

    /// The same operations as the [`LeaseStore`] port, synchronously on the calling thread:
    /// for callers without an async runtime (workers, benchmarks, tools).
    #[must_use]
    pub fn blocking(&self) -> Blocking<'_> {
        lease_ports::blocking::Blocking(self)
    }

    /// Whether the store can only read (its storage cannot be written), and why.
    #[must_use]
    pub fn read_only_reason(&self) -> Option<&str> {
        self.read_only.as_deref().map(String::as_str)
    }

    fn with_conn<T>(
        &self,
        body: impl FnOnce(&mut Connection) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut conn = self.connection()?;
        body(&mut conn)
    }

    /// A pooled connection. When the pool has to make a new one, the path is checked first,
    /// so a second name linked since the store opened is refused at once (r2d2 would otherwise
    /// retry the refused connection until its timeout).
    fn connection(&self) -> Result<r2d2::PooledConnection<SqliteConnectionManager>, StoreError> {
        if self.pool.state().idle_connections == 0 {
            filesystem::recheck(&self.path)?;
        }
        self.pool.get().map_err(|e| self.no_connection(e))
    }

    /// The error for a failure to get a pooled connection: the pool reports only a message, so
    /// the path is checked again (a hard link made since the store opened is refused by name).
    fn no_connection(&self, err: r2d2::Error) -> StoreError {
        match filesystem::recheck(&self.path) {
            Err(named) => named,
            Ok(()) => error::pool(err),
        }
    }

    fn refuse_if_read_only(&self) -> Result<(), StoreError> {
        match &self.read_only {
            Some(reason) => Err(connection::can_only_be_read(&self.path, reason)),
            None => Ok(()),
        }
    }

    /// Runs writes on the calling thread, in order and in one transaction (one commit): through
    /// the group-commit queue when it is on, otherwise on a pooled connection of their own.
    fn submit_all(&self, ops: Vec<Op>) -> Result<Vec<Result<ops::Reply, StoreError>>, StoreError> {
        self.refuse_if_read_only()?;
        let ops = self.clocked(ops);
        match &self.group {
            Some(group) => Ok(group.submit(&|| self.connection(), ops)),
            None => self.with_conn(|conn| Ok(tx::execute_batch(conn, &ops))),
        }
    }

    /// The ops as the store's clock mode decides them (unchanged in the default mode).
    fn clocked(&self, ops: Vec<Op>) -> Vec<Op> {
        let clocked = self.clock != lease_domain::ClockMode::default();
        ops.into_iter()
            .map(|op| {
                let op = match op {
                    Op::Clocked(..) | Op::Audited(..) => return op,
                    op if clocked => Op::Clocked(self.clock, self.host_clock.clone(), Box::new(op)),
                    op => op,
                };
                match self.audit {
                    Some(retention) => Op::Audited(retention, Box::new(op)),
                    None => op,
                }
            })
            .collect()
    }

    /// Runs one write on the calling thread.
    fn submit(&self, op: Op) -> Result<ops::Reply, StoreError> {
        one(self.submit_all(vec![op])?)
    }

    /// Runs writes for an async caller, in one transaction. With group commit the caller joins
    /// the queue and awaits its answers; when nobody leads, it starts a leader on the blocking
    /// pool, which leads while the queue's head is an async caller, so a burst of writes pays
    /// one thread hop. Without group commit a blocking task runs them.
    ///
    /// The caller never blocks its own task: a batch can wait out SQLite's busy timeout (another
    /// process holding the write lock), and a task blocked in place (`block_in_place`) cannot
    /// see any other branch of its `select!`, so a lease's deadline, a request's timeout or a
    /// shutdown would wait for the database too. Awaiting a one-shot answer lets the caller walk
    /// away; the write then still commits or fails on its own, as the port's cancellation
    /// contract says.
    async fn write_async(
        &self,
        ops: Vec<Op>,
    ) -> Result<Vec<Result<ops::Reply, StoreError>>, StoreError> {
        self.refuse_if_read_only()?;
        let ops = self.clocked(ops);
        let (Some(group), Ok(runtime)) = (&self.group, tokio::runtime::Handle::try_current())
        else {
            return self.run(move |store| store.submit_all(ops)).await;
        };
        let count = ops.len();
        let (answers, lead) = group.submit_async(ops);
        if lead {
            let store = self.clone();
            runtime.spawn_blocking(move || {
                if let Some(group) = &store.group {
                    group.lead(&|| store.connection());
                }
            });
        }
        Ok(answers.await.unwrap_or_else(|_| group_commit::lost(count)))
    }

    /// Runs `body` with a pooled connection on a blocking thread when called inside a Tokio
    /// runtime, inline otherwise. This is the one place where async meets rusqlite: the
    /// connection is never held across an `.await`.
    async fn run<T: Send + 'static>(
        &self,
        body: impl FnOnce(&SqliteLeaseStore) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let store = self.clone();
        let task = move || body(&store);
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => runtime.spawn_blocking(task).await.map_err(|e| {
                StoreError::Indeterminate(lease_ports::Detail::caused_by(
                    format!("the database thread did not finish: {e}"),
                    e,
                ))
            })?,
            Err(_) => task(),
        }
    }
}

/// The one answer of a one-op unit.
fn one(mut answers: Vec<Result<ops::Reply, StoreError>>) -> Result<ops::Reply, StoreError> {
    match (answers.pop(), answers.is_empty()) {
        (Some(answer), true) => answer,
        _ => Err(StoreError::Corrupt(
            "a write was answered with the wrong number of answers"
                .to_owned()
                .into(),
        )),
    }
}

/// The synchronous face of a [`SqliteLeaseStore`] (see [`SqliteLeaseStore::blocking`]): the one
/// synchronous face of every store, over the store's [`BlockingCore`].
pub type Blocking<'a> = lease_ports::blocking::Blocking<'a, SqliteLeaseStore>;

/// Writes and reads on the caller's thread: writes go through group commit as the caller's
/// own (it leads a batch when nobody does), reads take a pooled connection.
impl BlockingCore for SqliteLeaseStore {
    fn apply_now(
        &self,
        job: &JobId,
        command: Command,
        then: Option<ClaimNext>,
    ) -> Result<Applied, StoreError> {
        lease_ports::claim_may_follow(&command, then.as_ref())?;
        let claims = then.is_some();
        let mut ops = vec![Op::Job(job.clone(), command)];
        ops.extend(then.map(Op::ClaimNext));
        applied(self.submit_all(ops)?, claims)
    }

    fn claim_next_now(&self, claim: &ClaimNext) -> Result<Vec<Lease>, StoreError> {
        if claim.limit == 0 {
            return Ok(Vec::new());
        }
        self.submit(Op::ClaimNext(claim.clone()))?.into_leases()
    }

    fn enqueue_many_now(&self, jobs: &[(JobId, EnqueueSpec)]) -> Result<Vec<bool>, StoreError> {
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        enqueued(self.submit(Op::Enqueue(jobs.to_vec()))?)
    }

    fn record_now(&self, job: &JobId) -> Result<Option<JobRecord>, StoreError> {
        self.with_conn(|conn| reads::record(conn, job))
    }

    /// Reads the contract's row alone (cheaper than the whole record).
    fn state_now(&self, job: &JobId) -> Result<Option<JobState>, StoreError> {
        self.with_conn(|conn| reads::state(conn, job))
    }

    fn purge_now(&self, before: Timestamp, statuses: &[Status]) -> Result<u64, StoreError> {
        self.submit(Op::Purge {
            before,
            statuses: statuses.to_vec(),
        })?
        .into_purged()
    }

    fn list_now(&self, filter: &ListFilter) -> Result<Vec<JobRecord>, StoreError> {
        self.with_conn(|conn| reads::list(conn, filter))
    }

    fn stats_now(&self, now: Timestamp) -> Result<Vec<StatsRow>, StoreError> {
        self.with_conn(|conn| reads::stats(conn, now))
    }
}

#[async_trait]
impl LeaseStore for SqliteLeaseStore {
    async fn apply(
        &self,
        job: &JobId,
        command: Command,
        then: Option<ClaimNext>,
    ) -> Result<Applied, StoreError> {
        lease_ports::claim_may_follow(&command, then.as_ref())?;
        let claims = then.is_some();
        let mut ops = vec![Op::Job(job.clone(), command)];
        ops.extend(then.map(Op::ClaimNext));
        applied(self.write_async(ops).await?, claims)
    }

    /// The writes' ops go to group commit as one caller's: one batch and one commit for all
    /// of them, each op in a savepoint of its own (so each is decided and answered alone).
    async fn apply_many(
        &self,
        writes: Vec<lease_ports::ManyWrite>,
    ) -> Vec<Result<Applied, StoreError>> {
        // A write refused before it reaches the store keeps its place in the answers.
        let mut ops = Vec::with_capacity(writes.len() * 2);
        let mut shapes = Vec::with_capacity(writes.len());
        for (job, command, then) in writes {
            match lease_ports::claim_may_follow(&command, then.as_ref()) {
                Ok(()) => {
                    shapes.push(Ok(then.is_some()));
                    ops.push(Op::Job(job, command));
                    ops.extend(then.map(Op::ClaimNext));
                }
                Err(e) => shapes.push(Err(e)),
            }
        }
        if ops.is_empty() {
            // Every write was refused before reaching the store.
            return shapes
                .into_iter()
                .filter_map(Result::err)
                .map(Err)
                .collect();
        }
        let answers = match self.write_async(ops).await {
            Ok(answers) => answers,
            Err(e) => {
                // Refused before anything ran (a read-only store): every write is told so.
                let told = || {
                    e.retold(Clone::clone)
                        .unwrap_or_else(|| StoreError::Unavailable(e.to_string().into()))
                };
                return shapes
                    .into_iter()
                    .map(|shape| Err(shape.err().unwrap_or_else(told)))
                    .collect();
            }
        };
        let mut answers = answers.into_iter();
        shapes
            .into_iter()
            .map(|shape| {
                let claims = shape?;
                let mine: Vec<_> = answers.by_ref().take(1 + usize::from(claims)).collect();
                applied(mine, claims)
            })
            .collect()
    }

    async fn claim_next_with(&self, claim: &ClaimNext) -> Result<Vec<Lease>, StoreError> {
        if claim.limit == 0 {
            return Ok(Vec::new());
        }
        one(self.write_async(vec![Op::ClaimNext(claim.clone())]).await?)?.into_leases()
    }

    async fn enqueue_many(&self, jobs: &[(JobId, EnqueueSpec)]) -> Result<Vec<bool>, StoreError> {
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        enqueued(one(self
            .write_async(vec![Op::Enqueue(jobs.to_vec())])
            .await?)?)
    }

    async fn record(&self, job: &JobId) -> Result<Option<JobRecord>, StoreError> {
        let job = job.clone();
        self.run(move |store| store.record_now(&job)).await
    }

    /// Reads the contract's row alone (cheaper than the whole record).
    async fn state(&self, job: &JobId) -> Result<Option<JobState>, StoreError> {
        let job = job.clone();
        self.run(move |store| store.state_now(&job)).await
    }

    async fn purge(&self, before: Timestamp, statuses: &[Status]) -> Result<u64, StoreError> {
        let op = Op::Purge {
            before,
            statuses: statuses.to_vec(),
        };
        one(self.write_async(vec![op]).await?)?.into_purged()
    }

    async fn list(&self, filter: &ListFilter) -> Result<Vec<JobRecord>, StoreError> {
        let filter = filter.clone();
        self.run(move |store| store.list_now(&filter)).await
    }

    async fn stats(&self, now: Timestamp) -> Result<Vec<StatsRow>, StoreError> {
        self.run(move |store| store.stats_now(now)).await
    }

    async fn children(
        &self,
        job: &JobId,
        after: Option<&JobId>,
        limit: usize,
    ) -> Result<Vec<JobId>, StoreError> {
        let (job, after) = (job.clone(), after.cloned());
        self.run(move |store| {
            store.with_conn(|conn| workflow::children(conn, &job, after.as_ref(), limit))
        })
        .await
    }

    async fn checkpoints(&self, job: &JobId) -> Result<Vec<KeptCheckpoint>, StoreError> {
        let job = job.clone();
        self.run(move |store| store.with_conn(|conn| checkpoint::of(conn, &job)))
            .await
    }

    async fn attempts(&self, job: &JobId) -> Result<lease_domain::Attempts, StoreError> {
        let job = job.clone();
        self.run(move |store| store.with_conn(|conn| attempts::read(conn, &job)))
            .await
    }

    async fn trace(&self, job: &JobId) -> Result<Option<lease_domain::TraceContext>, StoreError> {
        let job = job.clone();
        self.run(move |store| store.with_conn(|conn| trace::read(conn, &job)))
            .await
    }
}

/// Queue settings and schedules: each change and fire is one op of the write path (one
/// transaction, through group commit), each read a read outside it.
#[async_trait]
impl lease_ports::control::Control for SqliteLeaseStore {
    async fn change_queue(
        &self,
        queue: &QueueName,
        change: lease_domain::QueueChange,
    ) -> Result<lease_domain::QueueSettings, StoreError> {
        match one(self
            .write_async(vec![Op::Queue(queue.clone(), change)])
            .await?)?
        {
            ops::Reply::Settings(settings) => Ok(settings),
            other => Err(ops::wrong_reply(&other)),
        }
    }

    async fn queues(&self) -> Result<Vec<(QueueName, lease_domain::QueueSettings)>, StoreError> {
        self.run(|store| store.with_conn(|conn| control::queues(conn)))
            .await
    }

    async fn throttle(
        &self,
        queue: &QueueName,
        now: Timestamp,
    ) -> Result<lease_domain::Throttle, StoreError> {
        let queue = queue.clone();
        self.run(move |store| {
            store.with_conn(|conn| {
                let settings = control::settings(conn, &queue)?;
                let grants = if settings.limits_rate() {
                    control::queue_grants(conn, &queue, now)?
                } else {
                    Vec::new()
                };
                Ok(lease_domain::Throttle::of(&settings, &grants, now))
            })
        })
        .await
    }

    async fn group_loads(
        &self,
        queue: &QueueName,
        now: Timestamp,
        limit: usize,
    ) -> Result<Vec<lease_ports::control::GroupLoad>, StoreError> {
        let queue = queue.clone();
        self.run(move |store| {
            store.with_conn(|conn| control::group_loads(conn, &queue, now, limit))
        })
        .await
    }

    async fn put_schedule(
        &self,
        spec: &lease_domain::ScheduleSpec,
        now: Timestamp,
    ) -> Result<lease_domain::Schedule, StoreError> {
        let op = Op::PutSchedule(Box::new(spec.clone()), now);
        match one(self.write_async(vec![op]).await?)? {
            ops::Reply::Schedule(schedule) => Ok(*schedule),
            other => Err(ops::wrong_reply(&other)),
        }
    }

    async fn remove_schedule(&self, name: &lease_domain::ScheduleName) -> Result<bool, StoreError> {
        match one(self
            .write_async(vec![Op::RemoveSchedule(name.clone())])
            .await?)?
        {
            ops::Reply::Removed(removed) => Ok(removed),
            other => Err(ops::wrong_reply(&other)),
        }
    }

    async fn schedules(&self) -> Result<Vec<lease_domain::Schedule>, StoreError> {
        self.run(|store| store.with_conn(|conn| control::schedules(conn)))
            .await
    }

    async fn fire_schedule(
        &self,
        fire: &lease_ports::control::Fire,
    ) -> Result<Option<Vec<bool>>, StoreError> {
        match one(self
            .write_async(vec![Op::Fire(Box::new(fire.clone()))])
            .await?)?
        {
            ops::Reply::Fired(fired) => Ok(fired),
            other => Err(ops::wrong_reply(&other)),
        }
    }
}

/// The answers of a command (and of the claim after it, when `claimed`) as [`Applied`].
fn applied(
    answers: Vec<Result<ops::Reply, StoreError>>,
    claimed: bool,
) -> Result<Applied, StoreError> {
    let mut answers = answers.into_iter();
    let missing = || StoreError::Corrupt("a write was answered with too few answers".into());
    let outcome = answers.next().ok_or_else(missing)??.into_outcome()?;
    let claimed = claimed.then(|| {
        answers
            .next()
            .ok_or_else(missing)
            .and_then(|answer| answer?.into_leases())
    });
    Ok(Applied { outcome, claimed })
}

/// Whether each enqueue of a batch inserted its job.
fn enqueued(reply: ops::Reply) -> Result<Vec<bool>, StoreError> {
    reply.into_outcomes()?.into_iter().map(outcome_as).collect()
}

/// The README's Rust examples, compiled as doctests so they stay true.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeExamples;

/// The Rust guide's examples, compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/guide/rust.md")]
pub struct RustGuideExamples;

/// The concepts guide's examples (a guard in the writer's transaction), compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/guide/concepts.md")]
pub struct ConceptsGuideExamples;

#[async_trait::async_trait]
impl lease_ports::audit::AuditTrail for SqliteLeaseStore {
    async fn refusals(
        &self,
        filter: &lease_ports::audit::AuditFilter,
    ) -> Result<Vec<lease_ports::audit::AuditRow>, StoreError> {
        let filter = filter.clone();
        self.run(move |store| store.with_conn(|conn| reads::audit_rows(conn, &filter)))
            .await
    }
}

#[async_trait::async_trait]
impl lease_ports::overview::Overview for SqliteLeaseStore {
    async fn due(&self, now: Timestamp) -> Result<Vec<lease_ports::overview::DueRow>, StoreError> {
        self.run(move |store| store.with_conn(|conn| reads::due(conn, now)))
            .await
    }

    async fn activity(
        &self,
        since: Timestamp,
    ) -> Result<Vec<lease_ports::overview::MinuteRow>, StoreError> {
        self.run(move |store| store.with_conn(|conn| reads::activity(conn, since)))
            .await
    }
}

/// SQLite cannot signal across processes: the network service polls for jobs enqueued by
/// other processes (those enqueued through it wake its waiting claims at once).
impl lease_ports::signal::EnqueueSignal for SqliteLeaseStore {}

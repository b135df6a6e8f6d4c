//! How a store is opened: `SqliteOptions` (durability, locking, pool, clock, audit) and the
//! hook run on every new connection.

use std::sync::Arc;
use std::time::Duration;

use rusqlite::Connection;

/// SQLite's `synchronous` setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Synchronous {
    /// Every commit is synced before it is acknowledged: an acknowledged fence survives power
    /// loss. The default, and the only setting under which the fence guarantees hold.
    #[default]
    Full,
    /// Explicit opt-in: faster commits, but a power cut can roll back commits that were already
    /// acknowledged, and a rolled-back fence is then handed out a second time.
    /// Process crashes (`kill -9`) are still safe.
    Normal,
}

impl Synchronous {
    pub(crate) fn pragma_value(self) -> i64 {
        match self {
            Synchronous::Full => 2,
            Synchronous::Normal => 1,
        }
    }
}

/// A function run on every new connection, after the store's own settings (for example to
/// register SQL functions, or in tests to install hooks).
#[derive(Clone)]
pub struct ConnectHook(pub Arc<ConnectFn>);

/// The function a [`ConnectHook`] runs.
pub type ConnectFn = dyn Fn(&Connection) -> rusqlite::Result<()> + Send + Sync;

impl std::fmt::Debug for ConnectHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ConnectHook(..)")
    }
}

/// How to open a SQLite lease store.
#[derive(Debug, Clone)]
pub struct SqliteOptions {
    /// Create the database file when it does not exist (its directory must exist), and create
    /// the lease schema in an empty database. Only `init` should set this: every other use of a
    /// path refuses a file without the lease schema, so a mistyped path never becomes a database.
    pub create: bool,
    /// The `synchronous` setting; keep [`Synchronous::Full`] unless you accept reissued fences
    /// after a power cut.
    pub synchronous: Synchronous,
    /// How long to wait for a lock another connection holds before failing with
    /// [`StoreError::Unavailable`](lease_ports::StoreError::Unavailable): the database lock of a write, and the locks taken while
    /// several processes create or open the same file.
    pub busy_timeout: Duration,
    /// The largest number of pooled connections (1 in exclusive mode).
    pub pool_size: u32,
    /// A cap on the database size in pages (`PRAGMA max_page_count`); a write that would pass it
    /// fails with [`StoreError::Full`](lease_ports::StoreError::Full) and changes nothing. `None` leaves SQLite's default.
    pub max_pages: Option<u32>,
    /// Group commit: the most writes one transaction (one sync) may carry when callers of this
    /// store write at the same time. 1 turns group commit off: each write then runs in its own
    /// transaction on its own pooled connection, and concurrent writers wait on SQLite's lock.
    pub max_batch: usize,
    /// One process only: SQLite's exclusive locking mode. The store keeps one connection that
    /// holds the file's lock until it is dropped, and the write-ahead log needs no shared memory
    /// (no `-shm` file). Another process (or store) that opens the file meanwhile waits for the
    /// busy timeout and then fails with [`StoreError::Unavailable`](lease_ports::StoreError::Unavailable).
    pub exclusive: bool,
    /// Accept a file system that this build cannot vouch for (FUSE and unknown types; network
    /// file systems are always refused). The write-ahead log keeps its lock and index in memory
    /// that must be shared coherently by every process using the file; where it is not, two
    /// processes can both be granted the same fence. Set this only if one process uses the file
    /// (best with `exclusive`) or you know the file system keeps `mmap` coherent.
    pub allow_unverified_filesystem: bool,
    /// Run on every new connection after the store's settings.
    pub on_connect: Option<ConnectHook>,
    /// Whose clock decides `now`: the caller's (default), the caller's within a skew bound of
    /// this host's clock, or this host's clock (read inside each write's transaction).
    pub clock: lease_domain::ClockMode,
    /// The clock read in store-clock mode and for a skew bound; `None` (the default) is this
    /// host's system clock.
    pub host_clock: Option<crate::HostClock>,
    /// The audit trail of refused holder writes: `Some(n)` records each refusal in the
    /// refusing transaction (which then commits and syncs) and keeps the newest `n` rows;
    /// `None` (the default) records nothing.
    pub audit: Option<u64>,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        Self {
            create: true,
            synchronous: Synchronous::Full,
            busy_timeout: Duration::from_secs(30),
            pool_size: 16,
            max_pages: None,
            max_batch: 128,
            exclusive: false,
            allow_unverified_filesystem: false,
            on_connect: None,
            clock: lease_domain::ClockMode::default(),
            host_clock: None,
            audit: None,
        }
    }
}

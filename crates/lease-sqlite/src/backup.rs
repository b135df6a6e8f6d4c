//! A consistent copy of a live store (`lease backup`, SQLite's online backup API, so that no
//! one copies a file that is being written by hand), and its installation in a store's place
//! one epoch above both the copy and the store it replaces (`lease restore`), so that no fence
//! handed out after the copy was taken is handed out again.

use std::path::{Path, PathBuf};

use lease_domain::Epoch;
use lease_ports::StoreError;
use lease_ports::transfer::Transfer;
use rusqlite::backup::Backup;
use rusqlite::{Connection, OpenFlags};

use crate::options::SqliteOptions;
use crate::{SqliteLeaseStore, error};

/// What a restore did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Restored {
    /// The epoch the backup was taken at.
    pub backup_epoch: Epoch,
    /// The epoch of the store it replaced, if one was there.
    pub replaced_epoch: Option<Epoch>,
    /// The epoch the restored store is at: one above both.
    pub epoch: Epoch,
}

fn copy_all(from: &Connection, to: &mut Connection, what: &str) -> Result<(), StoreError> {
    let backup = Backup::new(from, to).map_err(|e| {
        StoreError::Unavailable(lease_ports::Detail::caused_by(
            format!("{what} cannot start: {e}"),
            e,
        ))
    })?;
    // Every page in one step: one read of a consistent snapshot of the source, and one write
    // of the destination under its lock (a paced copy of a busy queue starts over at each of
    // its writes, and readers of the destination would see it half made).
    backup.step(-1).map_err(|e| {
        StoreError::Unavailable(lease_ports::Detail::caused_by(
            format!("{what} failed: {e}"),
            e,
        ))
    })?;
    Ok(())
}

fn open_plain(path: &Path, flags: OpenFlags) -> Result<Connection, StoreError> {
    let conn = Connection::open_with_flags(path, flags).map_err(|e| {
        StoreError::Unavailable(lease_ports::Detail::caused_by(
            format!("{} cannot be opened: {e}", path.display()),
            e,
        ))
    })?;
    conn.busy_timeout(std::time::Duration::from_secs(30))
        .map_err(error::sql(&conn))?;
    Ok(conn)
}

impl SqliteLeaseStore {
    /// Takes a consistent copy of the store into `to`, a file that must not exist yet, while
    /// the store goes on serving; answers the epoch the copy is at.
    ///
    /// # Errors
    /// [`StoreError::Incompatible`] when `to` exists; the database's errors otherwise.
    pub async fn backup(&self, to: &Path) -> Result<Epoch, StoreError> {
        if to.exists() {
            return Err(StoreError::Incompatible {
                path: to.display().to_string(),
                reason: "a backup never overwrites a file: name a new one".into(),
            });
        }
        let to = to.to_path_buf();
        self.run(move |store| {
            store.with_conn(|conn| {
                let mut copy = open_plain(
                    &to,
                    OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE,
                )?;
                copy_all(&*conn, &mut copy, "the backup")?;
                // One file, without a log beside it, to keep or send away.
                copy.execute_batch("PRAGMA journal_mode = DELETE;")
                    .map_err(error::sql(&copy))?;
                crate::epoch::read(&copy)
            })
        })
        .await
    }
}

/// Installs the backup at `backup` as the store at `target`, one epoch above both the backup's
/// and the replaced store's (when `target` holds one), so that a fence handed out by the store
/// after the backup was taken, lost with the rest of its history, is never handed out again.
/// An older backup is brought up to this build's schema first. The store at `target` may be
/// open elsewhere: its content is replaced in one step under its write lock, and processes
/// using it see the restored store, epoch and all, at their next transaction.
///
/// # Errors
/// [`StoreError::NotFound`] or [`StoreError::Incompatible`] when `backup` is not a lease store
/// or `target` holds something that is not one (left as it is); the database's errors.
pub async fn restore(backup: &Path, target: &Path) -> Result<Restored, StoreError> {
    if !backup.is_file() {
        return Err(StoreError::NotFound {
            path: backup.display().to_string(),
            reason: "no backup file there".into(),
        });
    }
    let replaced_epoch = if target.exists() {
        let replaced = SqliteLeaseStore::open_with(target, SqliteOptions::default())?;
        Some(replaced.epoch().await?)
    } else {
        None
    };
    // The backup is copied next to the target and raised there, so that the target only ever
    // holds the store before or the restored store at its new epoch.
    let staged = staging(target);
    let _ = std::fs::remove_file(&staged);
    let cleanup = Staged(staged.clone());
    {
        let from = open_plain(backup, OpenFlags::SQLITE_OPEN_READ_ONLY)?;
        let mut copy = open_plain(
            &staged,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE,
        )?;
        copy_all(&from, &mut copy, "the copy of the backup")?;
    }
    let store = SqliteLeaseStore::open_with(&staged, SqliteOptions::default())?;
    let backup_epoch = store.epoch().await?;
    let above = backup_epoch.max(replaced_epoch.unwrap_or(Epoch::ZERO));
    let epoch = above.next().ok_or_else(|| StoreError::Incompatible {
        path: backup.display().to_string(),
        reason: format!("its epoch is {above}, the largest there is").into(),
    })?;
    let raised = store.raise_epoch(epoch).await?;
    drop(store);
    if target.exists() {
        let from = open_plain(&staged, OpenFlags::SQLITE_OPEN_READ_ONLY)?;
        let mut to = open_plain(target, OpenFlags::SQLITE_OPEN_READ_WRITE)?;
        copy_all(&from, &mut to, "the restore")?;
    } else {
        // A checkpoint folds the staged file's log into it before it takes the target's name.
        let conn = open_plain(&staged, OpenFlags::SQLITE_OPEN_READ_WRITE)?;
        conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE); PRAGMA journal_mode = DELETE;")
            .map_err(error::sql(&conn))?;
        drop(conn);
        std::fs::rename(&staged, target).map_err(|e| {
            StoreError::Unavailable(lease_ports::Detail::caused_by(
                format!(
                    "the restored store cannot be moved to {}: {e}",
                    target.display()
                ),
                e,
            ))
        })?;
    }
    drop(cleanup);
    Ok(Restored {
        backup_epoch,
        replaced_epoch,
        epoch: raised,
    })
}

/// Where a restore stages its copy: beside the target, so the rename stays on one file system.
fn staging(target: &Path) -> PathBuf {
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "lease.db".to_owned());
    target.with_file_name(format!(".{name}.restoring"))
}

/// The staged copy and its log, removed however the restore ends.
struct Staged(PathBuf);

impl Drop for Staged {
    fn drop(&mut self) {
        for suffix in ["", "-wal", "-shm"] {
            let mut path = self.0.clone().into_os_string();
            path.push(suffix);
            let _ = std::fs::remove_file(PathBuf::from(path));
        }
    }
}

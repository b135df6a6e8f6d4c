//! The directory guard (feature `dir`; `file:///DIR`): for workers that write results to a
//! local or shared directory. The value is a plain file at `DIR/KEY`; its fence is a sidecar
//! file beside it (`.NAME.lease-fence`), and a write holds an exclusive `flock` on a lock file
//! (`.NAME.lease-lock`) around the check, the sidecar and the value, each written to a
//! temporary file, synced and renamed into place, so readers never see a partial file.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Component, Path, PathBuf};

use async_trait::async_trait;
use lease_domain::{Fence, decide_guard};
use rustix::fs::{FlockOperation, flock};

use crate::value::{GuardKey, Guarded, PutOptions, ValueGuard, no_expiry};
use crate::{Admission, GuardError, counted_in};

/// The guard over one directory.
#[derive(Debug, Clone)]
pub struct DirGuard {
    root: PathBuf,
}

/// The files of one key.
struct Files {
    value: PathBuf,
    fence: PathBuf,
    lock: PathBuf,
    dir: PathBuf,
}

fn io(what: String) -> impl FnOnce(std::io::Error) -> GuardError {
    move |e| GuardError::unavailable(format!("{what}: {e}"), e)
}

impl DirGuard {
    /// A guard over the directory `root`, which must exist.
    ///
    /// # Errors
    /// [`GuardError::Unavailable`] when `root` is not a directory.
    pub fn open(root: impl Into<PathBuf>) -> Result<Self, GuardError> {
        let root = root.into();
        if !root.is_dir() {
            return Err(GuardError::Unavailable(
                format!("{} is not a directory", root.display()),
                None,
            ));
        }
        Ok(Self { root })
    }

    /// The files of `key`: a relative path of plain names (no `.`, `..` or empty part, none
    /// starting with `.lease` or ending as a sidecar does).
    fn files(&self, key: &GuardKey) -> Result<Files, GuardError> {
        let relative = Path::new(key.as_str());
        // Checked on the text: `Path::components` would quietly drop a `.` part.
        let clean = key
            .as_str()
            .split('/')
            .all(|part| !part.is_empty() && part != "." && part != "..")
            && relative
                .components()
                .all(|c| matches!(c, Component::Normal(_)));
        let reserved = key.as_str().split('/').any(|name| {
            name.starts_with(".lease")
                || name.ends_with(".lease-fence")
                || name.ends_with(".lease-lock")
        });
        if !clean || reserved {
            return Err(GuardError::InvalidKey(
                "a file key is a relative path of plain names (no '.', '..', empty or .lease \
                 parts)"
                    .into(),
            ));
        }
        let value = self.root.join(relative);
        let dir = value.parent().unwrap_or(&self.root).to_path_buf();
        let name = value
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        Ok(Files {
            fence: dir.join(format!(".{name}.lease-fence")),
            lock: dir.join(format!(".{name}.lease-lock")),
            value,
            dir,
        })
    }

    /// Runs `body` on a blocking thread (file locks and syncs block).
    async fn blocking<T: Send + 'static>(
        &self,
        body: impl FnOnce() -> Result<T, GuardError> + Send + 'static,
    ) -> Result<T, GuardError> {
        tokio::task::spawn_blocking(body)
            .await
            .map_err(|e| GuardError::indeterminate("the file guard's thread did not finish", e))?
    }
}

/// Holds `lock` (exclusive or shared) until dropped.
fn locked(files: &Files, exclusive: bool) -> Result<File, GuardError> {
    std::fs::create_dir_all(&files.dir)
        .map_err(io(format!("cannot create {}", files.dir.display())))?;
    let lock = OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(&files.lock)
        .map_err(io(format!("cannot open {}", files.lock.display())))?;
    let how = if exclusive {
        FlockOperation::LockExclusive
    } else {
        FlockOperation::LockShared
    };
    flock(&lock, how).map_err(|e| {
        GuardError::unavailable(format!("cannot lock {}: {e}", files.lock.display()), e)
    })?;
    Ok(lock)
}

fn read_fence(files: &Files) -> Result<Option<Fence>, GuardError> {
    match std::fs::read_to_string(&files.fence) {
        Ok(text) => text
            .trim()
            .parse::<u64>()
            .ok()
            .and_then(|n| Fence::new(n).ok())
            .map(Some)
            .ok_or_else(|| {
                GuardError::Corrupt(format!("{} holds {text:?}", files.fence.display()))
            }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io(format!("cannot read {}", files.fence.display()))(e)),
    }
}

/// Replaces `target` with `bytes`: a temporary file beside it, synced, renamed over it.
fn replace(target: &Path, bytes: &[u8]) -> Result<(), GuardError> {
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temporary = target.with_file_name(format!(".{name}.lease-tmp-{}", std::process::id()));
    let written = (|| {
        let mut file = File::create(&temporary)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        std::fs::rename(&temporary, target)
    })();
    written.map_err(|e| {
        let _ = std::fs::remove_file(&temporary);
        GuardError::indeterminate(format!("cannot write {}: {e}", target.display()), e)
    })
}

fn sync_dir(dir: &Path) -> Result<(), GuardError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| GuardError::indeterminate(format!("cannot sync {}: {e}", dir.display()), e))
}

/// Decides and writes under the exclusive lock: the sidecar first (the fence goes up before
/// the value changes, so a crash between the two leaves the new fence over the old value,
/// which the holder writes again; never an old fence over a new value), then the value (or
/// its removal).
fn write(files: &Files, value: Option<&[u8]>, fence: Fence) -> Result<Admission, GuardError> {
    let _lock = locked(files, true)?;
    if let Err(refused) = decide_guard(read_fence(files)?, fence) {
        return Ok(Err(refused));
    }
    replace(&files.fence, fence.get().to_string().as_bytes())?;
    match value {
        Some(bytes) => replace(&files.value, bytes)?,
        None => match std::fs::remove_file(&files.value) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(GuardError::indeterminate(
                    format!("cannot delete {}: {e}", files.value.display()),
                    e,
                ));
            }
        },
    }
    sync_dir(&files.dir)?;
    Ok(Ok(()))
}

#[async_trait]
impl ValueGuard for DirGuard {
    async fn put(
        &self,
        key: &GuardKey,
        value: &[u8],
        fence: Fence,
        options: &PutOptions,
    ) -> Result<Admission, GuardError> {
        no_expiry("file", options)?;
        let files = self.files(key)?;
        let value = value.to_vec();
        let admission = self
            .blocking(move || write(&files, Some(&value), fence))
            .await?;
        Ok(counted_in("file", admission))
    }

    async fn get(&self, key: &GuardKey) -> Result<Option<Guarded>, GuardError> {
        let files = self.files(key)?;
        let root = self.root.clone();
        self.blocking(move || {
            if !root.is_dir() {
                return Err(GuardError::Unavailable(
                    format!("{} is no longer a directory", root.display()),
                    None,
                ));
            }
            if !files.value.exists() {
                return Ok(None);
            }
            let _lock = locked(&files, false)?;
            let value = match std::fs::read(&files.value) {
                Ok(value) => value,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(io(format!("cannot read {}", files.value.display()))(e)),
            };
            // A file written without the guard reads as fence 0.
            let fence = read_fence(&files)?.unwrap_or(Fence::ZERO);
            Ok(Some(Guarded { fence, value }))
        })
        .await
    }

    async fn delete(&self, key: &GuardKey, fence: Fence) -> Result<Admission, GuardError> {
        let files = self.files(key)?;
        let admission = self.blocking(move || write(&files, None, fence)).await?;
        Ok(counted_in("file", admission))
    }

    fn resource(&self) -> &'static str {
        "file"
    }
}

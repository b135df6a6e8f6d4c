//! The checks on a database path made without opening the file: what it is (a file, a
//! directory, missing), its links, its file system (network ones refused, FUSE and unknown ones
//! only when allowed), whether it can be written, and syncing a new file's directory.

use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use lease_ports::StoreError;

pub(crate) fn incompatible(shown: &str, reason: impl Into<lease_ports::Detail>) -> StoreError {
    StoreError::Incompatible {
        path: shown.to_owned(),
        reason: reason.into(),
    }
}

/// Why a file with several names is refused.
pub(crate) fn hard_link_reason(links: u64) -> String {
    format!(
        "it has {links} hard links; SQLite names its -wal and -shm files after the path, so each \
         name of one file would get its own write-ahead log and lock, and two writers could both \
         be granted the same fence (remove the extra links, or use one name only)"
    )
}

/// What is at the target path, checked with `stat` only (no descriptor of the database file is
/// opened and closed here: closing one would drop the POSIX locks SQLite holds on the file for
/// other connections of this process).
pub(crate) enum Target {
    Missing,
    File,
}

pub(crate) fn check_path(path: &Path, shown: &str) -> Result<Target, StoreError> {
    Ok(match identity(path, shown)? {
        Some(_) => Target::File,
        None => Target::Missing,
    })
}

/// The file at the target path (its device and inode), `None` when there is none, with the
/// checks of [`check_path`].
pub(crate) fn identity(path: &Path, shown: &str) -> Result<Option<(u64, u64)>, StoreError> {
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_dir() => Err(incompatible(shown, "it is a directory")),
        Ok(meta) if !meta.is_file() => Err(incompatible(shown, "it is not a regular file")),
        Ok(meta) if meta.nlink() > 1 => Err(incompatible(shown, hard_link_reason(meta.nlink()))),
        Ok(meta) => Ok(Some((meta.dev(), meta.ino()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(StoreError::Unavailable(
            format!("cannot inspect {shown}: {e}").into(),
        )),
    }
}

/// Checks the path of an open store again before a new connection is made: a hard link made
/// since it was opened, or the file deleted under it (never silently made anew).
pub(crate) fn recheck(path: &Path) -> Result<(), StoreError> {
    let shown = path.display().to_string();
    match check_path(path, &shown)? {
        Target::File => Ok(()),
        Target::Missing => Err(StoreError::NotFound {
            path: shown,
            reason: "the file is gone".into(),
        }),
    }
}

/// A file system as `statfs` names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FileSystem {
    /// A local file system whose shared memory is coherent between processes.
    Local(&'static str),
    /// A network file system: shared memory is not shared between machines.
    Network(&'static str),
    /// FUSE, or a type this build does not know.
    Unverified(String),
}

pub(crate) const LOCAL_FILE_SYSTEMS: [(u32, &str); 19] = [
    (0xEF53, "ext4"),
    (0x5846_5342, "xfs"),
    (0x9123_683E, "btrfs"),
    (0x0102_1994, "tmpfs"),
    (0x8584_58F6, "ramfs"),
    (0x2FC1_2FC1, "zfs"),
    (0xF2F5_2010, "f2fs"),
    (0x794C_7630, "overlayfs"),
    (0xCA45_1A4E, "bcachefs"),
    (0x3153_464A, "jfs"),
    (0x5265_4973, "reiserfs"),
    (0x3434, "nilfs2"),
    (0x4D44, "vfat"),
    (0x2011_BAB0, "exfat"),
    (0x7366_746E, "ntfs3"),
    (0x5346_544E, "ntfs"),
    (0xE0F5_E1E2, "erofs"),
    (0x7371_7368, "squashfs"),
    (0x9660, "iso9660"),
];

pub(crate) const NETWORK_FILE_SYSTEMS: [(u32, &str); 13] = [
    (0x6969, "NFS"),
    (0x517B, "SMB"),
    (0xFF53_4D42, "CIFS"),
    (0xFE53_4D42, "SMB2"),
    (0x5346_414F, "AFS"),
    (0x6B41_4653, "kAFS"),
    (0x7375_7245, "Coda"),
    (0x564C, "NCP"),
    (0x00C3_6400, "Ceph"),
    (0x0102_1997, "9p"),
    (0x0BD0_0BD0, "Lustre"),
    (0x0116_1970, "GFS2"),
    (0x7461_636F, "OCFS2"),
];

pub(crate) const FUSE_MAGIC: u32 = 0x6573_5546;

/// Names a file system from its `statfs` magic number.
pub(crate) fn classify_filesystem(magic: u32) -> FileSystem {
    if let Some((_, name)) = LOCAL_FILE_SYSTEMS.iter().find(|(m, _)| *m == magic) {
        return FileSystem::Local(name);
    }
    if let Some((_, name)) = NETWORK_FILE_SYSTEMS.iter().find(|(m, _)| *m == magic) {
        return FileSystem::Network(name);
    }
    if magic == FUSE_MAGIC {
        return FileSystem::Unverified("FUSE".to_owned());
    }
    FileSystem::Unverified(format!("unknown (statfs type {magic:#x})"))
}

/// Refuses a network file system always, and FUSE or an unknown type unless allowed.
pub(crate) fn check_filesystem(
    kind: &FileSystem,
    shown: &str,
    allow_unverified: bool,
) -> Result<(), StoreError> {
    match kind {
        FileSystem::Local(_) => Ok(()),
        FileSystem::Network(name) => Err(incompatible(
            shown,
            format!(
                "it is on a {name} network file system; SQLite's write-ahead log keeps its lock \
                 and index in shared memory, which is not shared between machines, so two \
                 writers could both be granted the same fence (use a local file system)"
            ),
        )),
        FileSystem::Unverified(_) if allow_unverified => Ok(()),
        FileSystem::Unverified(name) => Err(incompatible(
            shown,
            format!(
                "it is on a {name} file system, which this build cannot vouch for: SQLite's \
                 write-ahead log needs memory shared coherently between processes, and where it \
                 is not, two processes can both be granted the same fence; if one process uses \
                 the file, accept the risk with allow_unverified_filesystem (--allow-unverified-fs), \
                 best with exclusive mode (--exclusive)"
            ),
        )),
    }
}

pub(crate) fn filesystem_of(path: &Path, shown: &str) -> Result<FileSystem, StoreError> {
    let stat = rustix::fs::statfs(path).map_err(|e| {
        StoreError::Unavailable(lease_ports::Detail::caused_by(
            format!("cannot inspect the file system of {shown}: {e}"),
            e,
        ))
    })?;
    // The field's integer type differs between targets; the magic numbers are 32-bit.
    #[allow(clippy::useless_conversion)]
    let magic = i64::from(stat.f_type);
    Ok(classify_filesystem(
        u32::try_from(magic & 0xFFFF_FFFF).unwrap_or(0),
    ))
}

/// Why the database can only be read, when it can only be read: a read-only file system, or a
/// file or directory that cannot be written (permissions, or `chattr +i`). Uses `access(2)`, so
/// no descriptor of the file is opened.
pub(crate) fn read_only_reason(path: &Path, shown: &str) -> Option<String> {
    use rustix::fs::{Access, access};
    use rustix::io::Errno;
    let dir = parent_dir(path);
    for (target, what) in [(path, "the file"), (dir, "its directory")] {
        match access(target, Access::WRITE_OK) {
            Err(Errno::ROFS) => return Some(format!("{shown} is on a read-only file system")),
            Err(Errno::ACCESS | Errno::PERM) => {
                return Some(format!(
                    "{what} {} cannot be written (permissions, or marked immutable)",
                    target.display()
                ));
            }
            _ => {}
        }
    }
    None
}

pub(crate) fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// SQLite syncs the file but not the directory entry that names it; without this a power cut
/// can lose a new database file and every fence in it.
pub(crate) fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(|e| {
        StoreError::Unavailable(format!("cannot sync directory {}: {e}", dir.display()).into())
    })
}

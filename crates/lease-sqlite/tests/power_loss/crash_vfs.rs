//! A crash-simulating SQLite VFS: it wraps the default VFS, keeps every write made since a file's
//! last sync in a shadow, and at a chosen cut point "loses power": from then on every write, sync,
//! truncate and delete fails, and `power_cut` rewrites each file as a disk could have left it,
//! with each unsynced write kept, dropped, or torn at 512-byte sector granularity.
//!
//! Truncates and deletes are treated as durable when they happen (SQLite in WAL mode only
//! truncates or deletes after a sync), and the `-shm` file, which lives in memory on a real
//! machine, is deleted at the cut.

#![allow(unsafe_code)] // A VFS is a C interface: raw pointers and extern "C" callbacks.

use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::collections::BTreeMap;
use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::{Mutex, MutexGuard, Once};

use lease_ports::history::Rng;
use rusqlite::ffi;

/// One write made since the file's last sync: where, what was there before, what was written.
struct Pending {
    offset: u64,
    before: Vec<u8>,
    size_before: u64,
    after: Vec<u8>,
}

#[derive(Default)]
struct State {
    /// Writes and syncs left before the power goes; `None` when no cut is armed.
    ops_left: Option<u64>,
    crashed: bool,
    pending: BTreeMap<String, Vec<Pending>>,
    /// Files open through this VFS; the cut waits for every one to close.
    open_files: usize,
}

static STATE: Mutex<State> = Mutex::new(State {
    ops_left: None,
    crashed: false,
    pending: BTreeMap::new(),
    open_files: 0,
});

fn state() -> MutexGuard<'static, State> {
    STATE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Counts one write or sync; returns `true` when the power goes at this operation.
fn tick(state: &mut State) -> bool {
    match state.ops_left {
        Some(0) | None => false,
        Some(1) => {
            state.ops_left = Some(0);
            state.crashed = true;
            true
        }
        Some(n) => {
            state.ops_left = Some(n - 1);
            false
        }
    }
}

#[repr(C)]
struct CrashFile {
    base: ffi::sqlite3_file,
    real: *mut ffi::sqlite3_file,
    real_layout: Layout,
    path: *mut c_char,
}

/// The wrapped default VFS, owned by SQLite and valid for the process's life.
static BASE: AtomicPtr<ffi::sqlite3_vfs> = AtomicPtr::new(ptr::null_mut());
static INSTALL: Once = Once::new();

fn base() -> *mut ffi::sqlite3_vfs {
    BASE.load(Ordering::SeqCst)
}

/// Registers the VFS as the process's default, once. Until a cut is armed it only passes through.
pub fn install() {
    INSTALL.call_once(|| unsafe {
        let base_vfs = ffi::sqlite3_vfs_find(ptr::null());
        assert!(!base_vfs.is_null(), "no default VFS");
        BASE.store(base_vfs, Ordering::SeqCst);
        let mut ours: ffi::sqlite3_vfs = *base_vfs;
        ours.zName = CString::new("crashsim").unwrap().into_raw();
        ours.szOsFile = c_int::try_from(size_of::<CrashFile>()).unwrap();
        ours.pNext = ptr::null_mut();
        ours.xOpen = Some(x_open);
        ours.xDelete = Some(x_delete);
        let ours = Box::into_raw(Box::new(ours));
        assert_eq!(ffi::sqlite3_vfs_register(ours, 1), ffi::SQLITE_OK);
    });
}

/// Arms a cut after `ops` more writes and syncs, forgetting every earlier write.
pub fn arm(ops: u64) {
    let mut s = state();
    s.ops_left = Some(ops.max(1));
    s.crashed = false;
    s.pending.clear();
}

/// Whether the power has gone.
pub fn crashed() -> bool {
    state().crashed
}

/// What the cut did to the files.
#[derive(Debug, Default)]
pub struct CutReport {
    pub kept: usize,
    pub dropped: usize,
    pub torn: usize,
}

/// Loses the power now (if it has not gone yet) and rewrites every file as the disk holds it:
/// the synced content plus, in order, each unsynced write kept, dropped or torn. Then disarms.
/// The database's `-shm` file is deleted, as memory is lost. Call it only after every connection
/// is closed: a connection pool may close its last connection on a background thread, so this
/// waits (up to 10 s) until no file is open through the VFS.
pub fn power_cut(rng: &mut Rng, db: &Path) -> CutReport {
    let waited = std::time::Instant::now();
    let mut s = state();
    s.crashed = true;
    while s.open_files > 0 {
        assert!(
            waited.elapsed().as_secs() < 10,
            "{} files still open at the cut",
            s.open_files
        );
        drop(s);
        std::thread::sleep(std::time::Duration::from_millis(1));
        s = state();
    }
    let mut report = CutReport::default();
    for (path, writes) in std::mem::take(&mut s.pending) {
        let Ok(file) = OpenOptions::new().read(true).write(true).open(&path) else {
            continue;
        };
        // Undo every unsynced write, newest first, to get back to the synced content.
        for w in writes.iter().rev() {
            file.write_all_at(&w.before, w.offset).unwrap();
            file.set_len(w.size_before).unwrap();
        }
        // Replay what the disk may have kept.
        for w in &writes {
            match rng.below(3) {
                0 => report.dropped += 1,
                1 => {
                    file.write_all_at(&w.after, w.offset).unwrap();
                    report.kept += 1;
                }
                _ => {
                    for (i, sector) in w.after.chunks(512).enumerate() {
                        if rng.below(2) == 0 {
                            file.write_all_at(sector, w.offset + 512 * i as u64)
                                .unwrap();
                        }
                    }
                    report.torn += 1;
                }
            }
        }
        file.sync_all().unwrap();
    }
    let _ = std::fs::remove_file(format!("{}-shm", db.display()));
    s.ops_left = None;
    s.crashed = false;
    report
}

unsafe fn file_path(file: *mut ffi::sqlite3_file) -> Option<String> {
    let path = unsafe { (*(file as *mut CrashFile)).path };
    (!path.is_null()).then(|| {
        unsafe { CStr::from_ptr(path) }
            .to_string_lossy()
            .into_owned()
    })
}

unsafe fn real(file: *mut ffi::sqlite3_file) -> *mut ffi::sqlite3_file {
    unsafe { (*(file as *mut CrashFile)).real }
}

unsafe fn methods(file: *mut ffi::sqlite3_file) -> &'static ffi::sqlite3_io_methods {
    unsafe { &*(*real(file)).pMethods }
}

unsafe extern "C" fn x_open(
    _vfs: *mut ffi::sqlite3_vfs,
    name: ffi::sqlite3_filename,
    file: *mut ffi::sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
) -> c_int {
    unsafe {
        let ours = file as *mut CrashFile;
        (*ours).base.pMethods = ptr::null();
        let base = base();
        let layout =
            Layout::from_size_align(usize::try_from((*base).szOsFile).unwrap(), 16).unwrap();
        let real_file = alloc_zeroed(layout) as *mut ffi::sqlite3_file;
        let rc = ((*base).xOpen.unwrap())(base, name, real_file, flags, out_flags);
        if rc != ffi::SQLITE_OK {
            if !(*real_file).pMethods.is_null() {
                ((*(*real_file).pMethods).xClose.unwrap())(real_file);
            }
            dealloc(real_file as *mut u8, layout);
            return rc;
        }
        (*ours).real = real_file;
        (*ours).real_layout = layout;
        (*ours).path = if name.is_null() {
            ptr::null_mut()
        } else {
            CString::new(CStr::from_ptr(name).to_bytes())
                .unwrap()
                .into_raw()
        };
        (*ours).base.pMethods = &IO_METHODS;
        state().open_files += 1;
        ffi::SQLITE_OK
    }
}

unsafe extern "C" fn x_delete(
    _vfs: *mut ffi::sqlite3_vfs,
    name: *const c_char,
    sync_dir: c_int,
) -> c_int {
    let mut s = state();
    if s.crashed {
        return ffi::SQLITE_IOERR_DELETE;
    }
    let path = unsafe { CStr::from_ptr(name) }
        .to_string_lossy()
        .into_owned();
    s.pending.remove(&path);
    let base = base();
    unsafe { ((*base).xDelete.unwrap())(base, name, sync_dir) }
}

unsafe extern "C" fn x_close(file: *mut ffi::sqlite3_file) -> c_int {
    unsafe {
        let ours = file as *mut CrashFile;
        let rc = (methods(file).xClose.unwrap())(real(file));
        dealloc((*ours).real as *mut u8, (*ours).real_layout);
        if !(*ours).path.is_null() {
            drop(CString::from_raw((*ours).path));
        }
        (*ours).base.pMethods = ptr::null();
        state().open_files -= 1;
        rc
    }
}

unsafe extern "C" fn x_read(
    file: *mut ffi::sqlite3_file,
    buf: *mut c_void,
    amt: c_int,
    offset: i64,
) -> c_int {
    unsafe { (methods(file).xRead.unwrap())(real(file), buf, amt, offset) }
}

unsafe extern "C" fn x_write(
    file: *mut ffi::sqlite3_file,
    buf: *const c_void,
    amt: c_int,
    offset: i64,
) -> c_int {
    let mut s = state();
    if s.crashed || tick(&mut s) {
        return ffi::SQLITE_IOERR_WRITE;
    }
    unsafe {
        let Some(path) = file_path(file) else {
            return (methods(file).xWrite.unwrap())(real(file), buf, amt, offset);
        };
        let mut size: i64 = 0;
        let rc = (methods(file).xFileSize.unwrap())(real(file), &mut size);
        if rc != ffi::SQLITE_OK {
            return rc;
        }
        let len = usize::try_from(amt).unwrap();
        let keep = usize::try_from((size - offset).clamp(0, i64::from(amt))).unwrap();
        let mut before = vec![0_u8; len];
        if keep > 0 {
            let rc =
                (methods(file).xRead.unwrap())(real(file), before.as_mut_ptr().cast(), amt, offset);
            if rc != ffi::SQLITE_OK && rc != ffi::SQLITE_IOERR_SHORT_READ {
                return rc;
            }
        }
        before.truncate(keep);
        let after = std::slice::from_raw_parts(buf as *const u8, len).to_vec();
        let rc = (methods(file).xWrite.unwrap())(real(file), buf, amt, offset);
        if rc == ffi::SQLITE_OK {
            s.pending.entry(path).or_default().push(Pending {
                offset: u64::try_from(offset).unwrap(),
                before,
                size_before: u64::try_from(size).unwrap(),
                after,
            });
        }
        rc
    }
}

unsafe extern "C" fn x_truncate(file: *mut ffi::sqlite3_file, size: i64) -> c_int {
    let mut s = state();
    if s.crashed {
        return ffi::SQLITE_IOERR_TRUNCATE;
    }
    unsafe {
        if let Some(path) = file_path(file) {
            s.pending.remove(&path);
        }
        (methods(file).xTruncate.unwrap())(real(file), size)
    }
}

unsafe extern "C" fn x_sync(file: *mut ffi::sqlite3_file, flags: c_int) -> c_int {
    let mut s = state();
    if s.crashed || tick(&mut s) {
        return ffi::SQLITE_IOERR_FSYNC;
    }
    unsafe {
        let rc = (methods(file).xSync.unwrap())(real(file), flags);
        if rc == ffi::SQLITE_OK
            && let Some(path) = file_path(file)
        {
            s.pending.remove(&path);
        }
        rc
    }
}

unsafe extern "C" fn x_file_size(file: *mut ffi::sqlite3_file, size: *mut i64) -> c_int {
    unsafe { (methods(file).xFileSize.unwrap())(real(file), size) }
}

unsafe extern "C" fn x_lock(file: *mut ffi::sqlite3_file, level: c_int) -> c_int {
    unsafe { (methods(file).xLock.unwrap())(real(file), level) }
}

unsafe extern "C" fn x_unlock(file: *mut ffi::sqlite3_file, level: c_int) -> c_int {
    unsafe { (methods(file).xUnlock.unwrap())(real(file), level) }
}

unsafe extern "C" fn x_check_reserved_lock(file: *mut ffi::sqlite3_file, out: *mut c_int) -> c_int {
    unsafe { (methods(file).xCheckReservedLock.unwrap())(real(file), out) }
}

unsafe extern "C" fn x_file_control(
    file: *mut ffi::sqlite3_file,
    op: c_int,
    arg: *mut c_void,
) -> c_int {
    unsafe { (methods(file).xFileControl.unwrap())(real(file), op, arg) }
}

unsafe extern "C" fn x_sector_size(file: *mut ffi::sqlite3_file) -> c_int {
    unsafe { (methods(file).xSectorSize.unwrap())(real(file)) }
}

unsafe extern "C" fn x_device_characteristics(file: *mut ffi::sqlite3_file) -> c_int {
    unsafe { (methods(file).xDeviceCharacteristics.unwrap())(real(file)) }
}

unsafe extern "C" fn x_shm_map(
    file: *mut ffi::sqlite3_file,
    page: c_int,
    page_size: c_int,
    extend: c_int,
    out: *mut *mut c_void,
) -> c_int {
    unsafe { (methods(file).xShmMap.unwrap())(real(file), page, page_size, extend, out) }
}

unsafe extern "C" fn x_shm_lock(
    file: *mut ffi::sqlite3_file,
    offset: c_int,
    n: c_int,
    flags: c_int,
) -> c_int {
    unsafe { (methods(file).xShmLock.unwrap())(real(file), offset, n, flags) }
}

unsafe extern "C" fn x_shm_barrier(file: *mut ffi::sqlite3_file) {
    unsafe { (methods(file).xShmBarrier.unwrap())(real(file)) }
}

unsafe extern "C" fn x_shm_unmap(file: *mut ffi::sqlite3_file, delete: c_int) -> c_int {
    unsafe { (methods(file).xShmUnmap.unwrap())(real(file), delete) }
}

/// Version 2: WAL's shared-memory calls, but no memory-mapped I/O, so every write goes through xWrite.
static IO_METHODS: ffi::sqlite3_io_methods = ffi::sqlite3_io_methods {
    iVersion: 2,
    xClose: Some(x_close),
    xRead: Some(x_read),
    xWrite: Some(x_write),
    xTruncate: Some(x_truncate),
    xSync: Some(x_sync),
    xFileSize: Some(x_file_size),
    xLock: Some(x_lock),
    xUnlock: Some(x_unlock),
    xCheckReservedLock: Some(x_check_reserved_lock),
    xFileControl: Some(x_file_control),
    xSectorSize: Some(x_sector_size),
    xDeviceCharacteristics: Some(x_device_characteristics),
    xShmMap: Some(x_shm_map),
    xShmLock: Some(x_shm_lock),
    xShmBarrier: Some(x_shm_barrier),
    xShmUnmap: Some(x_shm_unmap),
    xFetch: None,
    xUnfetch: None,
};

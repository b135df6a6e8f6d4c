//! A bare relative file name (`lease.db`, the CLI's default) works: its directory is the
//! current one. This test changes the process's working directory, so it has a binary of its own.

use lease_sqlite::{SqliteLeaseStore, claim, enqueue, init_db, state};

#[test]
fn a_bare_file_name_is_a_database_in_the_current_directory() {
    let dir = tempfile::tempdir().unwrap();
    std::env::set_current_dir(dir.path()).unwrap();
    init_db("lease.db").unwrap();
    assert!(enqueue("lease.db", "j").unwrap());
    assert_eq!(claim("lease.db", "j", "w", 0.0, 5.0).unwrap(), Some(1));
    assert_eq!(state("lease.db", "j").unwrap().unwrap().fence, 1);
    drop(SqliteLeaseStore::open_existing("lease.db").unwrap());
    assert!(dir.path().join("lease.db").exists());
}

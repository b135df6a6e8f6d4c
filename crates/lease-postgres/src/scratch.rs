//! A throwaway database for tests and benchmarks: created with a unique name, dropped (with
//! every connection to it) when the value is dropped.

use std::sync::atomic::{AtomicU32, Ordering};

/// A fresh, uniquely named database on the server `PG*`/defaults point at (or `LEASE_TEST_PG`,
/// a URL of an administrative database), dropped on drop.
#[derive(Debug)]
pub struct ScratchDatabase {
    admin: String,
    name: String,
    url: String,
}

static NEXT: AtomicU32 = AtomicU32::new(0);

impl ScratchDatabase {
    /// Creates the database.
    ///
    /// # Panics
    /// If the server cannot be reached or refuses: a test cannot go on without it.
    #[must_use]
    pub fn create() -> Self {
        let admin = std::env::var("LEASE_TEST_PG")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned());
        // Random per process (the std hasher's keys), so runs never collide on a name.
        let salt = {
            use std::hash::{BuildHasher, Hasher};
            std::collections::hash_map::RandomState::new()
                .build_hasher()
                .finish()
                % 1_000_000
        };
        let name = format!(
            "lease_test_{}_{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed),
            salt
        );
        run_admin(&admin, &format!("CREATE DATABASE {name}"))
            .unwrap_or_else(|e| panic!("cannot create test database {name}: {e}"));
        let mut config: tokio_postgres::Config = admin.parse().expect("LEASE_TEST_PG parses");
        config.dbname(&name);
        let url = crate::describe(&config);
        Self { admin, name, url }
    }

    /// A `postgres://` URL of the database.
    #[must_use]
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The database's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs one SQL text in the database (for tests that reach past the store).
    ///
    /// # Errors
    /// The server's error.
    pub fn execute(&self, sql: &str) -> Result<(), String> {
        run_admin(&self.url, sql)
    }

    /// A plain client of the database, outside the store (its connection driven by a task
    /// on the caller's Tokio runtime).
    ///
    /// # Errors
    /// The server's error.
    pub async fn client(&self) -> Result<tokio_postgres::Client, String> {
        let (client, connection) = tokio_postgres::connect(&self.url, tokio_postgres::NoTls)
            .await
            .map_err(|e| crate::error::describe(&e))?;
        tokio::spawn(connection);
        Ok(client)
    }
}

/// Runs `sql` on its own thread and runtime, so it works inside or outside Tokio.
fn run_admin(url: &str, sql: &str) -> Result<(), String> {
    let url = url.to_owned();
    let sql = sql.to_owned();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        rt.block_on(async move {
            let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                .await
                .map_err(|e| crate::error::describe(&e))?;
            let task = tokio::spawn(connection);
            let done = client
                .batch_execute(&sql)
                .await
                .map_err(|e| crate::error::describe(&e));
            drop(client);
            let _ = task.await;
            done
        })
    })
    .join()
    .map_err(|_| "the admin thread panicked".to_owned())?
}

impl Drop for ScratchDatabase {
    fn drop(&mut self) {
        let _ = run_admin(
            &self.admin,
            &format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name),
        );
    }
}

//! The MariaDB / MySQL guard (feature `mysql`): a table of fences and a stored procedure,
//! `lease_admit_fence(key, fence)`, that a writer calls inside its own transaction, in any
//! language. A stale fence rolls that transaction back and raises SQLSTATE `45000` with the
//! message `lease: stale fence presented=N current=M`, so nothing the writer did in it
//! commits. [`admit`] is the Rust helper for a transaction of yours; [`MysqlGuard`] keeps
//! values in a table of its own under the same procedure (`lease guard put mysql://...`).

use async_trait::async_trait;
use lease_domain::{Fence, GuardRefused};
use mysql_async::prelude::Queryable;
use mysql_async::{Pool, TxOpts};

use crate::value::{GuardKey, Guarded, PutOptions, ValueGuard, no_expiry};
use crate::{Admission, GuardError, counted_in};

/// The procedure's version, in its comment; `install` replaces an older one.
pub const VERSION: u32 = 1;

/// The tables: every key's highest fence, and the values [`MysqlGuard`] keeps.
pub const TABLES: &str = "CREATE TABLE IF NOT EXISTS lease_fences (
    fence_key VARBINARY(1024) NOT NULL PRIMARY KEY,
    fence BIGINT UNSIGNED NOT NULL
) ENGINE=InnoDB;
CREATE TABLE IF NOT EXISTS lease_guarded (
    value_key VARBINARY(1024) NOT NULL PRIMARY KEY,
    value LONGBLOB NOT NULL
) ENGINE=InnoDB";

/// The procedure's body (after `CREATE [OR REPLACE] PROCEDURE lease_admit_fence`): the rule
/// of `lease_domain::decide_guard` in SQL, the row locked for the rest of the caller's
/// transaction.
pub const PROCEDURE: &str = "(IN p_key VARBINARY(1024), IN p_fence BIGINT UNSIGNED)
MODIFIES SQL DATA
COMMENT 'lease fence guard, version 1'
BEGIN
  DECLARE v_current BIGINT UNSIGNED DEFAULT NULL;
  DECLARE v_message VARCHAR(128);
  IF p_key IS NULL OR LENGTH(p_key) = 0 OR LENGTH(p_key) > 1024 THEN
    SIGNAL SQLSTATE '22023' SET MESSAGE_TEXT = 'lease: the key must be 1 to 1024 bytes';
  END IF;
  IF p_fence IS NULL OR p_fence > 9223372036854775807 THEN
    SIGNAL SQLSTATE '22023'
      SET MESSAGE_TEXT = 'lease: the fence must be an integer from 0 to 9223372036854775807';
  END IF;
  INSERT INTO lease_fences (fence_key, fence) VALUES (p_key, p_fence)
    ON DUPLICATE KEY UPDATE fence = fence;
  SELECT fence INTO v_current FROM lease_fences WHERE fence_key = p_key FOR UPDATE;
  IF v_current > p_fence THEN
    ROLLBACK;
    SET v_message = CONCAT('lease: stale fence presented=', p_fence, ' current=', v_current);
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = v_message;
  END IF;
  UPDATE lease_fences SET fence = p_fence WHERE fence_key = p_key AND fence < p_fence;
END";

fn server_error(e: mysql_async::Error) -> GuardError {
    match &e {
        mysql_async::Error::Io(_) | mysql_async::Error::Driver(_) => {
            GuardError::indeterminate(format!("MariaDB did not answer: {e}"), e)
        }
        _ => GuardError::unavailable(format!("MariaDB: {e}"), e),
    }
}

/// Reads the procedure's refusal back (`presented=N current=M`), or `None` for another error.
fn refusal(e: &mysql_async::Error) -> Option<GuardRefused> {
    let mysql_async::Error::Server(server) = e else {
        return None;
    };
    if server.state != "45000" {
        return None;
    }
    let number = |name: &str| {
        let start = server.message.find(name)? + name.len();
        let digits: String = server.message[start..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        Fence::new(digits.parse().ok()?).ok()
    };
    Some(GuardRefused {
        presented: number("presented=")?,
        current: number("current=")?,
    })
}

/// A `mysql://` (or `mariadb://`) URL as the client takes it.
fn client_url(url: &str) -> Result<String, GuardError> {
    if let Some(rest) = url.strip_prefix("mariadb://") {
        return Ok(format!("mysql://{rest}"));
    }
    if url.starts_with("mysql://") {
        return Ok(url.to_owned());
    }
    Err(GuardError::Unsupported(format!(
        "{url} is not a mysql:// or mariadb:// URL"
    )))
}

/// Makes the tables and the procedure at `url` (`mysql://USER[:PASSWORD]@HOST:PORT/DB`),
/// replacing an older procedure; does nothing to data. Returns whether the procedure was
/// (re)made.
///
/// # Errors
/// [`GuardError::Unavailable`] when the server cannot be reached or refuses.
pub async fn install(url: &str) -> Result<bool, GuardError> {
    let pool = Pool::from_url(client_url(url)?)
        .map_err(|e| GuardError::unavailable(format!("MariaDB URL: {e}"), e))?;
    let mut conn = pool.get_conn().await.map_err(server_error)?;
    conn.query_drop(TABLES).await.map_err(server_error)?;
    let comment: Option<String> = conn
        .query_first(
            "SELECT ROUTINE_COMMENT FROM information_schema.ROUTINES \
             WHERE ROUTINE_SCHEMA = DATABASE() AND ROUTINE_NAME = 'lease_admit_fence'",
        )
        .await
        .map_err(server_error)?;
    if comment.as_deref() == Some(&format!("lease fence guard, version {VERSION}")) {
        // The pool waits for every connection to come back before it disconnects.
        drop(conn);
        pool.disconnect().await.ok();
        return Ok(false);
    }
    let version: String = conn
        .query_first("SELECT VERSION()")
        .await
        .map_err(server_error)?
        .unwrap_or_default();
    // MariaDB replaces a procedure in one step; MySQL drops it first (a writer calling in
    // between gets an error, never an admission).
    if version.contains("MariaDB") {
        conn.query_drop(format!(
            "CREATE OR REPLACE PROCEDURE lease_admit_fence {PROCEDURE}"
        ))
        .await
        .map_err(server_error)?;
    } else {
        conn.query_drop("DROP PROCEDURE IF EXISTS lease_admit_fence")
            .await
            .map_err(server_error)?;
        conn.query_drop(format!("CREATE PROCEDURE lease_admit_fence {PROCEDURE}"))
            .await
            .map_err(server_error)?;
    }
    drop(conn);
    pool.disconnect().await.ok();
    Ok(true)
}

/// Admits a write to `key` from a holder of `fence` inside the caller's transaction, or
/// refuses it; on a refusal the procedure has rolled the transaction back, so write nothing
/// more in it.
///
/// # Errors
/// [`GuardError`] when the call fails for another reason (the procedure not installed, the
/// server gone).
pub async fn admit(
    tx: &mut mysql_async::Transaction<'_>,
    key: &GuardKey,
    fence: Fence,
) -> Result<Admission, GuardError> {
    match tx
        .exec_drop(
            "CALL lease_admit_fence(?, ?)",
            (key.as_str().as_bytes(), fence.get()),
        )
        .await
    {
        Ok(()) => Ok(Ok(())),
        Err(e) => match refusal(&e) {
            Some(refused) => Ok(counted_in("mysql", Err(refused))),
            None => Err(server_error(e)),
        },
    }
}

/// Values in the table `lease_guarded`, each written in one transaction with
/// `lease_admit_fence`.
#[derive(Debug, Clone)]
pub struct MysqlGuard {
    pool: Pool,
}

impl MysqlGuard {
    /// A guard over the database at `url` (installed with [`install`]).
    ///
    /// # Errors
    /// [`GuardError::Unsupported`] or `Unavailable` for a URL the client cannot take.
    pub fn connect(url: &str) -> Result<Self, GuardError> {
        let pool = Pool::from_url(client_url(url)?)
            .map_err(|e| GuardError::unavailable(format!("MariaDB URL: {e}"), e))?;
        Ok(Self { pool })
    }

    /// Runs `write` after the admission, in one transaction.
    async fn guarded(
        &self,
        key: &GuardKey,
        fence: Fence,
        write: (&str, Vec<mysql_async::Value>),
    ) -> Result<Admission, GuardError> {
        let mut conn = self
            .pool
            .get_conn()
            .await
            .map_err(|e| GuardError::unavailable(format!("MariaDB connection: {e}"), e))?;
        let mut tx = conn
            .start_transaction(TxOpts::default())
            .await
            .map_err(server_error)?;
        if let Err(refused) = admit(&mut tx, key, fence).await? {
            // The procedure rolled back already; this ends the client's view of it.
            let _ = tx.rollback().await;
            return Ok(Err(refused));
        }
        tx.exec_drop(write.0, write.1).await.map_err(server_error)?;
        tx.commit()
            .await
            .map_err(|e| GuardError::indeterminate(format!("MariaDB commit: {e}"), e))?;
        Ok(Ok(()))
    }
}

#[async_trait]
impl ValueGuard for MysqlGuard {
    async fn put(
        &self,
        key: &GuardKey,
        value: &[u8],
        fence: Fence,
        options: &PutOptions,
    ) -> Result<Admission, GuardError> {
        no_expiry("mysql", options)?;
        self.guarded(
            key,
            fence,
            (
                "INSERT INTO lease_guarded (value_key, value) VALUES (?, ?) \
                 ON DUPLICATE KEY UPDATE value = VALUES(value)",
                vec![key.as_str().as_bytes().into(), value.to_vec().into()],
            ),
        )
        .await
    }

    async fn get(&self, key: &GuardKey) -> Result<Option<Guarded>, GuardError> {
        let mut conn = self
            .pool
            .get_conn()
            .await
            .map_err(|e| GuardError::unavailable(format!("MariaDB connection: {e}"), e))?;
        let row: Option<(Vec<u8>, Option<u64>)> = conn
            .exec_first(
                "SELECT g.value, f.fence FROM lease_guarded g \
                 LEFT JOIN lease_fences f ON f.fence_key = g.value_key WHERE g.value_key = ?",
                (key.as_str().as_bytes(),),
            )
            .await
            .map_err(server_error)?;
        row.map(|(value, fence)| {
            let fence = fence
                .map(|n| {
                    Fence::new(n).map_err(|_| {
                        GuardError::Corrupt(format!("lease_fences holds {n} for {key}"))
                    })
                })
                .transpose()?
                .unwrap_or(Fence::ZERO);
            Ok(Guarded { fence, value })
        })
        .transpose()
    }

    async fn delete(&self, key: &GuardKey, fence: Fence) -> Result<Admission, GuardError> {
        self.guarded(
            key,
            fence,
            (
                "DELETE FROM lease_guarded WHERE value_key = ?",
                vec![key.as_str().as_bytes().into()],
            ),
        )
        .await
    }

    fn resource(&self) -> &'static str {
        "mysql"
    }
}

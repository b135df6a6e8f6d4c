//! Which store a command runs against: a SQLite file or a PostgreSQL database (`postgres://`),
//! with the settings the flags and the environment give; and `migrate` between two of them.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use lease_domain::{ClockMode, Ttl};
use lease_ports::control::Controlled;
use lease_ports::transfer::{Migration, Transfer, migrate};
use lease_postgres::{PgLeaseStore, PgOptions, is_postgres_url};
use lease_sqlite::{SqliteLeaseStore, SqliteOptions};
use serde_json::json;

use crate::render::Report;

/// A store to open.
#[derive(Debug, Clone)]
pub(crate) enum Target {
    /// A SQLite database file.
    Sqlite(PathBuf, SqliteOptions),
    /// A PostgreSQL database.
    Postgres(String, PgOptions),
}

/// The settings that apply to whichever store is named.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    /// The SQLite options (create is off).
    pub sqlite: SqliteOptions,
    /// The PostgreSQL options.
    pub postgres: PgOptions,
}

/// The clock mode from `--clock` and `--max-skew` (or their variables).
///
/// # Errors
/// A message naming the bad value.
pub(crate) fn clock_mode(clock: Option<&str>, max_skew: Option<&str>) -> Result<ClockMode, String> {
    let bound = max_skew
        .map(|text| {
            let seconds: f64 = text
                .parse()
                .map_err(|_| format!("max skew {text:?} is not a number of seconds"))?;
            Ttl::new(seconds).map_err(|e| format!("max skew: {e}"))
        })
        .transpose()?;
    match (clock.unwrap_or("caller"), bound) {
        ("caller", bound) => Ok(ClockMode::Caller { max_skew: bound }),
        ("store", None) => Ok(ClockMode::Store),
        ("store", Some(_)) => Err(
            "--max-skew bounds the caller's clock; it has no meaning with --clock store".to_owned(),
        ),
        (other, _) => Err(format!("clock {other:?} is not one of caller or store")),
    }
}

impl Settings {
    /// The target `db` names.
    #[must_use]
    pub(crate) fn target(&self, db: &str) -> Target {
        if is_postgres_url(db) {
            Target::Postgres(db.to_owned(), self.postgres.clone())
        } else {
            Target::Sqlite(PathBuf::from(db), self.sqlite.clone())
        }
    }
}

impl Target {
    /// What the user named, as it can be shown (no password).
    #[must_use]
    pub(crate) fn shown(&self) -> String {
        match self {
            Target::Sqlite(path, _) => path.display().to_string(),
            Target::Postgres(url, _) => lease_postgres::connection_config(url).map_or_else(
                |_| lease_postgres::redact(url),
                |c| lease_postgres::describe(&c),
            ),
        }
    }

    /// The same target with a pool large enough for `callers` concurrent claims, each on its
    /// own connection (group commit off, so they race for the lock as the contract describes).
    #[must_use]
    pub(crate) fn for_racing(self, callers: usize) -> Self {
        let callers = callers.clamp(1, 64);
        match self {
            Target::Sqlite(path, options) => Target::Sqlite(
                path,
                SqliteOptions {
                    max_batch: 1,
                    pool_size: u32::try_from(callers).unwrap_or(64),
                    ..options
                },
            ),
            Target::Postgres(url, options) => Target::Postgres(
                url,
                PgOptions {
                    pool_size: callers,
                    max_batch: 1,
                    ..options
                },
            ),
        }
    }

    /// Opens the store; with `create`, makes the file or schema if it is missing.
    ///
    /// # Errors
    /// The store's error, as text.
    pub(crate) async fn open(&self, create: bool) -> Result<Opened, String> {
        match self {
            Target::Sqlite(path, options) => {
                let options = SqliteOptions {
                    create,
                    ..options.clone()
                };
                SqliteLeaseStore::open_with(path, options)
                    .map(|s| Opened::Sqlite(Arc::new(s)))
                    .map_err(|e| e.to_string())
            }
            Target::Postgres(url, options) => {
                let store = if create {
                    PgLeaseStore::init(url, options.clone()).await
                } else {
                    PgLeaseStore::open(url, options.clone()).await
                };
                store
                    .map(|s| Opened::Postgres(Arc::new(s)))
                    .map_err(|e| e.to_string())
            }
        }
    }
}

/// An open store.
pub(crate) enum Opened {
    /// SQLite.
    Sqlite(Arc<SqliteLeaseStore>),
    /// PostgreSQL.
    Postgres(Arc<PgLeaseStore>),
}

impl Opened {
    /// The store through the port, each operation a span, counted and timed.
    #[must_use]
    pub(crate) fn store(&self) -> Arc<dyn Controlled> {
        match self {
            Opened::Sqlite(s) => Arc::new(lease_ports::observe::Observed::new(Arc::clone(s))),
            Opened::Postgres(s) => Arc::new(lease_ports::observe::Observed::new(Arc::clone(s))),
        }
    }

    /// The store as the network service takes it: queue operations observed, its audit
    /// trail and its API keys.
    #[must_use]
    pub(crate) fn service(&self) -> Arc<dyn lease_server::ServiceStore> {
        match self {
            Opened::Sqlite(s) => Arc::new(lease_ports::observe::Observed::new(Arc::clone(s))),
            Opened::Postgres(s) => Arc::new(lease_ports::observe::Observed::new(Arc::clone(s))),
        }
    }

    /// The store's API keys.
    #[must_use]
    pub(crate) fn keys(&self) -> &dyn lease_ports::keys::KeyStore {
        match self {
            Opened::Sqlite(s) => s.as_ref(),
            Opened::Postgres(s) => s.as_ref(),
        }
    }

    /// The store's audit trail.
    #[must_use]
    pub(crate) fn audit(&self) -> &dyn lease_ports::audit::AuditTrail {
        match self {
            Opened::Sqlite(s) => s.as_ref(),
            Opened::Postgres(s) => s.as_ref(),
        }
    }

    /// What a failover of the store's database could lose, as `lease serve` and `lease work`
    /// say when they start (docs/GUARANTEES.md, "Failover and restore"): on PostgreSQL, the
    /// replication settings that decide it; `None` on SQLite, which has no replication.
    pub(crate) async fn replication_note(&self) -> Option<String> {
        let Opened::Postgres(store) = self else {
            return None;
        };
        let commit = store.setting("synchronous_commit").await;
        let standbys = store.setting("synchronous_standby_names").await;
        Some(match (commit, standbys) {
            (Ok(commit), Ok(standbys)) => replication_line(&commit, &standbys),
            (Err(e), _) | (_, Err(e)) => format!(
                "lease: the PostgreSQL replication settings could not be read ({e}), so what a failover could lose is not known (docs/GUARANTEES.md, Failover and restore)"
            ),
        })
    }

    fn transfer(&self) -> &dyn Transfer {
        match self {
            Opened::Sqlite(s) => s.as_ref(),
            Opened::Postgres(s) => s.as_ref(),
        }
    }
}

/// The line that says what a failover could lose under these settings (the store's own
/// connections always commit with `synchronous_commit` `on`).
fn replication_line(commit: &str, standbys: &str) -> String {
    let settings = format!("synchronous_commit={commit}, synchronous_standby_names='{standbys}'");
    if standbys.trim().is_empty() {
        format!(
            "lease: PostgreSQL replication: {settings}: no synchronous standby, so a failover to a standby (asynchronous replication) can lose the last acknowledged writes, claims included, and a lost claim's fence can be handed out again (docs/GUARANTEES.md, Failover and restore)"
        )
    } else {
        format!(
            "lease: PostgreSQL replication: {settings}: each commit waits for a synchronous standby, so a failover to one loses no acknowledged write (docs/GUARANTEES.md, Failover and restore)"
        )
    }
}

/// Copies `from` into `to` (created if missing) and reports what was copied and verified.
///
/// # Errors
/// Either store's error, a refused non-empty target, or a failed verification, as text.
pub(crate) async fn run_migrate(from: &Target, to: &Target, merge: bool) -> Result<Report, String> {
    if from.shown() == to.shown() {
        return Err(format!(
            "--from and --to both name {}; a store cannot be migrated into itself",
            from.shown()
        ));
    }
    let source = from.open(false).await?;
    let target = to.open(true).await?;
    let done: Migration = migrate(source.transfer(), target.transfer(), merge)
        .await
        .map_err(|e| e.to_string())?;
    let conflicts: Vec<_> = done
        .imported
        .conflicts
        .iter()
        .map(|c| {
            json!({
                "job": c.job.as_str(),
                "source_fence": c.source_fence.get(),
                "target_fence": c.target_fence.get(),
                "kept": if c.replaced { "source" } else { "target" },
            })
        })
        .collect();
    let mut human = format!(
        "copied {} of {} jobs and {} purge marks from {} to {}; verified: every fence carried \
         forward, the target holds {} jobs",
        done.imported.inserted,
        done.source_jobs,
        done.imported.marks,
        from.shown(),
        to.shown(),
        done.target_jobs
    );
    for c in &done.imported.conflicts {
        human.push_str(&format!(
            "; merged job {} (source fence {}, target fence {}, kept the {})",
            c.job,
            c.source_fence,
            c.target_fence,
            if c.replaced { "source's" } else { "target's" }
        ));
    }
    Ok(Report::new(
        true,
        json!({
            "ok": true,
            "from": from.shown(),
            "to": to.shown(),
            "source_jobs": done.source_jobs,
            "source_purge_marks": done.source_marks,
            "copied": done.imported.inserted,
            "purge_marks": done.imported.marks,
            "merged": conflicts,
            "target_jobs": done.target_jobs,
            "verified": true,
        }),
        human,
    ))
}

/// `lease backup`: a consistent copy of a SQLite store, taken while it serves.
pub(crate) async fn run_backup(from: &Target, to: &std::path::Path) -> Result<Report, String> {
    let Target::Sqlite(path, options) = from else {
        return Err(ON_POSTGRES.to_owned());
    };
    if to.exists() {
        return Err(format!(
            "{} exists: a backup never overwrites a file; name a new one",
            to.display()
        ));
    }
    let store = SqliteLeaseStore::open_with(path, options.clone()).map_err(|e| e.to_string())?;
    let epoch = store.backup(to).await.map_err(|e| e.to_string())?;
    Ok(Report::new(
        true,
        json!({"ok": true, "db": from.shown(), "backup": to.display().to_string(), "epoch": epoch.get()}),
        format!(
            "copied {} into {} (epoch {epoch}); `lease restore --from {}` installs it one epoch \
             higher",
            from.shown(),
            to.display(),
            to.display()
        ),
    ))
}

/// `lease restore`: a backup installed as the SQLite store, one epoch above both.
pub(crate) async fn run_restore(to: &Target, from: &std::path::Path) -> Result<Report, String> {
    let Target::Sqlite(path, _) = to else {
        return Err(ON_POSTGRES.to_owned());
    };
    let done = lease_sqlite::restore(from, path)
        .await
        .map_err(|e| e.to_string())?;
    let replaced = match done.replaced_epoch {
        Some(epoch) => format!("the replaced store's {epoch}"),
        None => "no store was there to compare with: if another copy of this store handed out \
                 fences at a later epoch, raise it above that one with `lease epoch --raise`"
            .to_owned(),
    };
    Ok(Report::new(
        true,
        json!({
            "ok": true,
            "db": to.shown(),
            "backup": from.display().to_string(),
            "epoch": done.epoch.get(),
            "backup_epoch": done.backup_epoch.get(),
            "replaced_epoch": done.replaced_epoch.map(lease_domain::Epoch::get),
        }),
        format!(
            "restored {} into {} at epoch {} (the backup's epoch {}; {replaced}): every fence it \
             hands out is above every fence handed out before",
            from.display(),
            to.shown(),
            done.epoch,
            done.backup_epoch
        ),
    ))
}

/// `lease epoch`: the store's epoch, raised by one with `raise`.
pub(crate) async fn run_epoch(target: &Target, raise: bool) -> Result<Report, String> {
    let opened = target.open(false).await?;
    let store = opened.transfer();
    let mut epoch = store.epoch().await.map_err(|e| e.to_string())?;
    if raise {
        let next = epoch
            .next()
            .ok_or_else(|| format!("the epoch is {epoch}, the largest there is"))?;
        epoch = store.raise_epoch(next).await.map_err(|e| e.to_string())?;
    }
    let first = epoch.first_fence();
    Ok(Report::new(
        true,
        json!({"ok": true, "db": target.shown(), "epoch": epoch.get(), "raised": raise, "first_fence": first.get()}),
        format!(
            "{} is at epoch {epoch}{}: a job claimed for the first time in it gets fence {first}",
            target.shown(),
            if raise { " (raised)" } else { "" }
        ),
    ))
}

/// Checks the store's group heads, after rebuilding them when `rebuild` is set.
///
/// # Errors
/// The store's error, as text; a report that is not ok when a group's head is astray.
pub(crate) async fn run_heads(target: &Target, rebuild: bool) -> Result<Report, String> {
    let opened = target.open(false).await?;
    let check = opened
        .transfer()
        .check_heads(rebuild)
        .await
        .map_err(|e| e.to_string())?;
    let stray: Vec<_> = check
        .stray
        .iter()
        .map(|(q, g)| json!({"queue": q.as_str(), "group": g.as_str()}))
        .collect();
    let sound = check.stray.is_empty();
    let text = if sound {
        format!(
            "{} keeps {} group heads{}, each at or before its group's first ready job",
            target.shown(),
            check.heads,
            if rebuild { " (rebuilt)" } else { "" }
        )
    } else {
        let named: Vec<String> = check
            .stray
            .iter()
            .map(|(q, g)| format!("{q}/{g}"))
            .collect();
        format!(
            "{} keeps {} group heads; these groups have a ready job before their head, so a \
             claim could pass them by: {} (run `lease heads --rebuild`)",
            target.shown(),
            check.heads,
            named.join(", ")
        )
    };
    Ok(Report::new(
        sound,
        json!({"ok": sound, "db": target.shown(), "heads": check.heads, "rebuilt": rebuild, "stray": stray}),
        text,
    ))
}

/// Why `lease backup` and `lease restore` name a SQLite store.
const ON_POSTGRES: &str = "lease backup and lease restore copy a SQLite store; on PostgreSQL take \
    base backups with WAL archiving (pg_basebackup): a point-in-time recovery ends on a new \
    timeline, which the store's epoch follows, and after a restore the timeline does not show \
    (a dump loaded with pg_restore) run `lease epoch --raise` (docs/GUARANTEES.md)";

/// Waits at most this long for the PostgreSQL pool (the CLI's busy timeout).
#[must_use]
pub(crate) fn pg_options(schema: Option<String>, wait: Duration, clock: ClockMode) -> PgOptions {
    PgOptions {
        schema: schema.unwrap_or_else(|| "lease".to_owned()),
        pool_size: 4,
        clock,
        wait_timeout: wait,
        ..PgOptions::default()
    }
}

/// Shows the audit trail.
///
/// # Errors
/// The store's error, as text.
pub(crate) async fn run_audit(
    target: &Target,
    filter: &lease_ports::audit::AuditFilter,
    now: lease_domain::Timestamp,
) -> Result<Report, String> {
    let opened = target.open(false).await?;
    audit_report(opened.audit(), filter, now).await
}

/// The audit trail's rows `filter` selects, from any trail (a database's or a server's).
///
/// # Errors
/// The store's error, as text.
pub(crate) async fn audit_report(
    trail: &dyn lease_ports::audit::AuditTrail,
    filter: &lease_ports::audit::AuditFilter,
    now: lease_domain::Timestamp,
) -> Result<Report, String> {
    let rows = trail.refusals(filter).await.map_err(|e| e.to_string())?;
    let refusals: Vec<serde_json::Value> =
        rows.iter().map(lease_server::views::refusal_json).collect();
    let lines: Vec<String> = rows
        .iter()
        .map(|r| {
            format!(
                "{} {} {} by {} with fence {} (current {}): {}{}",
                crate::when::shown(r.time, now.get()),
                r.operation,
                r.job,
                r.owner,
                r.presented_fence,
                r.current_fence
                    .map_or_else(|| "none".to_owned(), |f| f.to_string()),
                r.reason,
                r.late_by
                    .map(|l| format!(", {l:.3} s late"))
                    .unwrap_or_default()
            )
        })
        .collect();
    Ok(Report::lines(
        true,
        json!({ "refusals": refusals }),
        lines,
        "no refused writes recorded",
    ))
}

#[cfg(test)]
mod replication_tests {
    use super::replication_line;

    #[test]
    fn the_replication_line_says_what_a_failover_can_lose_under_each_setting() {
        let none = replication_line("on", "");
        assert!(none.contains("synchronous_standby_names=''"), "{none}");
        assert!(
            none.contains("can lose the last acknowledged writes"),
            "{none}"
        );
        let sync = replication_line("on", "FIRST 1 (standby1)");
        assert!(
            sync.contains("synchronous_standby_names='FIRST 1 (standby1)'"),
            "{sync}"
        );
        assert!(sync.contains("loses no acknowledged write"), "{sync}");
    }
}

//! The schema: the `jobs` table of the contract, the file markers, and what a file is found to be.
//!
//! Deciding what a file is happens on what was read from it ([`Schema`]) by a pure function
//! ([`classify`]), so the same rules judge a file seen through a read-only connection before
//! anything is written, and again inside the write transaction that creates or marks it.

use lease_ports::StoreError;
use lease_ports::migrations::{self, Applied, Migration};
use rusqlite::Connection;

use crate::error::{self, OpenError};
use crate::filesystem::incompatible;

/// `PRAGMA application_id` of a lease database ("LEAS").
pub const APPLICATION_ID: i32 = 0x4C45_4153;

/// The released migrations, frozen (`migrations/*.sql`, each checked against its pinned
/// checksum), the schema's history:
/// 1. the contract's `jobs` table;
/// 2. the work queue in the side table `jobs_queue` (kept in step by triggers for other
///    programs' rows), its claim-order index, and `purged`, the last fence of a purged id;
/// 3. the audit trail, `lease_audit`;
/// 4. the ready set: `leased_until` files held jobs apart, so claim order reads no live lease;
/// 5. the service's lease token digests and `lease_keys`;
/// 6. the overview's counters (`lease_finished`, `lease_completions`) and the ended index;
/// 7. queue settings, schedules, a job's timeout and progress;
/// 8. a job's group and the queue's rules per group, with the index of jobs that bear on them;
/// 9. rate limits and their log of grants, `lease_grants`;
/// 10. fair claims: `lease_group_turns` and the index of a group's claim order;
/// 11. workflows: `lease_parents` and a job's policy when a parent fails;
/// 12. fenced checkpoints, `lease_checkpoints`;
/// 13. the trace context a job was enqueued with, `lease_traces`;
/// 14. the store's epoch, `lease_epoch` (the high 32 bits of every fence);
/// 15. the groups' heads, `lease_group_heads`, kept by triggers;
/// 16. attempt history, `lease_attempts`, and the indexes the activity counts read.
pub(crate) const MIGRATIONS: [Migration; 16] = [
    Migration {
        version: 1,
        sql: include_str!("../migrations/0001_jobs.sql"),
    },
    Migration {
        version: 2,
        sql: include_str!("../migrations/0002_queue.sql"),
    },
    Migration {
        version: 3,
        sql: include_str!("../migrations/0003_audit.sql"),
    },
    Migration {
        version: 4,
        sql: include_str!("../migrations/0004_ready_set.sql"),
    },
    Migration {
        version: 5,
        sql: include_str!("../migrations/0005_service.sql"),
    },
    Migration {
        version: 6,
        sql: include_str!("../migrations/0006_overview.sql"),
    },
    Migration {
        version: 7,
        sql: include_str!("../migrations/0007_control.sql"),
    },
    Migration {
        version: 8,
        sql: include_str!("../migrations/0008_groups.sql"),
    },
    Migration {
        version: 9,
        sql: include_str!("../migrations/0009_rates.sql"),
    },
    Migration {
        version: 10,
        sql: include_str!("../migrations/0010_turns.sql"),
    },
    Migration {
        version: 11,
        sql: include_str!("../migrations/0011_workflows.sql"),
    },
    Migration {
        version: 12,
        sql: include_str!("../migrations/0012_checkpoints.sql"),
    },
    Migration {
        version: 13,
        sql: include_str!("../migrations/0013_traces.sql"),
    },
    Migration {
        version: 14,
        sql: include_str!("../migrations/0014_epochs.sql"),
    },
    Migration {
        version: 15,
        sql: include_str!("../migrations/0015_group_heads.sql"),
    },
    Migration {
        version: 16,
        sql: include_str!("../migrations/0016_attempts.sql"),
    },
];

/// `PRAGMA user_version`: the schema version this code writes and reads (the newest migration).
pub const SCHEMA_VERSION: i32 = MIGRATIONS[MIGRATIONS.len() - 1].version;

/// The first version that records its migrations (with checksums) in `lease_migrations`.
const RECORDED_SINCE: i32 = 3;

/// The migration record, made by the migration runner itself.
const CREATE_RECORD: &str = "CREATE TABLE IF NOT EXISTS lease_migrations(\
    version INTEGER PRIMARY KEY, checksum TEXT NOT NULL)";

/// The tables each version has, beside `jobs`: a marked file missing one is corrupt.
const TABLES: [(i32, &str); 19] = [
    (2, "jobs_queue"),
    (2, "purged"),
    (3, "lease_audit"),
    (3, "lease_migrations"),
    (5, "lease_keys"),
    (6, "lease_finished"),
    (6, "lease_completions"),
    (7, "lease_queues"),
    (7, "lease_schedules"),
    (8, "lease_group_pauses"),
    (9, "lease_grants"),
    (9, "lease_grant_counts"),
    (10, "lease_group_turns"),
    (11, "lease_parents"),
    (12, "lease_checkpoints"),
    (13, "lease_traces"),
    (14, "lease_epoch"),
    (15, "lease_group_heads"),
    (16, "lease_attempts"),
];

/// One column as `PRAGMA table_info` describes it: name, declared type, NOT NULL, default, key.
struct Column {
    name: &'static str,
    kind: &'static str,
    not_null: bool,
    default: Option<&'static str>,
    primary_key: bool,
}

const COLUMNS: [Column; 6] = [
    Column {
        name: "id",
        kind: "TEXT",
        not_null: false,
        default: None,
        primary_key: true,
    },
    Column {
        name: "owner",
        kind: "TEXT",
        not_null: false,
        default: None,
        primary_key: false,
    },
    Column {
        name: "until",
        kind: "REAL",
        not_null: true,
        default: Some("0"),
        primary_key: false,
    },
    Column {
        name: "fence",
        kind: "INTEGER",
        not_null: true,
        default: Some("0"),
        primary_key: false,
    },
    Column {
        name: "result",
        kind: "TEXT",
        not_null: false,
        default: None,
        primary_key: false,
    },
    Column {
        name: "done",
        kind: "INTEGER",
        not_null: true,
        default: Some("0"),
        primary_key: false,
    },
];

/// One column of the stored `jobs` table: name, declared type, NOT NULL, default, part of the key.
type FoundColumn = (String, String, bool, Option<String>, bool);

/// What a database holds, read in one transaction so the markers and the tables agree.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Schema {
    application_id: i32,
    user_version: i32,
    /// Every schema object not made by SQLite itself: (name, type).
    objects: Vec<(String, String)>,
    /// The columns of `jobs`, when it is a table.
    jobs_columns: Vec<FoundColumn>,
    /// What `lease_migrations` records, when it exists.
    migrations: Option<Vec<Applied>>,
}

/// What a file is, judged from its [`Schema`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Found {
    /// An SQLite database with nothing in it (a new or 0-byte file): only `init` may use it.
    Empty,
    /// An unmarked database holding exactly the contract's `jobs` table (made by the seed's
    /// `init_db`): a lease database that is marked when first opened for writing.
    Unmarked,
    /// A database marked as a lease database, at this schema version (older ones are
    /// upgraded when first opened for writing).
    Lease(i32),
}

/// Reads the markers and the schema objects; call it inside a transaction.
pub(crate) fn read(conn: &Connection) -> rusqlite::Result<Schema> {
    let application_id = conn.pragma_query_value(None, "application_id", |r| r.get(0))?;
    let user_version = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    let objects = conn
        .prepare(
            "SELECT name, type FROM sqlite_schema WHERE name NOT LIKE 'sqlite\\_%' ESCAPE '\\' \
             ORDER BY name",
        )?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<Result<Vec<(String, String)>, _>>()?;
    let jobs_columns = conn
        .prepare("SELECT name, type, \"notnull\", dflt_value, pk FROM pragma_table_info('jobs')")?
        .query_map([], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get::<_, i64>(4)? > 0,
            ))
        })?
        .collect::<Result<Vec<FoundColumn>, _>>()?;
    let migrations = if objects.iter().any(|(name, _)| name == "lease_migrations") {
        Some(
            conn.prepare("SELECT version, checksum FROM lease_migrations ORDER BY version")?
                .query_map([], |r| {
                    Ok(Applied {
                        version: r.get(0)?,
                        checksum: r.get(1)?,
                    })
                })?
                .collect::<Result<Vec<Applied>, _>>()?,
        )
    } else {
        None
    };
    Ok(Schema {
        application_id,
        user_version,
        objects,
        jobs_columns,
        migrations,
    })
}

/// Judges what a database is; anything that is not a usable lease database is refused with a
/// reason that names what was found.
pub(crate) fn classify(schema: &Schema, path: &str) -> Result<Found, StoreError> {
    match (schema.application_id, schema.user_version) {
        (APPLICATION_ID, v) if v > SCHEMA_VERSION => Err(incompatible(
            path,
            format!("schema version {v} is newer than this build supports ({SCHEMA_VERSION})"),
        )),
        (APPLICATION_ID, v) => {
            check_jobs_table(schema, path)?;
            check_version_tables(schema, v, path)?;
            if v >= RECORDED_SINCE {
                let Some(applied) = &schema.migrations else {
                    return Err(corrupt(path, v, "lease_migrations"));
                };
                // Exactly the migrations up to its version, each with its checksum: the newer
                // ones are what opening it for writing applies.
                let plan = migrations::plan(&MIGRATIONS, applied, path)?;
                let unrecorded = plan.pending.iter().any(|m| m.version <= v);
                if !plan.backfill.is_empty()
                    || unrecorded
                    || applied.len() != usize::try_from(v).unwrap_or(0)
                {
                    return Err(incompatible(
                        path,
                        format!(
                            "it is marked as version {v} but lease_migrations records versions \
                             {:?}",
                            applied.iter().map(|a| a.version).collect::<Vec<_>>()
                        ),
                    ));
                }
            }
            Ok(Found::Lease(v))
        }
        (0, 0) if schema.objects.is_empty() => Ok(Found::Empty),
        (0, 0) => {
            let others: Vec<&str> = schema
                .objects
                .iter()
                .filter(|(name, _)| name != "jobs")
                .map(|(name, kind)| {
                    if kind == "table" {
                        name.as_str()
                    } else {
                        kind.as_str()
                    }
                })
                .collect();
            if !others.is_empty() {
                return Err(incompatible(
                    path,
                    format!(
                        "it holds objects of another program ({}); a lease database holds only \
                         its own tables",
                        others.join(", ")
                    ),
                ));
            }
            check_jobs_table(schema, path)?;
            Ok(Found::Unmarked)
        }
        (0, v) => Err(incompatible(
            path,
            format!("user_version {v} was set by another program"),
        )),
        (other, _) => Err(incompatible(
            path,
            format!("application_id {other:#x} belongs to another program"),
        )),
    }
}

fn corrupt(path: &str, version: i32, table: &str) -> StoreError {
    StoreError::Corrupt(
        format!(
            "{path} is marked as a lease database of version {version} but has no {table} \
             table; it was left as it is"
        )
        .into(),
    )
}

/// A marked file at `version` must hold every table that version made.
fn check_version_tables(schema: &Schema, version: i32, path: &str) -> Result<(), StoreError> {
    for (since, table) in TABLES {
        let present = schema
            .objects
            .iter()
            .any(|(name, kind)| name == table && kind == "table");
        if version >= since && !present {
            return Err(corrupt(path, version, table));
        }
    }
    Ok(())
}

fn check_jobs_table(schema: &Schema, path: &str) -> Result<(), StoreError> {
    match schema.objects.iter().find(|(name, _)| name == "jobs") {
        Some((_, kind)) if kind == "table" => {}
        Some((_, kind)) => {
            return Err(incompatible(path, format!("jobs is a {kind}, not a table")));
        }
        None => return Err(incompatible(path, "there is no jobs table")),
    }
    let found = &schema.jobs_columns;
    for (name, kind, not_null, default, primary_key) in found {
        let Some(want) = COLUMNS.iter().find(|c| c.name.eq_ignore_ascii_case(name)) else {
            return Err(incompatible(
                path,
                format!("jobs has an unexpected column {name}"),
            ));
        };
        let default = default.as_deref().map(str::trim);
        if !want.kind.eq_ignore_ascii_case(kind)
            || want.not_null != *not_null
            || want.default != default
            || want.primary_key != *primary_key
        {
            return Err(incompatible(
                path,
                format!(
                    "jobs.{name} is declared {}, expected {}",
                    declared(kind, *not_null, default, *primary_key),
                    declared(want.kind, want.not_null, want.default, want.primary_key),
                ),
            ));
        }
    }
    if let Some(missing) = COLUMNS
        .iter()
        .find(|c| !found.iter().any(|f| c.name.eq_ignore_ascii_case(&f.0)))
    {
        return Err(incompatible(
            path,
            format!("jobs has no {} column", missing.name),
        ));
    }
    Ok(())
}

fn declared(kind: &str, not_null: bool, default: Option<&str>, primary_key: bool) -> String {
    format!(
        "{kind}{}{}{}",
        if not_null { " NOT NULL" } else { "" },
        default.map(|d| format!(" DEFAULT {d}")).unwrap_or_default(),
        if primary_key { " PRIMARY KEY" } else { "" },
    )
}

/// Inside an open write transaction: creates the schema (when `create` and the file is empty),
/// marks an unmarked contract database, upgrades an older lease database, or leaves a current
/// one alone.
///
/// # Errors
/// [`StoreError::NotFound`] for an empty database when `create` is false; the refusals of
/// [`classify`]; SQLite errors. The caller rolls back on any error.
pub(crate) fn prepare(conn: &Connection, path: &str, create: bool) -> Result<(), OpenError> {
    let schema = read(conn).map_err(error::open_step(conn))?;
    let from = match classify(&schema, path)? {
        Found::Lease(SCHEMA_VERSION) => return Ok(()),
        Found::Empty if !create => {
            return Err(StoreError::NotFound {
                path: path.to_owned(),
                reason: "the database has no tables yet".into(),
            }
            .into());
        }
        Found::Empty | Found::Unmarked => 0,
        Found::Lease(version) => version,
    };
    migrate(conn, from).map_err(error::open_step(conn))
}

/// Applies the migrations after `from` (recording each with its checksum, and the checksums
/// of those applied before the record existed: a released migration's text never changes)
/// and marks the file.
fn migrate(conn: &Connection, from: i32) -> rusqlite::Result<()> {
    conn.execute_batch(CREATE_RECORD)?;
    for migration in &MIGRATIONS {
        if migration.version > from {
            conn.execute_batch(migration.sql)?;
        }
        conn.execute(
            "INSERT OR IGNORE INTO lease_migrations(version, checksum) VALUES (?1, ?2)",
            rusqlite::params![migration.version, migration.checksum()],
        )?;
    }
    conn.pragma_update(None, "application_id", APPLICATION_ID)?;
    conn.pragma_update(None, "user_version", SCHEMA_VERSION)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema(app: i32, version: i32, objects: &[(&str, &str)]) -> Schema {
        let jobs_columns = if objects.contains(&("jobs", "table")) {
            COLUMNS
                .iter()
                .map(|c| {
                    (
                        c.name.to_owned(),
                        c.kind.to_owned(),
                        c.not_null,
                        c.default.map(str::to_owned),
                        c.primary_key,
                    )
                })
                .collect()
        } else {
            Vec::new()
        };
        Schema {
            application_id: app,
            user_version: version,
            objects: objects
                .iter()
                .map(|(n, k)| ((*n).to_owned(), (*k).to_owned()))
                .collect(),
            jobs_columns,
            migrations: None,
        }
    }

    /// A file at the current version as `migrate` leaves it, with `checksums` recorded.
    fn current(checksums: [String; 16]) -> Schema {
        let mut found = schema(
            APPLICATION_ID,
            SCHEMA_VERSION,
            &[
                ("jobs", "table"),
                ("jobs_queue", "table"),
                ("purged", "table"),
                ("lease_audit", "table"),
                ("lease_migrations", "table"),
                ("lease_keys", "table"),
                ("lease_finished", "table"),
                ("lease_completions", "table"),
                ("lease_queues", "table"),
                ("lease_schedules", "table"),
                ("lease_group_pauses", "table"),
                ("lease_grants", "table"),
                ("lease_grant_counts", "table"),
                ("lease_group_turns", "table"),
                ("lease_parents", "table"),
                ("lease_checkpoints", "table"),
                ("lease_traces", "table"),
                ("lease_epoch", "table"),
                ("lease_group_heads", "table"),
                ("lease_attempts", "table"),
            ],
        );
        found.migrations = Some(
            (1..=SCHEMA_VERSION)
                .zip(checksums)
                .map(|(version, checksum)| Applied {
                    version,
                    checksum: Some(checksum),
                })
                .collect(),
        );
        found
    }

    #[test]
    fn the_released_migrations_are_frozen() {
        // A released migration is never edited: these are the checksums files record.
        let pinned = MIGRATIONS.map(|m| m.checksum());
        assert_eq!(pinned, PINNED.map(str::to_owned));
    }

    const PINNED: [&str; 16] = [
        "c878484aeb0818a54dffb888a21f5d3cd8d52a3f63db5a4214c0cc7bd9ee83cb",
        "8c0d06a026396a17df9ec1349a99ba3645ab58379280df82ccc3d7bcf0b0440a",
        "921260be82b4a9a3180ddbb59bd347469d61457937659996082d1d84db6e1646",
        "8a70489b1f553d7c64a3dca80914b045d2c4ddd3884f027d948dc19d5e125789",
        "57b6fe7f51c4b1c7a027146d7bba79530d21e88b924e4433f7dfd20ecd362361",
        "0c3ba251640cb5405104e4acb0bd48161be6c98c75c29639b18753c1485e4f37",
        "64a151ab83940b7da3e67c93d85463fa65457ea2247be9e663baff6375317926",
        "853d538a31c59325516e255615216065009b990656db65bc55227d2e2a5c70ef",
        "d8f6fc24307c2676c25f638e95e2acfa85bcb9ebf55e39fab5e3a8dae3d2e592",
        "661733d2693cc09045e3dbabba0b1bacc83c8212f3430236fba0edb5904b4976",
        "c3302d88c4d4e7a91006209dd081ddcdd25fe3b3ddee3f6449079a4cac599165",
        "0c90c8b4e52834b3c8182c2096c0320a65b79c791ff24be77b83042ea3aa1d27",
        "3e234e8dd9b1ce95c706fec98123486864bd4285bdd2847730886ffb76327cc4",
        "5c72631146f7e7304bbfdf498184542a1c5b96042157375e734f8ef31d510ec9",
        "cef5dfd33013d63600456a9ccfb2f8f5b5259231cdfd24484ea0900e799f1be2",
        "3a7870bd6c09525b25934aed3de905304f98cf615dd81d550c06db82fbc33e83",
    ];

    #[test]
    fn a_current_file_is_checked_against_its_recorded_migrations() {
        let checksums = MIGRATIONS.map(|m| m.checksum());
        assert_eq!(
            classify(&current(checksums.clone()), "f").unwrap(),
            Found::Lease(SCHEMA_VERSION)
        );
        let mut edited = checksums.clone();
        edited[1] = "0".repeat(64);
        let err = classify(&current(edited), "f").unwrap_err();
        assert!(err.to_string().contains("migration 2 was changed"), "{err}");
        let mut unrecorded = current(checksums.clone());
        unrecorded.migrations = None;
        unrecorded
            .objects
            .retain(|(name, _)| name != "lease_migrations");
        let err = classify(&unrecorded, "f").unwrap_err();
        assert!(
            matches!(err, StoreError::Corrupt(_))
                && err.to_string().contains("no lease_migrations"),
            "{err}"
        );
    }

    #[test]
    fn a_marked_file_missing_a_table_of_its_version_is_corrupt() {
        let err = classify(
            &schema(APPLICATION_ID, 2, &[("jobs", "table"), ("purged", "table")]),
            "f",
        )
        .unwrap_err();
        assert!(
            matches!(err, StoreError::Corrupt(_))
                && err.to_string().contains("no jobs_queue table"),
            "{err}"
        );
    }

    #[test]
    fn each_kind_of_file_is_judged_by_its_markers_and_tables() {
        let jobs = [("jobs", "table")];
        assert_eq!(classify(&schema(0, 0, &[]), "f").unwrap(), Found::Empty);
        assert_eq!(
            classify(&schema(0, 0, &jobs), "f").unwrap(),
            Found::Unmarked
        );
        assert_eq!(
            classify(&schema(APPLICATION_ID, 1, &jobs), "f").unwrap(),
            Found::Lease(1)
        );
        let v2 = [
            ("jobs", "table"),
            ("jobs_queue", "table"),
            ("purged", "table"),
        ];
        assert_eq!(
            classify(&schema(APPLICATION_ID, 2, &v2), "f").unwrap(),
            Found::Lease(2)
        );
        let newer = format!("schema version {} is newer", SCHEMA_VERSION + 1);
        let refused = [
            (
                schema(0, 0, &[("users", "table")]),
                "another program (users)",
            ),
            (
                schema(0, 0, &[("jobs", "table"), ("users", "table")]),
                "(users)",
            ),
            (schema(0, 0, &[("jobs", "view")]), "jobs is a view"),
            (schema(0, 7, &[]), "user_version 7"),
            (schema(1234, 0, &[]), "application_id 0x4d2"),
            (schema(APPLICATION_ID, SCHEMA_VERSION + 1, &jobs), &newer),
            (schema(APPLICATION_ID, 1, &[]), "no jobs table"),
        ];
        for (found, why) in refused {
            let err = classify(&found, "f").unwrap_err();
            assert!(
                matches!(err, StoreError::Incompatible { .. }) && err.to_string().contains(why),
                "{found:?}: {err}"
            );
        }
    }
}

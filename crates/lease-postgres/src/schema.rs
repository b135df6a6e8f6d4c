//! The lease schema in its own PostgreSQL schema (default `lease`), made and brought up to
//! date by versioned migrations. Each migration runs in one transaction under an advisory
//! lock, so processes that start at once apply it once; a schema holding anything lease did
//! not make is refused and left untouched.

use lease_ports::StoreError;
use lease_ports::migrations::{self, Applied, Migration, MigrationPlan};
use tokio_postgres::{Client, GenericClient};

use crate::error::{self, Stage};

/// The schema version this build makes and uses.
pub const CURRENT_VERSION: i32 = MIGRATIONS[MIGRATIONS.len() - 1].version;

/// The tables (and their sequences) lease makes; anything else in the schema is foreign.
const OURS: [&str; 22] = [
    "jobs",
    "attempts",
    "group_heads",
    "epoch",
    "parents",
    "checkpoints",
    "traces",
    "queues",
    "group_pauses",
    "group_turns",
    "grants",
    "grant_counts",
    "schedules",
    "finished",
    "completions",
    "keys",
    "purged",
    "migrations",
    "jobs_seq_seq",
    "fences",
    "audit",
    "audit_seq_seq",
];

/// The released migrations, frozen (`migrations/*.sql`, each checked against its pinned
/// checksum; `{s}` stands for the schema name), the schema's history:
/// 1. every job in one row, `jobs` (its fence a column, never a sequence), the ready index of
///    claims, and `purged`, the last fence of a purged id;
/// 2. `admit_fence`, the resource-side guard's function, and its `fences` table;
/// 3. the audit trail, `audit`;
/// 4. the ready set: `leased_until` and the partial indexes of unheld jobs and lease ends;
/// 5. the service's lease token digests and `keys`;
/// 6. the overview's counters (`finished`, `completions`, sharded) kept by the writes;
/// 7. `step`, the queue loop's one statement (complete, then claim), every decision of which
///    the domain makes again;
/// 8. queue settings and schedules, a job's timeout and progress;
/// 9. a job's group, the queue's rules per group and `group_pauses`;
/// 10. rate limits and their log of grants, `grants`;
/// 11. fair claims: `group_turns` and `jobs_turn`;
/// 12. workflows: `parents` and a job's policy when a parent fails;
/// 13. fenced checkpoints, `checkpoints`;
/// 14. the trace context a job was enqueued with, `traces`;
/// 15. the store's epoch: `epoch` and `epoch()`, from the timeline and the raises;
/// 16. the groups' heads, `group_heads`, kept by a trigger;
/// 17. attempt history, `attempts`, `keep_attempt`, and the indexes the activity counts read.
const MIGRATIONS: [Migration; 17] = [
    Migration {
        version: 1,
        sql: include_str!("../migrations/0001_jobs.sql"),
    },
    Migration {
        version: 2,
        sql: include_str!("../migrations/0002_guard.sql"),
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
        sql: include_str!("../migrations/0007_step.sql"),
    },
    Migration {
        version: 8,
        sql: include_str!("../migrations/0008_control.sql"),
    },
    Migration {
        version: 9,
        sql: include_str!("../migrations/0009_groups.sql"),
    },
    Migration {
        version: 10,
        sql: include_str!("../migrations/0010_rates.sql"),
    },
    Migration {
        version: 11,
        sql: include_str!("../migrations/0011_turns.sql"),
    },
    Migration {
        version: 12,
        sql: include_str!("../migrations/0012_workflows.sql"),
    },
    Migration {
        version: 13,
        sql: include_str!("../migrations/0013_checkpoints.sql"),
    },
    Migration {
        version: 14,
        sql: include_str!("../migrations/0014_traces.sql"),
    },
    Migration {
        version: 15,
        sql: include_str!("../migrations/0015_epochs.sql"),
    },
    Migration {
        version: 16,
        sql: include_str!("../migrations/0016_group_heads.sql"),
    },
    Migration {
        version: 17,
        sql: include_str!("../migrations/0017_attempts.sql"),
    },
];

/// What a schema holds, read in one snapshot.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Found {
    /// No schema of that name, or one with nothing in it.
    Empty,
    /// A lease schema at this version.
    Lease(i32),
    /// Something lease did not make.
    Foreign(String),
}

/// Checks that a schema name is a plain identifier (it is spliced into statements).
///
/// # Errors
/// [`StoreError::Incompatible`] naming the name.
pub fn check_schema_name(schema: &str) -> Result<(), StoreError> {
    let ok = !schema.is_empty()
        && schema.len() <= 63
        && schema
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && schema
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(StoreError::Incompatible {
            path: format!("schema {schema:?}"),
            reason: "a schema name must be lower-case letters, digits and _ (at most 63), \
                     not starting with a digit"
                .to_owned()
                .into(),
        })
    }
}

/// The functions lease makes in its schema (by migrations 2, 6, 7, 11, 12, 13, 14, 15 and 17).
const OUR_FUNCTIONS: [&str; 13] = [
    "admit_fence",
    "count_finished",
    "epoch",
    "forget_attempts",
    "forget_checkpoints",
    "forget_parents",
    "forget_traces",
    "keep_attempt",
    "keep_group_turn",
    "lower_group_head",
    "next_fence",
    "repair_group_heads",
    "step",
];

/// Every object of the schema but indexes and the row types of its tables: relations
/// (tables, sequences, views, materialized views, foreign tables), functions and procedures,
/// and types (enums, domains, composites, ranges; an array type goes with its element), as
/// (kind, name).
const OBJECTS: &str = "SELECT CASE c.relkind WHEN 'S' THEN 'sequence' WHEN 'v' THEN 'view' \
     WHEN 'm' THEN 'materialized view' WHEN 'f' THEN 'foreign table' ELSE 'table' END, \
     c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
     WHERE n.nspname = $1 AND c.relkind NOT IN ('i', 'I', 'c', 't') \
     UNION ALL SELECT CASE p.prokind WHEN 'p' THEN 'procedure' WHEN 'a' THEN 'aggregate' \
     ELSE 'function' END, p.proname::text FROM pg_proc p \
     JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $1 \
     UNION ALL SELECT 'type', t.typname::text FROM pg_type t \
     JOIN pg_namespace n ON n.oid = t.typnamespace WHERE n.nspname = $1 \
     AND t.typelem = 0 AND (t.typrelid = 0 OR EXISTS (SELECT 1 FROM pg_class r \
     WHERE r.oid = t.typrelid AND r.relkind = 'c')) ORDER BY 1, 2";

async fn inspect(client: &impl GenericClient, schema: &str) -> Result<Found, StoreError> {
    let rows = client
        .query(OBJECTS, &[&schema])
        .await
        .map_err(|e| error::map(e, Stage::BeforeCommit))?;
    let objects: Vec<(String, String)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    let ours = |(kind, name): &&(String, String)| match kind.as_str() {
        "table" | "sequence" => OURS.contains(&name.as_str()),
        "function" => OUR_FUNCTIONS.contains(&name.as_str()),
        _ => false,
    };
    if let Some((kind, name)) = objects.iter().find(|o| !ours(o)) {
        return Ok(Found::Foreign(format!(
            "schema {schema} holds the {kind} {name:?}, which lease did not make"
        )));
    }
    let names: Vec<String> = objects
        .iter()
        .filter(|(kind, _)| kind == "table")
        .map(|(_, name)| name.clone())
        .collect();
    if objects.iter().any(|(kind, _)| kind != "table") && names.is_empty() {
        return Ok(Found::Foreign(format!(
            "schema {schema} holds {} but no lease table",
            objects
                .iter()
                .map(|(kind, name)| format!("the {kind} {name:?}"))
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    if names.is_empty() {
        return Ok(Found::Empty);
    }
    if !names.iter().any(|n| n == "migrations") {
        return Ok(Found::Foreign(format!(
            "schema {schema} holds tables ({}) but no lease migration record",
            names.join(", ")
        )));
    }
    let version: Option<i32> = client
        .query_one(
            &format!("SELECT max(version) FROM {schema}.migrations"),
            &[],
        )
        .await
        .map_err(|e| error::map(e, Stage::BeforeCommit))?
        .get(0);
    Ok(Found::Lease(version.unwrap_or(0)))
}

/// The migrations `schema` records as applied, with their checksums (`None` where the
/// column or the value is missing: recorded before checksums were).
async fn applied(client: &impl GenericClient, schema: &str) -> Result<Vec<Applied>, StoreError> {
    // Through `to_jsonb`, so a table made before the checksum column reads too.
    let rows = client
        .query(
            &format!(
                "SELECT version, to_jsonb(m) ->> 'checksum' FROM {schema}.migrations m \
                 ORDER BY version"
            ),
            &[],
        )
        .await
        .map_err(|e| error::map(e, Stage::BeforeCommit))?;
    Ok(rows
        .iter()
        .map(|r| Applied {
            version: r.get(0),
            checksum: r.get(1),
        })
        .collect())
}

/// Checks the recorded migrations of a lease schema against this build's ([`migrations::plan`]).
async fn plan(
    client: &impl GenericClient,
    found: &Found,
    schema: &str,
    target: &str,
) -> Result<MigrationPlan, StoreError> {
    let recorded = match found {
        Found::Lease(_) => applied(client, schema).await?,
        _ => Vec::new(),
    };
    migrations::plan(
        &MIGRATIONS,
        &recorded,
        &format!("{target} (schema {schema})"),
    )
}

/// Brings `schema` up to [`CURRENT_VERSION`], creating it only when `create` is set, after
/// checking every recorded migration's checksum.
pub(crate) async fn prepare(
    client: &mut Client,
    schema: &str,
    create: bool,
    target: &str,
) -> Result<(), StoreError> {
    let found = inspect(client, schema).await?;
    judge(&found, schema, create, target)?;
    if plan(client, &found, schema, target).await?.is_empty() {
        return Ok(());
    }
    let tx = client
        .transaction()
        .await
        .map_err(|e| error::map(e, Stage::BeforeCommit))?;
    tx.execute(
        "SELECT pg_advisory_xact_lock(hashtextextended('lease migrations ' || $1, 0))",
        &[&schema],
    )
    .await
    .map_err(|e| error::map(e, Stage::BeforeCommit))?;
    // Judged again under the lock: another process may have migrated meanwhile.
    let found = inspect(&tx, schema).await?;
    judge(&found, schema, create, target)?;
    let plan = plan(&tx, &found, schema, target).await?;
    tx.batch_execute(&format!(
        "CREATE SCHEMA IF NOT EXISTS {schema}; \
         CREATE TABLE IF NOT EXISTS {schema}.migrations \
         (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now()); \
         ALTER TABLE {schema}.migrations ADD COLUMN IF NOT EXISTS checksum text"
    ))
    .await
    .map_err(|e| error::map(e, Stage::BeforeCommit))?;
    for migration in &plan.backfill {
        tx.execute(
            &format!("UPDATE {schema}.migrations SET checksum = $2 WHERE version = $1"),
            &[&migration.version, &migration.checksum()],
        )
        .await
        .map_err(|e| error::map(e, Stage::BeforeCommit))?;
    }
    for migration in &plan.pending {
        tx.batch_execute(&migration.sql.replace("{s}", schema))
            .await
            .map_err(|e| error::map(e, Stage::BeforeCommit))?;
        tx.execute(
            &format!("INSERT INTO {schema}.migrations(version, checksum) VALUES ($1, $2)"),
            &[&migration.version, &migration.checksum()],
        )
        .await
        .map_err(|e| error::map(e, Stage::BeforeCommit))?;
    }
    tx.commit().await.map_err(|e| error::map(e, Stage::Commit))
}

fn judge(found: &Found, schema: &str, create: bool, target: &str) -> Result<(), StoreError> {
    match found {
        Found::Foreign(reason) => Err(StoreError::Incompatible {
            path: target.to_owned(),
            reason: format!("{reason}; it was left as it is").into(),
        }),
        Found::Empty if !create => Err(StoreError::NotFound {
            path: target.to_owned(),
            reason: format!("schema {schema} does not exist or holds nothing").into(),
        }),
        Found::Lease(version) if *version > CURRENT_VERSION => Err(StoreError::Incompatible {
            path: target.to_owned(),
            reason: format!(
                "schema {schema} is at version {version}, made by a newer lease \
                 (this one knows up to {CURRENT_VERSION})"
            )
            .into(),
        }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_released_migrations_are_frozen() {
        // A released migration is never edited: these are the checksums databases record.
        let pinned = MIGRATIONS.map(|m| m.checksum());
        assert_eq!(pinned, PINNED.map(str::to_owned));
        assert_eq!(CURRENT_VERSION, 17);
    }

    #[test]
    fn a_schema_name_is_a_plain_lower_case_identifier_of_at_most_63_bytes() {
        for good in ["lease", "_x1", "a", &"a".repeat(63), "work_2"] {
            assert!(check_schema_name(good).is_ok(), "{good:?} is refused");
        }
        let long = "a".repeat(64);
        for bad in [
            "",
            "Lease",
            "1abc",
            "a-b",
            "a b",
            "lease;drop",
            "é",
            long.as_str(),
        ] {
            let err = check_schema_name(bad).unwrap_err();
            assert!(
                matches!(err, StoreError::Incompatible { .. })
                    && err.to_string().contains(&format!("{bad:?}")),
                "{bad:?}: {err}"
            );
        }
    }

    const PINNED: [&str; 17] = [
        "21ac859f099c73a2cfd49e089bf85213014d3ff3143f88a78d480d1e86bb59bd",
        "8505302d5ab97431700ce91b427106b910ee3c01618c1d65f4da182c61b8f06a",
        "0bf2cb357e23e48a89126c5ec138cd9473c954eb54b191211dd84d9dfa99a49f",
        "2309a160f5661accadfe9bafbb92737413569b7545644590d4b72805cc883b17",
        "0083a43cb73bac0156d200730ca6682c5cf997196485f203c29e08cdd7fc7772",
        "8007b2202d987e668820d3f5013097c7385b92b29fcc44faf8df7161facaddf9",
        "d25b2039940b6eed5bd573ef7d30ff1307bfba81a2d12abef776cfb2cd2c0bcb",
        "bbb498171ca96c56d8fac1e90ce36b8b0397b8dcee9f256b9627bcbbc3dea1ea",
        "d4893e794486a3fff09889568d40abade6477af8c6e996e3f1efc4b7d639cb85",
        "ae337bb3821ae37bfa675de6e1a7aa91531e751ba145f83383496cf86ba81e6d",
        "cb4ded358edbeb605cf2864cc737d2e8c5c4bee2cc9d9b040c65f930bf5034d2",
        "436c965655d0ed6098463cce3bc7c0e2b2f9f2e28f392b3f80e7bf2c2678224a",
        "27a58f28444307bed554b6b77d299837e117691a04a1f19d90c6224d3c5b1efc",
        "d9e1f2f6027f7a8da79b63db867a3b6132adb6d498436eebaf1c9d46f81c9d84",
        "ad981da9336d7bbfd61a26930fd2233892b96270aac2d9b8b808cb9cbdcb821c",
        "0ae6a74c813d1b61f2a4b713b8b01f09c8c89790c8b62441372412a25218bdab",
        "24c24e0a18b338ef4f144a7fefd2efdf0be5a5880f700f2c78e4a6655f2a2005",
    ];
}

//! Schema migrations as frozen, numbered text, and the one check every store makes at open:
//! each migration a database records as applied must be one this build knows, with the same
//! checksum (SHA-256 of its text, as sqlx records in `_sqlx_migrations`), so a released
//! migration that was edited, or a database migrated by an unknown build, is refused.

use sha2::{Digest, Sha256};

use crate::StoreError;

/// One released migration: its number and its text, never edited once released.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Migration {
    /// Its number, from 1, without gaps.
    pub version: i32,
    /// Its SQL text.
    pub sql: &'static str,
}

impl Migration {
    /// The SHA-256 of its text, in lowercase hex.
    #[must_use]
    pub fn checksum(&self) -> String {
        Sha256::digest(self.sql.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }
}

/// A migration a database records as applied, with the checksum recorded then (`None` for
/// one applied before this build recorded checksums).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// Its number.
    pub version: i32,
    /// The checksum recorded when it was applied.
    pub checksum: Option<String>,
}

/// What a database needs to be brought to the newest known migration.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MigrationPlan {
    /// Applied migrations whose checksum is not recorded yet: record this build's (the text
    /// of a released migration never changes, so it is the text that was applied).
    pub backfill: Vec<Migration>,
    /// Migrations to apply, in order.
    pub pending: Vec<Migration>,
}

impl MigrationPlan {
    /// Whether the database is current and every checksum recorded.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.backfill.is_empty() && self.pending.is_empty()
    }
}

/// Checks what `store` records as applied against `known` (this build's migrations, in
/// order) and plans the rest.
///
/// # Errors
/// [`StoreError::Incompatible`] naming the migration: one this build does not know (a newer
/// build migrated the database), one whose recorded checksum differs from this build's text
/// (the migration was edited after it was applied), or a gap (a migration missing below an
/// applied one).
pub fn plan(
    known: &[Migration],
    applied: &[Applied],
    store: &str,
) -> Result<MigrationPlan, StoreError> {
    let refuse = |reason: String| StoreError::Incompatible {
        path: store.to_owned(),
        reason: reason.into(),
    };
    let mut plan = MigrationPlan::default();
    for found in applied {
        let Some(migration) = known.iter().find(|m| m.version == found.version) else {
            return Err(refuse(format!(
                "migration {} was applied by a newer lease; this build knows migrations up to {}",
                found.version,
                known.last().map_or(0, |m| m.version)
            )));
        };
        match &found.checksum {
            None => plan.backfill.push(*migration),
            Some(checksum) if *checksum == migration.checksum() => {}
            Some(checksum) => {
                return Err(refuse(format!(
                    "migration {} was changed after it was applied (recorded checksum {checksum}, \
                     this build's {})",
                    found.version,
                    migration.checksum()
                )));
            }
        }
    }
    let newest = applied.iter().map(|a| a.version).max().unwrap_or(0);
    for migration in known {
        let done = applied.iter().any(|a| a.version == migration.version);
        if !done && migration.version < newest {
            return Err(refuse(format!(
                "migration {} is missing below applied migration {newest}",
                migration.version
            )));
        }
        if !done {
            plan.pending.push(*migration);
        }
    }
    Ok(plan)
}

#[cfg(test)]
mod tests {
    use super::*;

    const KNOWN: [Migration; 2] = [
        Migration {
            version: 1,
            sql: "CREATE TABLE a(x)",
        },
        Migration {
            version: 2,
            sql: "CREATE TABLE b(y)",
        },
    ];

    fn applied(version: i32, checksum: Option<String>) -> Applied {
        Applied { version, checksum }
    }

    #[test]
    fn a_checksum_is_the_sha256_of_the_text() {
        let empty = Migration {
            version: 1,
            sql: "",
        };
        assert_eq!(
            empty.checksum(),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_ne!(KNOWN[0].checksum(), KNOWN[1].checksum());
    }

    #[test]
    fn a_new_database_gets_every_migration_and_an_old_one_its_checksums() {
        let fresh = plan(&KNOWN, &[], "db").unwrap();
        assert_eq!((fresh.backfill, fresh.pending), (vec![], KNOWN.to_vec()));
        let old = plan(&KNOWN, &[applied(1, None)], "db").unwrap();
        assert_eq!(
            (old.backfill, old.pending),
            (vec![KNOWN[0]], vec![KNOWN[1]])
        );
        let current = [
            applied(1, Some(KNOWN[0].checksum())),
            applied(2, Some(KNOWN[1].checksum())),
        ];
        assert!(plan(&KNOWN, &current, "db").unwrap().is_empty());
    }

    #[test]
    fn an_edited_an_unknown_or_a_missing_migration_is_refused() {
        let edited = plan(&KNOWN, &[applied(1, Some("00".repeat(32)))], "db").unwrap_err();
        assert!(
            edited.to_string().contains("migration 1 was changed"),
            "{edited}"
        );
        let unknown = plan(&KNOWN, &[applied(3, None)], "db").unwrap_err();
        assert!(
            unknown
                .to_string()
                .contains("migration 3 was applied by a newer lease"),
            "{unknown}"
        );
        let gap = plan(&KNOWN, &[applied(2, None)], "db").unwrap_err();
        assert!(gap.to_string().contains("migration 1 is missing"), "{gap}");
    }
}

//! The groups' heads (migration 16), as an operator checks and rebuilds them: one row per
//! queue and group with ready jobs, at or before the group's first ready job in claim order.
//! Claims read them and move them on through `ControlSql::heads` and `repair_heads`.

use lease_domain::{GroupKey, QueueName};
use lease_ports::StoreError;
use lease_ports::transfer::HeadCheck;

use crate::PgLeaseStore;
use crate::error::{self, Stage};

/// Every head at its group's first ready job, from the jobs, in one transaction (a claim's
/// repair or a trigger waits for it on the row locks it takes).
fn rebuild(s: &str) -> String {
    format!(
        "BEGIN; LOCK TABLE {s}.group_heads IN EXCLUSIVE MODE; DELETE FROM {s}.group_heads; \
         INSERT INTO {s}.group_heads (queue, grp, priority, run_at, seq) \
         SELECT DISTINCT ON (queue, grp) queue, grp, priority, run_at, seq FROM {s}.jobs \
         WHERE grp IS NOT NULL AND NOT done AND ended IS NULL AND leased_until IS NULL \
         ORDER BY queue, grp, priority DESC, run_at ASC NULLS FIRST, seq; COMMIT"
    )
}

/// How many heads there are, then each group with a ready job whose head is missing or after
/// its first ready job.
fn check(s: &str) -> String {
    format!(
        "SELECT NULL, NULL, (SELECT count(*) FROM {s}.group_heads) \
         UNION ALL (SELECT r.queue, r.grp, NULL FROM \
         (SELECT DISTINCT ON (queue, grp) queue, grp, priority, run_at, seq FROM {s}.jobs \
         WHERE grp IS NOT NULL AND NOT done AND ended IS NULL AND leased_until IS NULL \
         ORDER BY queue, grp, priority DESC, run_at ASC NULLS FIRST, seq) r \
         LEFT JOIN {s}.group_heads h ON h.queue = r.queue AND h.grp = r.grp \
         WHERE h.grp IS NULL OR NOT (h.priority > r.priority OR (h.priority = r.priority \
         AND (coalesce(h.run_at, '-infinity'), h.seq) \
         <= (coalesce(r.run_at, '-infinity'), r.seq))) \
         ORDER BY 1, 2)"
    )
}

impl PgLeaseStore {
    /// [`lease_ports::transfer::Transfer::check_heads`].
    pub(crate) async fn heads_checked(&self, rebuild_first: bool) -> Result<HeadCheck, StoreError> {
        let conn = self.conn().await?;
        let c = conn.client();
        if rebuild_first {
            if let Err(e) = c.batch_execute(&rebuild(&self.schema)).await {
                // Leave no transaction open on the pooled connection.
                let _ = c.batch_execute("ROLLBACK").await;
                return Err(error::map(e, Stage::Commit));
            }
        }
        let rows = c
            .query(&check(&self.schema), &[])
            .await
            .map_err(|e| error::map(e, Stage::BeforeCommit))?;
        let read = |e| error::map(e, Stage::BeforeCommit);
        let mut found = HeadCheck::default();
        for row in &rows {
            let queue: Option<String> = row.try_get(0).map_err(read)?;
            let group: Option<String> = row.try_get(1).map_err(read)?;
            match (queue, group) {
                (Some(queue), Some(group)) => {
                    let queue = QueueName::stored(queue).map_err(|e| {
                        StoreError::Corrupt(format!("a head's stored queue: {e}").into())
                    })?;
                    let group = GroupKey::stored(group).map_err(|e| {
                        StoreError::Corrupt(format!("a head's stored group: {e}").into())
                    })?;
                    found.stray.push((queue, group));
                }
                _ => {
                    let n: i64 = row.try_get(2).map_err(read)?;
                    found.heads = lease_ports::codec::count(n, "the group heads")?;
                }
            }
        }
        Ok(found)
    }
}

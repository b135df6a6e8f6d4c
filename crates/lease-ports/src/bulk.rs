//! Bulk actions: an admin's retry or cancel of every job a [`ListFilter`] matches, done page by
//! page in bounded batches, each job decided on its own as its own retry or cancel would be.

use lease_domain::{Command, Outcome, Status, Timestamp};

use crate::{LeaseStore, ListFilter, StoreError};

/// The most jobs one batch of a bulk action reads and writes (one call of
/// [`LeaseStore::apply_many`]: on SQLite one transaction).
pub const BULK_BATCH: usize = 500;

/// What a bulk action does to each job it matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BulkAction {
    /// Puts a dead or cancelled job back to pending ([`lease_domain::decide_retry`]).
    Retry,
    /// Cancels the job ([`Command::Cancel`]).
    Cancel,
}

impl BulkAction {
    /// The action's name, as the API and the CLI take it.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            BulkAction::Retry => "retry",
            BulkAction::Cancel => "cancel",
        }
    }

    /// The status a filter takes when it names none: `dead` for a retry, `pending` for a
    /// cancel.
    #[must_use]
    pub fn default_status(self) -> Status {
        match self {
            BulkAction::Retry => Status::Dead,
            BulkAction::Cancel => Status::Pending,
        }
    }

    fn command(self, now: Timestamp) -> Command {
        match self {
            BulkAction::Retry => Command::Retry(now),
            BulkAction::Cancel => Command::Cancel(now),
        }
    }
}

/// What a bulk action came to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BulkOutcome {
    /// The jobs the filter matched when their batch was read.
    pub matched: u64,
    /// The jobs the action changed (the others were refused on their own: a job that had
    /// changed since it was read).
    pub changed: u64,
}

/// Does `action` to every job `filter` matches (its `limit` and `after` are not used: every
/// match is taken, [`BULK_BATCH`] at a time, in id order), at `filter.now`; with `dry_run`
/// only counts them. Each batch is one call of [`LeaseStore::apply_many`], so a failure stops
/// the action after the batches before it, which stand.
///
/// # Errors
/// The store's error for the batch it stopped at (an `Indeterminate` one may have applied).
pub async fn bulk(
    store: &dyn LeaseStore,
    filter: &ListFilter,
    action: BulkAction,
    dry_run: bool,
) -> Result<BulkOutcome, StoreError> {
    let mut page = ListFilter {
        limit: BULK_BATCH,
        after: None,
        ..filter.clone()
    };
    let mut outcome = BulkOutcome::default();
    loop {
        let records = store.list(&page).await?;
        let read = records.len();
        outcome.matched += u64::try_from(read).unwrap_or(u64::MAX);
        page.after = records.last().map(|r| r.id.clone());
        if !dry_run && read > 0 {
            let writes = records
                .into_iter()
                .map(|r| (r.id, action.command(filter.now), None))
                .collect();
            for answer in store.apply_many(writes).await {
                match answer?.outcome {
                    Outcome::Wrote(Ok(())) => outcome.changed += 1,
                    Outcome::Wrote(Err(_)) => {}
                    other => {
                        return Err(StoreError::Corrupt(
                            format!("the store answered a {} with {other:?}", action.name()).into(),
                        ));
                    }
                }
            }
        }
        if read < BULK_BATCH {
            return Ok(outcome);
        }
    }
}

//! `claim_next` inside a transaction: pages of candidates from the ready index
//! (`FOR UPDATE SKIP LOCKED`, in claim order), decided by the shared loop
//! (`lease_ports::next::ClaimNextLoop`); each page's decided rows go with the next page's read.

use futures::future::{try_join, try_join_all};
use lease_domain::{ClockMode, LeaseTerm, Owner, QueueName, Timestamp};
use lease_ports::next::ClaimNextLoop;
use lease_ports::{Lease, StoreError};

use crate::PgLeaseStore;
use crate::connection::{Conn, Statements};
use crate::error::{self, Stage};
use crate::sql::{self, Encoded};
use crate::write::update;

/// The planner settings of every `claim_next` transaction (`SET LOCAL` each). `enable_sort`
/// keeps the candidates on the ordered scan of the ready index, which stops at the limit. With
/// statistics that lag a burst of enqueues, the planner otherwise estimates one row and sorts
/// every pending job of the queue instead (seen: over two minutes on 2M jobs). It is local to
/// those transactions because, session-wide, it also turned a catalog query into 300 ms.
/// `jit` is off because the one sort left (merging ended leases with the unheld jobs) is costed
/// as disabled, which puts the statement over the JIT threshold: compiling it took 250 ms per
/// call and up to 2 s under contention, for a statement that runs in a fraction of a
/// millisecond.
pub const CLAIM_NEXT_SETTINGS: [&str; 2] = ["enable_sort = off", "jit = off"];

/// [`CLAIM_NEXT_SETTINGS`] as one `SET LOCAL` each.
fn set_local() -> String {
    CLAIM_NEXT_SETTINGS
        .iter()
        .map(|s| format!("SET LOCAL {s}"))
        .collect::<Vec<_>>()
        .join("; ")
}

impl PgLeaseStore {
    /// Leases up to `limit` candidates inside the open transaction (BEGIN already pipelined
    /// by the caller when `begin` is set), returning the leases and the rows to write.
    #[allow(clippy::too_many_arguments)] // claim_next's four, the connection, and BEGIN or not.
    pub(crate) async fn claim_next_on(
        &self,
        conn: &Conn,
        s: &Statements,
        queue: &QueueName,
        owner: &Owner,
        term: LeaseTerm,
        limit: usize,
        begin: bool,
    ) -> Result<Claimed, StoreError> {
        let c = conn.client();
        if limit == 0 {
            if begin {
                c.execute(&s.begin, &[])
                    .await
                    .map_err(|e| error::map(e, Stage::BeforeCommit))?;
            }
            return Ok(Claimed::default());
        }
        let caller_now = match self.clock {
            ClockMode::Store => None,
            ClockMode::Caller { .. } => Some(term.now().get()),
        };
        let check_skew = matches!(self.clock, ClockMode::Caller { max_skew: Some(_) });
        let mut next = ClaimNextLoop::new(owner, limit);
        // Rows decided in the previous page, sent before the next candidates are read.
        let mut written: Vec<Encoded> = Vec::new();
        let mut wrote = false;
        let mut first = true;
        while let Some(want) = next.want() {
            let want = i64::try_from(want).unwrap_or(i64::MAX);
            let ((_, clock), rows) = try_join(
                try_join(
                    async {
                        if first {
                            // Pipelined with the candidates: no extra round trip.
                            let begin = if begin { "BEGIN; " } else { "" };
                            c.batch_execute(&format!("{begin}{}", set_local())).await?;
                        }
                        try_join_all(written.iter().map(|w| update(c, &s.update, w))).await
                    },
                    async {
                        if check_skew && first {
                            c.query_one(&s.clock, &[])
                                .await
                                .map(|r| Some(r.get::<_, f64>(0)))
                        } else {
                            Ok(None)
                        }
                    },
                ),
                c.query(&s.candidates, &[&queue.as_str(), &caller_now, &want]),
            )
            .await
            .map_err(|e| error::map(e, Stage::BeforeCommit))?;
            first = false;
            wrote |= !written.is_empty();
            if let Some(now) = clock {
                self.clock.resolve_term(term, stored_now(now)?)?;
            }
            // Every row of a page carries the same clock reading (one per statement).
            let mut page_term = term;
            let mut page = Vec::with_capacity(rows.len());
            for row in &rows {
                let now: f64 = row.try_get(0).map_err(|e| {
                    StoreError::Corrupt(lease_ports::Detail::caused_by(
                        format!("the clock column: {e}"),
                        e,
                    ))
                })?;
                page_term = self.clock.resolve_term(term, stored_now(now)?)?;
                page.push(sql::decode_with_id(row, 1)?);
            }
            written = next
                .page(page_term, page)
                .iter()
                .map(|(id, job)| Encoded::new(id, job))
                .collect();
        }
        Ok(Claimed {
            leases: next.into_leases(),
            writes: written,
            wrote,
        })
    }
}

/// What `claim_next` decided inside a transaction.
#[derive(Default)]
pub(crate) struct Claimed {
    pub(crate) leases: Vec<Lease>,
    /// Rows still to write before COMMIT.
    pub(crate) writes: Vec<Encoded>,
    /// Whether rows were already written in the transaction (so it must commit).
    pub(crate) wrote: bool,
}

/// The server's clock as a time; a non-finite one is the server's fault.
pub(crate) fn stored_now(now: f64) -> Result<Timestamp, StoreError> {
    Timestamp::new(now).map_err(|_| {
        StoreError::Corrupt(format!("the server's clock reads {now}, not a time").into())
    })
}

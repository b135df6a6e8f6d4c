//! `claim_next` inside a transaction: pages of candidates from the ready index
//! (`FOR UPDATE SKIP LOCKED`, in claim order), decided by the shared loop
//! (`lease_ports::next::ClaimNextLoop`); each page's decided rows go with the next page's read.

use futures::future::{try_join, try_join_all};
use lease_domain::{ClockMode, GroupKey, GroupTurn, LeaseTerm, QueueName};
use lease_ports::next::ClaimNextLoop;
use lease_ports::{ClaimNext, Lease, StoreError};

use crate::PgLeaseStore;
use crate::connection::{Conn, Statements};
use crate::error::{self, Stage};
use crate::sql::{self, Encoded, Standing, stored_now};
use crate::write::{clock_if, update};

impl PgLeaseStore {
    /// Leases up to `claim.limit` candidates inside the open transaction (BEGIN pipelined
    /// first when `begin` is set), returning the leases and the rows to write, with the answer
    /// of `alongside`: a request sent in the first round trip, after BEGIN and before the
    /// candidates (a completion that goes before the claim locks its job there).
    pub(crate) async fn claim_next_on<T>(
        &self,
        conn: &Conn,
        s: &Statements,
        claim: &ClaimNext,
        begin: bool,
        alongside: impl Future<Output = Result<T, tokio_postgres::Error>>,
    ) -> Result<(Claimed, T), StoreError> {
        let (queue, term, limit) = (&claim.queue, claim.term, claim.limit);
        let c = conn.client();
        let begun = async {
            if begin {
                c.execute(&s.begin, &[]).await
            } else {
                Ok(0)
            }
        };
        if limit == 0 {
            let (_, along) = try_join(begun, alongside)
                .await
                .map_err(|e| error::map(e, Stage::BeforeCommit))?;
            return Ok((Claimed::default(), along));
        }
        let caller_now = match self.clock {
            ClockMode::Store => None,
            ClockMode::Caller { .. } => Some(term.now().get()),
        };
        let check_skew = matches!(self.clock, ClockMode::Caller { max_skew: Some(_) });
        // The first round trip: BEGIN, the settings, the request that goes along, the clock
        // when the skew is bounded, the queue's settings (`FOR SHARE`: a change of settings
        // waits for this transaction) and the first page of candidates.
        let (((((_, settings), along), clock), queue_row), rows) = try_join(
            try_join(
                try_join(
                    try_join(try_join(begun, c.query_one(&s.settings, &[])), alongside),
                    clock_if(c, s, check_skew),
                ),
                c.query_opt(&self.control.settings, &[&queue.as_str()]),
            ),
            c.query(
                &s.candidates,
                &[&queue.as_str(), &caller_now, &want_of(Some(limit))],
            ),
        )
        .await
        .map_err(|e| error::map(e, Stage::BeforeCommit))?;
        // Every lease of this claim hands out its fence in the epoch read here.
        let term = term.in_epoch(lease_ports::codec::epoch(settings.get(3))?);
        if let Some(now) = clock {
            self.clock.resolve_term(term, stored_now(now)?)?;
        }
        let settings = match &queue_row {
            Some(row) => crate::sql::decode_queue(row)?.1,
            None => lease_domain::QueueSettings::default(),
        };
        // The term of the first page (the store's clock, read by its statement, in store-clock
        // mode), at which the pause and the live leases are judged.
        let first_term = match rows.first() {
            Some(row) => self
                .clock
                .resolve_term(term, stored_now(row_clock(row)?)?)?,
            None => term,
        };
        // Under a limit or group rules, claims of the queue take turns (an advisory lock for
        // the transaction) and count its live leases and read its groups after their turn
        // comes, so no two decide on one count.
        let held = if settings.serializes_claims() && !rows.is_empty() {
            let ((), count) = try_join(
                async {
                    c.query_one(&self.control.lock_queue, &[&queue.as_str()])
                        .await
                        .map(drop)
                },
                async {
                    if settings.counts_leases() {
                        c.query_one(
                            &self.control.held,
                            &[&queue.as_str(), &first_term.now().get()],
                        )
                        .await
                        .map(Some)
                    } else {
                        Ok(None)
                    }
                },
            )
            .await
            .map_err(|e| error::map(e, Stage::BeforeCommit))?;
            match count {
                Some(row) => lease_ports::codec::count(row.get(0), "a queue's live leases")?,
                None => 0,
            }
        } else {
            0
        };
        let at_first = ClaimNext {
            term: first_term,
            ..claim.clone()
        };
        // Under a rate, forget the grants expired by this claim's clock (after the queue's
        // turn came, when it has candidates), then count those of the queue's own rate (its
        // groups' are counted as the loop meets them).
        let mut forgot = false;
        let counting = if settings.limits_rate() && claim.limit > 0 {
            forgot = c
                .execute(
                    &self.control.forget_expired_grants,
                    &[&queue.as_str(), &first_term.now().get()],
                )
                .await
                .map_err(|e| error::map(e, Stage::BeforeCommit))?
                > 0;
            if settings.rate.is_some() && !rows.is_empty() {
                let counted = crate::control::counting(c, &self.control, queue, &[""]).await?;
                counted.first().map_or(0, |(_, n)| *n)
            } else {
                0
            }
        } else {
            0
        };
        let mut next = ClaimNextLoop::in_queue(&at_first, &settings, held, counting);
        let mut wrote = forgot;
        let mut written = if next.is_fair() {
            if !rows.is_empty() {
                wrote |= self
                    .fair_claim(c, s, &mut next, queue, term, caller_now)
                    .await?;
            }
            Vec::new()
        } else {
            self.decide_page(c, &mut next, term, &rows).await?
        };
        // Further pages (when candidates were skipped): each page's decided rows go with the
        // next page's read.
        while let Some(want) = next.want().filter(|_| !next.is_fair()) {
            let (groups, except) = next.held_back();
            let groups: Vec<&str> = groups.iter().map(|g| g.as_str()).collect();
            let except: Vec<&str> = except.iter().map(|id| id.as_str()).collect();
            let page = async {
                if next.limits_groups() {
                    c.query(
                        &self.sql.grouped_candidates,
                        &[
                            &queue.as_str(),
                            &caller_now,
                            &want_of(Some(want)),
                            &groups,
                            &except,
                        ],
                    )
                    .await
                } else {
                    c.query(
                        &s.candidates,
                        &[&queue.as_str(), &caller_now, &want_of(Some(want))],
                    )
                    .await
                }
            };
            let (_, rows) = try_join(
                try_join_all(
                    written
                        .iter()
                        .map(|w| update(c, &s.update, &s.update_counted, w)),
                ),
                page,
            )
            .await
            .map_err(|e| error::map(e, Stage::BeforeCommit))?;
            wrote |= !written.is_empty();
            written = self.decide_page(c, &mut next, term, &rows).await?;
        }
        let grants = next.grants();
        if !grants.is_empty() {
            let (groups, ends): (Vec<Option<&str>>, Vec<f64>) = grants
                .iter()
                .map(|(g, at)| (g.as_ref().map(lease_domain::GroupKey::as_str), at.get()))
                .unzip();
            c.execute(&self.control.log_grants, &[&queue.as_str(), &groups, &ends])
                .await
                .map_err(|e| error::map(e, Stage::BeforeCommit))?;
            wrote = true;
        }
        let buried = next.buried().to_vec();
        Ok((
            Claimed {
                leases: next.into_leases(),
                writes: written,
                wrote,
                buried,
            },
            along,
        ))
    }

    /// Decides one page of candidates (each row carries the statement's clock reading), first
    /// reading the standing of the groups the loop meets for the first time.
    async fn decide_page(
        &self,
        c: &tokio_postgres::Client,
        next: &mut ClaimNextLoop,
        term: LeaseTerm,
        rows: &[tokio_postgres::Row],
    ) -> Result<Vec<Encoded>, StoreError> {
        let (page_term, page) = self.decoded(term, rows)?;
        let groups = next.unknown_groups(&page);
        if !groups.is_empty() {
            self.learn(c, next, &page[0].1.queue, &groups, page_term.now())
                .await?;
        }
        // Where each candidate stood, for the counts a write moves (a job buried as dead).
        let read: std::collections::HashMap<lease_domain::JobId, Standing> = page
            .iter()
            .map(|(id, job)| (id.clone(), Standing::of(job)))
            .collect();
        Ok(next
            .page(page_term, page)
            .iter()
            .map(|(id, job)| Encoded::from_to(id, read.get(id).cloned(), job))
            .collect())
    }
}

impl PgLeaseStore {
    /// Reads the standing of `groups` of `queue` (their jobs that bear on the group rules and,
    /// under a rate per group, the grants that still count) for the claim.
    async fn learn(
        &self,
        c: &tokio_postgres::Client,
        next: &mut ClaimNextLoop,
        queue: &QueueName,
        groups: &[GroupKey],
        now: lease_domain::Timestamp,
    ) -> Result<(), StoreError> {
        let keys: Vec<&str> = groups.iter().map(GroupKey::as_str).collect();
        let rows = c
            .query(&self.control.group_bearing, &[&queue.as_str(), &keys])
            .await
            .map_err(|e| error::map(e, Stage::BeforeCommit))?;
        let bearing = rows
            .iter()
            .map(|row| sql::decode_with_id(row, 0))
            .collect::<Result<Vec<_>, _>>()?;
        let counted = if next.rates_groups() {
            let counted = crate::control::counting(c, &self.control, queue, &keys).await?;
            counted
                .into_iter()
                .map(|(g, n)| {
                    GroupKey::stored(g).map(|g| (g, n)).map_err(|e| {
                        StoreError::Corrupt(format!("a rate's stored group: {e}").into())
                    })
                })
                .collect::<Result<Vec<_>, _>>()?
        } else {
            Vec::new()
        };
        next.learn(groups, &bearing, &counted, now);
        Ok(())
    }

    /// A fair claim (`lease_domain::Turn`), after the queue's advisory lock: the due jobs
    /// without a group first, then each group's on its turn (`group_turns`, the group served
    /// least recently first), one lease a turn, each decided row written at once; each lease
    /// moves its group behind every other, and a group found with no unfinished job loses
    /// its turn (once no writer of the group holds its lock). Says whether it wrote.
    async fn fair_claim(
        &self,
        c: &tokio_postgres::Client,
        s: &Statements,
        next: &mut ClaimNextLoop,
        queue: &QueueName,
        term: LeaseTerm,
        caller_now: Option<f64>,
    ) -> Result<bool, StoreError> {
        let db = |e| error::map(e, Stage::BeforeCommit);
        let q = queue.as_str();
        let none: Option<&str> = None;
        let mut wrote = false;
        while let Some(want) = next.want().filter(|_| !next.is_full()) {
            let rows = c
                .query(
                    &self.control.ungrouped_candidates,
                    &[&q, &caller_now, &want_of(Some(want)), &none],
                )
                .await
                .map_err(db)?;
            let (writes, _) = self.offer(c, s, next, term, &rows).await?;
            if writes == 0 {
                break;
            }
            wrote = true;
        }
        let mut cursor: (i64, String) = (-1, String::new());
        while !next.is_full() {
            let Some(row) = c
                .query_opt(&self.control.next_turn, &[&q, &cursor.0, &cursor.1])
                .await
                .map_err(db)?
            else {
                break;
            };
            let turn: (i64, String) = (row.try_get(0).map_err(db)?, row.try_get(1).map_err(db)?);
            let group = GroupKey::stored(turn.1.clone())
                .map_err(|e| StoreError::Corrupt(format!("a turn's stored group: {e}").into()))?;
            cursor = turn;
            if next.must_learn(&group) {
                self.learn(c, next, queue, std::slice::from_ref(&group), term.now())
                    .await?;
            }
            let only: Option<Vec<String>> = match next.group_turn(&group) {
                GroupTurn::Closed => continue,
                GroupTurn::Only(ids) => Some(ids.iter().map(|id| id.as_str().to_owned()).collect()),
                GroupTurn::Open => None,
            };
            let (mut leased, mut found) = (0, false);
            while leased == 0 && !next.is_full() {
                let rows = match &only {
                    Some(ids) => {
                        c.query(
                            &self.control.only_candidates,
                            &[&q, &caller_now, &want_of(Some(ids.len())), ids],
                        )
                        .await
                    }
                    None => {
                        c.query(
                            &self.control.turn_candidates,
                            &[&q, &caller_now, &1_i64, &group.as_str()],
                        )
                        .await
                    }
                }
                .map_err(db)?;
                found |= !rows.is_empty();
                let (writes, n) = self.offer(c, s, next, term, &rows).await?;
                if writes == 0 {
                    break;
                }
                wrote = true;
                leased += n;
            }
            if leased > 0 {
                c.execute(&self.control.serve_turn, &[&q, &group.as_str()])
                    .await
                    .map_err(db)?;
            } else if !found {
                let locked: bool = c
                    .query_one(&self.control.try_lock_turn, &[&q, &group.as_str()])
                    .await
                    .and_then(|row| row.try_get(0))
                    .map_err(db)?;
                if locked {
                    wrote |= c
                        .execute(&self.control.drop_turn, &[&q, &group.as_str()])
                        .await
                        .map_err(db)?
                        > 0;
                }
            }
        }
        Ok(wrote)
    }

    /// Offers the candidate rows (each with the statement's clock reading) to a fair claim
    /// and writes what it decided: how many rows it wrote and how many leases it took.
    async fn offer(
        &self,
        c: &tokio_postgres::Client,
        s: &Statements,
        next: &mut ClaimNextLoop,
        term: LeaseTerm,
        rows: &[tokio_postgres::Row],
    ) -> Result<(usize, usize), StoreError> {
        let (page_term, page) = self.decoded(term, rows)?;
        let read: std::collections::HashMap<lease_domain::JobId, Standing> = page
            .iter()
            .map(|(id, job)| (id.clone(), Standing::of(job)))
            .collect();
        let (writes, leased) = next.offer(page_term, page);
        for (id, job) in &writes {
            let encoded = Encoded::from_to(id, read.get(id).cloned(), job);
            update(c, &s.update, &s.update_counted, &encoded)
                .await
                .map_err(|e| error::map(e, Stage::BeforeCommit))?;
        }
        Ok((writes.len(), leased))
    }
}

impl PgLeaseStore {
    /// Candidate rows read back, with the term at the clock reading their statement made
    /// (every row of a statement carries the same one).
    fn decoded(
        &self,
        term: LeaseTerm,
        rows: &[tokio_postgres::Row],
    ) -> Result<(LeaseTerm, Vec<(lease_domain::JobId, lease_domain::Job)>), StoreError> {
        let mut page_term = term;
        let mut page = Vec::with_capacity(rows.len());
        for row in rows {
            page_term = self
                .clock
                .resolve_term(term, stored_now(row_clock(row)?)?)?;
            page.push(sql::decode_with_id(row, 1)?);
        }
        Ok((page_term, page))
    }
}

/// The clock reading a candidate row carries (its first column).
fn row_clock(row: &tokio_postgres::Row) -> Result<f64, StoreError> {
    row.try_get(0).map_err(|e| {
        StoreError::Corrupt(lease_ports::Detail::caused_by(
            format!("the clock column: {e}"),
            e,
        ))
    })
}

/// A page size as the candidates statement takes it (`None` asks for none).
fn want_of(want: Option<usize>) -> i64 {
    want.map_or(0, |w| i64::try_from(w).unwrap_or(i64::MAX))
}

/// What `claim_next` decided inside a transaction.
#[derive(Default)]
pub(crate) struct Claimed {
    pub(crate) leases: Vec<Lease>,
    /// Rows still to write before COMMIT.
    pub(crate) writes: Vec<Encoded>,
    /// Whether rows were already written in the transaction (so it must commit).
    pub(crate) wrote: bool,
    /// The jobs the claim buried, with when: the jobs waiting on each are settled before
    /// COMMIT ([`Claimed::settle`]).
    pub(crate) buried: Vec<(lease_domain::JobId, Option<lease_domain::Timestamp>)>,
}

impl Claimed {
    /// Writes the rows still to write, then settles the jobs waiting on each job the claim
    /// buried (a burial is rare: only then are the waiting children looked for).
    pub(crate) async fn settle(
        &mut self,
        conn: &Conn,
        s: &Statements,
        w: &crate::workflow::WorkflowSql,
    ) -> Result<(), StoreError> {
        if self.buried.is_empty() {
            return Ok(());
        }
        for write in self.writes.drain(..) {
            crate::write::update(conn.client(), &s.update, &s.update_counted, &write)
                .await
                .map_err(|e| error::map(e, Stage::BeforeCommit))?;
            self.wrote = true;
        }
        for (id, at) in std::mem::take(&mut self.buried) {
            crate::workflow::release(conn, s, w, &id, lease_domain::Status::Dead, at).await?;
        }
        Ok(())
    }
}

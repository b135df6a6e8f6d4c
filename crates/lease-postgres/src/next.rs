//! `claim_next` inside a transaction: the claim walk (`lease_ports::next::ClaimWalk`) decides,
//! its reads answered by this store's statements (candidates from the ready index or one
//! group's, `FOR UPDATE SKIP LOCKED`, in claim order; the group heads of migration 16; a
//! group's standing; the next fair turn), and the rows it decides go with its next read.

use futures::future::{try_join, try_join_all};
use lease_domain::{ClockMode, GroupKey, JobId, LeaseTerm, QueueName};
use lease_ports::next::{Answer, Candidate, ClaimWalk, Effect, Head, Read};
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
        // Without a count or a rate to read after it, the queue's turn is taken in the
        // round trip of the walk's first read instead (`Driver::lock`): the statements of
        // one connection run in order, so the read still runs after the turn came.
        let lock_later = settings.serializes_claims()
            && !rows.is_empty()
            && !settings.counts_leases()
            && !settings.limits_rate();
        let held = if settings.serializes_claims() && !rows.is_empty() && !lock_later {
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
        let mut walk = ClaimWalk::in_queue(&at_first, &settings, held, counting);
        let lock = if lock_later {
            Some(conn.prepare(&self.control.lock_queue).await?)
        } else {
            None
        };
        let mut driver = Driver {
            store: self,
            conn,
            s,
            queue,
            caller_now,
            read: std::collections::HashMap::new(),
            pending: Vec::new(),
            wrote: forgot,
            lock,
            repair: Vec::new(),
        };
        // The page read ahead in the first round trip answers a plain walk's first read. When
        // it found no candidate there is nothing to claim, and no walk runs (nor took the
        // queue's turn above).
        let none = rows.is_empty();
        let mut first = Some(rows);
        while let Some(read) = walk.next_read() {
            if none && !matches!(read, Read::Page { .. }) {
                break;
            }
            driver.stage(walk.take_effects()).await?;
            let answer = match (read, first.take()) {
                (Read::Page { .. }, Some(rows)) => {
                    let (term, page) = driver.decoded(term, &rows)?;
                    Answer::Page(term, page)
                }
                (read, _) => driver.answer(&walk, term, read).await?,
            };
            walk.answer(answer)?;
        }
        driver.stage(walk.take_effects()).await?;
        let grants = walk.grants();
        if !grants.is_empty() {
            let (groups, ends): (Vec<Option<&str>>, Vec<f64>) = grants
                .iter()
                .map(|(g, at)| (g.as_ref().map(lease_domain::GroupKey::as_str), at.get()))
                .unzip();
            c.execute(&self.control.log_grants, &[&queue.as_str(), &groups, &ends])
                .await
                .map_err(|e| error::map(e, Stage::BeforeCommit))?;
            driver.wrote = true;
        }
        let buried = walk.buried().to_vec();
        Ok((
            Claimed {
                leases: walk.into_leases(),
                writes: driver.pending,
                wrote: driver.wrote,
                buried,
                repair: driver.repair,
            },
            along,
        ))
    }
}

/// Answers the claim walk's reads inside one `claim_next` transaction and writes its effects:
/// the decided rows go with the next read (or with COMMIT), in one round trip.
struct Driver<'a> {
    store: &'a PgLeaseStore,
    conn: &'a Conn,
    s: &'a Statements,
    queue: &'a QueueName,
    caller_now: Option<f64>,
    /// Where each candidate read stood, for the counts a write moves (a job buried as dead).
    read: std::collections::HashMap<JobId, Standing>,
    /// Rows decided and not yet sent.
    pending: Vec<Encoded>,
    /// Whether rows were already written in the transaction (so it must commit).
    wrote: bool,
    /// The queue's advisory lock, prepared, when it goes with the walk's first read.
    lock: Option<tokio_postgres::Statement>,
    /// The groups whose heads go with COMMIT (`Effect::RepairHeads`).
    repair: Vec<String>,
}

impl Driver<'_> {
    fn db(e: tokio_postgres::Error) -> StoreError {
        error::map(e, Stage::BeforeCommit)
    }

    /// Takes the walk's effects: rows wait to go with the next read; a turn or a head is
    /// written at once, after the rows before it.
    async fn stage(&mut self, effects: Vec<Effect>) -> Result<(), StoreError> {
        for effect in effects {
            match effect {
                Effect::Job(id, job) => {
                    let before = self.read.get(&id).cloned();
                    self.pending.push(Encoded::from_to(&id, before, &job));
                }
                // The walk's last effect: sent with COMMIT, after every row (`Claimed::commit`).
                Effect::RepairHeads(groups) => {
                    self.repair = groups.iter().map(|g| g.as_str().to_owned()).collect();
                    self.wrote = true;
                }
                other => {
                    self.flush().await?;
                    self.write(other).await?;
                }
            }
        }
        Ok(())
    }

    /// Sends the rows decided so far (after the queue's lock when it goes with this round
    /// trip).
    async fn flush(&mut self) -> Result<(), StoreError> {
        self.send(&[], &[]).await.map(drop)
    }

    /// One round trip: the queue's lock when it goes with this one, the rows decided so far,
    /// then `statements` with `params`, in order; answers each statement's rows.
    async fn send(
        &mut self,
        statements: &[tokio_postgres::Statement],
        params: &[Vec<&(dyn tokio_postgres::types::ToSql + Sync)>],
    ) -> Result<Vec<Vec<tokio_postgres::Row>>, StoreError> {
        let (c, s) = (self.conn.client(), self.s);
        let lock = self.lock.take();
        let (_, rows) = try_join(
            try_join(
                locked(c, lock.as_ref(), self.queue.as_str()),
                try_join_all(
                    self.pending
                        .iter()
                        .map(|w| update(c, &s.update, &s.update_counted, w)),
                ),
            ),
            try_join_all(
                statements
                    .iter()
                    .zip(params)
                    .map(|(stmt, p)| c.query(stmt, p)),
            ),
        )
        .await
        .map_err(Self::db)?;
        self.wrote |= !self.pending.is_empty();
        self.pending.clear();
        Ok(rows)
    }

    async fn write(&mut self, effect: Effect) -> Result<(), StoreError> {
        let control = &self.store.control;
        let c = self.conn.client();
        let q = self.queue.as_str();
        match effect {
            // Staged by `stage`.
            Effect::Job(..) | Effect::RepairHeads(_) => {}
            Effect::ServeTurn(group) => {
                let stmt = self.conn.prepare(&control.serve_turn).await?;
                c.execute(&stmt, &[&q, &group.as_str()])
                    .await
                    .map_err(Self::db)?;
                self.wrote = true;
            }
            Effect::DropTurn(group) => {
                // Only once no writer of the group holds its lock, in a new statement's snapshot.
                let stmt = self.conn.prepare(&control.try_lock_turn).await?;
                let locked: bool = c
                    .query_one(&stmt, &[&q, &group.as_str()])
                    .await
                    .and_then(|row| row.try_get(0))
                    .map_err(Self::db)?;
                if locked {
                    let stmt = self.conn.prepare(&control.drop_turn).await?;
                    self.wrote |= c
                        .execute(&stmt, &[&q, &group.as_str()])
                        .await
                        .map_err(Self::db)?
                        > 0;
                }
            }
        }
        Ok(())
    }

    /// Answers one read (sent with the rows decided before it).
    async fn answer(
        &mut self,
        walk: &ClaimWalk,
        term: LeaseTerm,
        read: Read,
    ) -> Result<Answer, StoreError> {
        let control = &self.store.control;
        let q = self.queue.as_str();
        let now = self.caller_now;
        let want = |n: usize| want_of(Some(n));
        Ok(match read {
            Read::Many(reads) => self.many(term, reads).await?,
            Read::Page { want: n } => {
                let rows = self
                    .query(&self.store.sql.candidates, &[&q, &now, &want(n)])
                    .await?;
                let (term, page) = self.decoded(term, &rows)?;
                Answer::Page(term, page)
            }
            Read::Due {
                group: None,
                want: n,
            } => {
                let none: Option<&str> = None;
                let rows = self
                    .query(&control.ungrouped_candidates, &[&q, &now, &want(n), &none])
                    .await?;
                self.candidates(term, &rows)?
            }
            Read::Due {
                group: Some(group),
                want: n,
            } => {
                let rows = self
                    .query(
                        &control.turn_candidates,
                        &[&q, &now, &want(n), &group.as_str()],
                    )
                    .await?;
                self.candidates(term, &rows)?
            }
            Read::Jobs(ids) => {
                let ids: Vec<&str> = ids.iter().map(JobId::as_str).collect();
                let rows = self
                    .query(
                        &control.only_candidates,
                        &[&q, &now, &want(ids.len()), &ids],
                    )
                    .await?;
                self.candidates(term, &rows)?
            }
            Read::Heads { want: n, skip } => {
                let skip: Vec<&str> = skip.iter().map(GroupKey::as_str).collect();
                let rows = self.query(&control.heads, &[&q, &want(n), &skip]).await?;
                Answer::Heads(rows.iter().map(decode_head).collect::<Result<_, _>>()?)
            }
            Read::Standing(groups) => {
                let keys: Vec<&str> = groups.iter().map(GroupKey::as_str).collect();
                let rows = self.query(&control.group_bearing, &[&q, &keys]).await?;
                let bearing = rows
                    .iter()
                    .map(|row| sql::decode_with_id(row, 0))
                    .collect::<Result<Vec<_>, _>>()?;
                let counting = if walk.rates_groups() {
                    crate::control::counting(self.conn.client(), control, self.queue, &keys)
                        .await?
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
                Answer::Standing { bearing, counting }
            }
            Read::Turn { after } => {
                let (served, group) = match &after {
                    Some((served, group)) => {
                        (i64::try_from(*served).unwrap_or(i64::MAX), group.as_str())
                    }
                    None => (-1, ""),
                };
                let rows = self
                    .query(&control.next_turn, &[&q, &served, &group])
                    .await?;
                let turn = match rows.first() {
                    None => None,
                    Some(row) => {
                        let served: i64 = row.try_get(0).map_err(Self::db)?;
                        let group: String = row.try_get(1).map_err(Self::db)?;
                        let group = GroupKey::stored(group).map_err(|e| {
                            StoreError::Corrupt(format!("a turn's stored group: {e}").into())
                        })?;
                        Some((lease_ports::codec::seq(served)?, group))
                    }
                };
                Answer::Turn(turn)
            }
        })
    }

    /// Answers reads that do not depend on each other in one round trip, with the rows
    /// decided before them.
    async fn many(&mut self, term: LeaseTerm, reads: Vec<Read>) -> Result<Answer, StoreError> {
        type Param = Box<dyn tokio_postgres::types::ToSql + Sync + Send>;
        let control = &self.store.control;
        let q = || -> Param { Box::new(self.queue.as_str().to_owned()) };
        let mut planned: Vec<(&str, Vec<Param>, bool)> = Vec::with_capacity(reads.len());
        for read in &reads {
            let now: Param = Box::new(self.caller_now);
            planned.push(match read {
                Read::Due { group: None, want } => {
                    let none: Option<String> = None;
                    let p: Vec<Param> =
                        vec![q(), now, Box::new(want_of(Some(*want))), Box::new(none)];
                    (control.ungrouped_candidates.as_str(), p, false)
                }
                Read::Due {
                    group: Some(group),
                    want,
                } => {
                    let g = group.as_str().to_owned();
                    let p: Vec<Param> = vec![q(), now, Box::new(want_of(Some(*want))), Box::new(g)];
                    (control.turn_candidates.as_str(), p, false)
                }
                Read::Jobs(ids) => {
                    let ids: Vec<String> = ids.iter().map(|id| id.as_str().to_owned()).collect();
                    let n = want_of(Some(ids.len()));
                    let p: Vec<Param> = vec![q(), now, Box::new(n), Box::new(ids)];
                    (control.only_candidates.as_str(), p, false)
                }
                Read::Heads { want, skip } => {
                    let skip: Vec<String> = skip.iter().map(|g| g.as_str().to_owned()).collect();
                    let p: Vec<Param> = vec![q(), Box::new(want_of(Some(*want))), Box::new(skip)];
                    (control.heads.as_str(), p, true)
                }
                other => {
                    return Err(StoreError::Corrupt(
                        format!("the claim walk asked for {other:?} among reads sent together")
                            .into(),
                    ));
                }
            });
        }
        let mut statements = Vec::with_capacity(planned.len());
        for (text, _, _) in &planned {
            statements.push(self.conn.prepare(text).await?);
        }
        let params: Vec<Vec<&(dyn tokio_postgres::types::ToSql + Sync)>> = planned
            .iter()
            .map(|(_, p, _)| {
                p.iter()
                    .map(|b| b.as_ref() as &(dyn tokio_postgres::types::ToSql + Sync))
                    .collect()
            })
            .collect();
        let answered = self.send(&statements, &params).await?;
        let heads: Vec<bool> = planned.iter().map(|(_, _, heads)| *heads).collect();
        let mut answers = Vec::with_capacity(answered.len());
        for (rows, heads) in answered.iter().zip(heads) {
            answers.push(if heads {
                Answer::Heads(rows.iter().map(decode_head).collect::<Result<_, _>>()?)
            } else {
                self.candidates(term, rows)?
            });
        }
        Ok(Answer::Many(answers))
    }

    /// Runs one read of the walk, after the rows decided before it (in the same round trip).
    async fn query(
        &mut self,
        text: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Vec<tokio_postgres::Row>, StoreError> {
        let stmt = self.conn.prepare(text).await?;
        let mut rows = self.send(&[stmt], &[params.to_vec()]).await?;
        Ok(rows.pop().unwrap_or_default())
    }

    /// Candidate rows read back (each with the statement's clock first, then its `seq`).
    fn candidates(
        &mut self,
        term: LeaseTerm,
        rows: &[tokio_postgres::Row],
    ) -> Result<Answer, StoreError> {
        let mut seqs = Vec::with_capacity(rows.len());
        for row in rows {
            let seq: i64 = row.try_get(1).map_err(Self::db)?;
            seqs.push(lease_ports::codec::seq(seq)?);
        }
        let (term, page) = self.decoded_at(term, rows, 2)?;
        Ok(Answer::Candidates(
            term,
            page.into_iter()
                .zip(seqs)
                .map(|((id, job), seq)| Candidate { id, job, seq })
                .collect(),
        ))
    }

    /// Candidate rows read back, with the term at the clock reading their statement made
    /// (every row of a statement carries the same one); remembers where each stood.
    fn decoded(
        &mut self,
        term: LeaseTerm,
        rows: &[tokio_postgres::Row],
    ) -> Result<(LeaseTerm, Vec<(JobId, lease_domain::Job)>), StoreError> {
        self.decoded_at(term, rows, 1)
    }

    /// As [`Driver::decoded`], the job's id in column `at`.
    fn decoded_at(
        &mut self,
        term: LeaseTerm,
        rows: &[tokio_postgres::Row],
        at: usize,
    ) -> Result<(LeaseTerm, Vec<(JobId, lease_domain::Job)>), StoreError> {
        let (term, page) = self.store.decoded(term, rows, at)?;
        for (id, job) in &page {
            self.read.insert(id.clone(), Standing::of(job));
        }
        Ok((term, page))
    }
}

/// Takes the queue's advisory lock when `lock` is the prepared statement (else nothing).
async fn locked(
    c: &tokio_postgres::Client,
    lock: Option<&tokio_postgres::Statement>,
    queue: &str,
) -> Result<(), tokio_postgres::Error> {
    match lock {
        Some(stmt) => c.query_one(stmt, &[&queue]).await.map(drop),
        None => Ok(()),
    }
}

/// A head row (`grp`, `priority`, `run_at`, `seq`) read back.
fn decode_head(row: &tokio_postgres::Row) -> Result<Head, StoreError> {
    let db = |e| error::map(e, Stage::BeforeCommit);
    lease_ports::codec::head(
        row.try_get(0).map_err(db)?,
        row.try_get(1).map_err(db)?,
        row.try_get(2).map_err(db)?,
        row.try_get(3).map_err(db)?,
    )
}

impl PgLeaseStore {
    /// Candidate rows read back, with the term at the clock reading their statement made
    /// (every row of a statement carries the same one).
    /// The job's id is column `at`, its columns after it.
    fn decoded(
        &self,
        term: LeaseTerm,
        rows: &[tokio_postgres::Row],
        at: usize,
    ) -> Result<(LeaseTerm, Vec<(lease_domain::JobId, lease_domain::Job)>), StoreError> {
        let mut page_term = term;
        let mut page = Vec::with_capacity(rows.len());
        for row in rows {
            page_term = self
                .clock
                .resolve_term(term, stored_now(row_clock(row)?)?)?;
            page.push(sql::decode_with_id(row, at)?);
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
    /// The groups whose heads are set to their first ready job before COMMIT
    /// (`repair_group_heads`), after every row.
    pub(crate) repair: Vec<String>,
}

impl Claimed {
    /// Writes `writes` (the claim's rows and whatever the caller adds), moves the heads the
    /// walk met on, and commits, in one round trip (rolls back when nothing was written).
    pub(crate) async fn commit(
        &self,
        conn: &Conn,
        s: &Statements,
        control: &crate::control::ControlSql,
        queue: &QueueName,
        writes: &[Encoded],
        wrote: bool,
    ) -> Result<(), StoreError> {
        if self.repair.is_empty() {
            return crate::write::commit(conn.client(), s, writes, wrote).await;
        }
        let repair = conn.prepare(&control.repair_heads).await?;
        let c = conn.client();
        try_join(
            try_join(
                try_join_all(
                    writes
                        .iter()
                        .map(|w| update(c, &s.update, &s.update_counted, w)),
                ),
                c.query_one(&repair, &[&queue.as_str(), &self.repair]),
            ),
            c.execute(&s.commit, &[]),
        )
        .await
        .map(drop)
        .map_err(|e| error::map(e, Stage::Commit))
    }

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

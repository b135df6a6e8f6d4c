//! The claim walk's driver inside one `claim_next` transaction: it answers each read the walk
//! asks with this store's statements (pages, one group's due jobs, heads, standings, turns;
//! reads that do not wait on each other sent together) and writes the walk's effects, the
//! decided rows going with the next read or with COMMIT.

use futures::future::{try_join, try_join_all};
use lease_domain::{GroupKey, JobId, LeaseTerm, QueueName};
use lease_ports::StoreError;
use lease_ports::next::{Answer, Candidate, ClaimWalk, Effect, Head, Read};

use super::*;
use crate::PgLeaseStore;
use crate::connection::{Conn, Statements};
use crate::error::{self, Stage};
use crate::row;
use crate::row::{Encoded, Standing, stored_now};
use crate::tx::update;

/// Answers the claim walk's reads inside one `claim_next` transaction and writes its effects:
/// the decided rows go with the next read (or with COMMIT), in one round trip.
pub(super) struct Driver<'a> {
    pub(super) store: &'a PgLeaseStore,
    pub(super) conn: &'a Conn,
    pub(super) s: &'a Statements,
    pub(super) queue: &'a QueueName,
    pub(super) caller_now: Option<f64>,
    /// Where each candidate read stood, for the counts a write moves (a job buried as dead).
    pub(super) read: std::collections::HashMap<JobId, Standing>,
    /// Rows decided and not yet sent.
    pub(super) pending: Vec<Encoded>,
    /// Whether rows were already written in the transaction (so it must commit).
    pub(super) wrote: bool,
    /// The queue's advisory lock, prepared, when it goes with the walk's first read.
    pub(super) lock: Option<tokio_postgres::Statement>,
    /// The groups whose heads go with COMMIT (`Effect::RepairHeads`).
    pub(super) repair: Vec<String>,
}

/// A parameter of a planned read, owned.
pub(super) type Param = Box<dyn tokio_postgres::types::ToSql + Sync + Send>;

/// One read of the walk as a prepared statement and its parameters.
pub(super) struct Planned {
    pub(super) statement: tokio_postgres::Statement,
    pub(super) values: Vec<Param>,
    /// Whether it reads heads (else candidates).
    pub(super) heads: bool,
}

impl Planned {
    pub(super) fn params(&self) -> Vec<&(dyn tokio_postgres::types::ToSql + Sync)> {
        self.values
            .iter()
            .map(|b| b.as_ref() as &(dyn tokio_postgres::types::ToSql + Sync))
            .collect()
    }
}

impl Driver<'_> {
    pub(super) fn db(e: tokio_postgres::Error) -> StoreError {
        error::map(e, Stage::BeforeCommit)
    }

    /// Takes the walk's effects: rows wait to go with the next read; a turn or a head is
    /// written at once, after the rows before it.
    pub(super) async fn stage(&mut self, effects: Vec<Effect>) -> Result<(), StoreError> {
        for effect in effects {
            match effect {
                Effect::Job(id, job, ended) => {
                    let before = self.read.get(&id).cloned();
                    self.pending
                        .push(Encoded::from_to(&id, before, &job).ending(ended.as_ref()));
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
    pub(super) async fn flush(&mut self) -> Result<(), StoreError> {
        self.send(&[], &[]).await.map(drop)
    }

    /// One round trip: the queue's lock when it goes with this one, the rows decided so far,
    /// then `statements` with `params`, in order; answers each statement's rows.
    pub(super) async fn send(
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

    pub(super) async fn write(&mut self, effect: Effect) -> Result<(), StoreError> {
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
    pub(super) async fn answer(
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
                let rows = self
                    .query(
                        &control.heads,
                        &[&q, &want(n), &skip, &now, &DUE_WITH_HEADS],
                    )
                    .await?;
                self.heads_answer(term, &rows)?
            }
            Read::Standing(groups) => {
                let keys: Vec<&str> = groups.iter().map(GroupKey::as_str).collect();
                let rows = self.query(&control.group_bearing, &[&q, &keys]).await?;
                let bearing = rows
                    .iter()
                    .map(|row| row::decode_with_id(row, 0))
                    .collect::<Result<Vec<_>, _>>()?;
                let counting = if walk.rates_groups() {
                    crate::control_sql::counting(self.conn.client(), control, self.queue, &keys)
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
    pub(super) async fn many(
        &mut self,
        term: LeaseTerm,
        reads: Vec<Read>,
    ) -> Result<Answer, StoreError> {
        let planned = self.plan(&reads).await?;
        let statements: Vec<tokio_postgres::Statement> =
            planned.iter().map(|p| p.statement.clone()).collect();
        let params: Vec<Vec<&(dyn tokio_postgres::types::ToSql + Sync)>> =
            planned.iter().map(Planned::params).collect();
        let answered = self.send(&statements, &params).await?;
        self.decode_planned(term, &planned, &answered)
            .map(Answer::Many)
    }

    /// The statements that answer `reads` (only [`Read::Due`], [`Read::Jobs`] and
    /// [`Read::Heads`]: reads that do not depend on each other), prepared, with their
    /// parameters.
    pub(super) async fn plan(&self, reads: &[Read]) -> Result<Vec<Planned>, StoreError> {
        let control = &self.store.control;
        let q = || -> Param { Box::new(self.queue.as_str().to_owned()) };
        let mut planned = Vec::with_capacity(reads.len());
        for read in reads {
            let now: Param = Box::new(self.caller_now);
            let (text, params, heads): (&str, Vec<Param>, bool) = match read {
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
                    let p: Vec<Param> = vec![
                        q(),
                        Box::new(want_of(Some(*want))),
                        Box::new(skip),
                        now,
                        Box::new(DUE_WITH_HEADS),
                    ];
                    (control.heads.as_str(), p, true)
                }
                other => {
                    return Err(StoreError::Corrupt(
                        format!("the claim walk asked for {other:?} among reads sent together")
                            .into(),
                    ));
                }
            };
            planned.push(Planned {
                statement: self.conn.prepare(text).await?,
                values: params,
                heads,
            });
        }
        Ok(planned)
    }

    /// The answers of planned reads, from the rows their statements answered.
    pub(super) fn decode_planned(
        &mut self,
        term: LeaseTerm,
        planned: &[Planned],
        answered: &[Vec<tokio_postgres::Row>],
    ) -> Result<Vec<Answer>, StoreError> {
        let mut answers = Vec::with_capacity(answered.len());
        for (rows, planned) in answered.iter().zip(planned) {
            answers.push(if planned.heads {
                self.heads_answer(term, rows)?
            } else {
                self.candidates(term, rows)?
            });
        }
        Ok(answers)
    }

    /// Runs one read of the walk, after the rows decided before it (in the same round trip).
    pub(super) async fn query(
        &mut self,
        text: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Vec<tokio_postgres::Row>, StoreError> {
        let stmt = self.conn.prepare(text).await?;
        let mut rows = self.send(&[stmt], &[params.to_vec()]).await?;
        Ok(rows.pop().unwrap_or_default())
    }

    /// Candidate rows read back (each with the statement's clock first, then its `seq`).
    pub(super) fn candidates(
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

    /// The rows of `ControlSql::heads` read back: each head once (its rows come together), its
    /// grants that count, its jobs that bear on the group rules and its first due jobs (whose
    /// standing is remembered, as a candidate's).
    pub(super) fn heads_answer(
        &mut self,
        term: LeaseTerm,
        rows: &[tokio_postgres::Row],
    ) -> Result<Answer, StoreError> {
        let (mut heads, mut bearing, mut counting) = (Vec::<Head>::new(), Vec::new(), Vec::new());
        let (mut due, mut due_term) = (Vec::new(), term);
        for row in rows {
            let head = lease_ports::codec::head(
                row.try_get(0).map_err(Self::db)?,
                row.try_get(1).map_err(Self::db)?,
                row.try_get(2).map_err(Self::db)?,
                row.try_get(3).map_err(Self::db)?,
            )?;
            if heads.last() != Some(&head) {
                if let Some(n) = row.try_get::<_, Option<i64>>(4).map_err(Self::db)? {
                    let n = lease_ports::codec::count(n, "a group's grants")?;
                    counting.push((head.group.clone(), n));
                }
                heads.push(head);
            }
            due_term = self
                .store
                .clock
                .resolve_term(term, stored_now(row_clock_at(row, 5)?)?)?;
            match row
                .try_get::<_, Option<String>>(6)
                .map_err(Self::db)?
                .as_deref()
            {
                None => {}
                Some("b") => bearing.push(row::decode_with_id(row, 8)?),
                Some("d") => {
                    let seq = lease_ports::codec::seq(row.try_get(7).map_err(Self::db)?)?;
                    let (id, job) = row::decode_with_id(row, 8)?;
                    self.read.insert(id.clone(), Standing::of(&job));
                    due.push(Candidate { id, job, seq });
                }
                Some(other) => {
                    return Err(StoreError::Corrupt(
                        format!("a head's row of an unknown kind {other:?}").into(),
                    ));
                }
            }
        }
        Ok(Answer::HeadsWithStanding {
            heads,
            bearing,
            counting,
            due: Some((due_term, 1, due)),
        })
    }

    /// Candidate rows read back, with the term at the clock reading their statement made
    /// (every row of a statement carries the same one); remembers where each stood.
    pub(super) fn decoded(
        &mut self,
        term: LeaseTerm,
        rows: &[tokio_postgres::Row],
    ) -> Result<(LeaseTerm, Vec<(JobId, lease_domain::Job)>), StoreError> {
        self.decoded_at(term, rows, 1)
    }

    /// As [`Driver::decoded`], the job's id in column `at`.
    pub(super) fn decoded_at(
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
pub(super) async fn locked(
    c: &tokio_postgres::Client,
    lock: Option<&tokio_postgres::Statement>,
    queue: &str,
) -> Result<(), tokio_postgres::Error> {
    match lock {
        Some(stmt) => c.query_one(stmt, &[&queue]).await.map(drop),
        None => Ok(()),
    }
}

impl PgLeaseStore {
    /// Candidate rows read back, with the term at the clock reading their statement made
    /// (every row of a statement carries the same one).
    /// The job's id is column `at`, its columns after it.
    pub(super) fn decoded(
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
            page.push(row::decode_with_id(row, at)?);
        }
        Ok((page_term, page))
    }
}

/// How many of each head's group's first due jobs are read with the heads (`$5` of
/// `ControlSql::heads`, answered as the `1` of `Answer::HeadsWithStanding::due`): one, what
/// a claim of one job needs; a claim of more reads on.
pub(super) const DUE_WITH_HEADS: i64 = 1;

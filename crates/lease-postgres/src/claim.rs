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
use crate::tx::{clock_if, update};

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
        let mut driver = Driver {
            store: self,
            conn,
            s,
            queue,
            caller_now,
            read: std::collections::HashMap::new(),
            pending: Vec::new(),
            wrote: false,
            lock: None,
            repair: Vec::new(),
        };
        // When the settings this store last read for the queue make a walk by heads, the
        // first round trip takes the queue's turn, reads its counts and sends the walk's first
        // reads in place of a page: used if the settings read in that round trip are the same.
        let ahead = match self.seen(queue) {
            Some(seen) => Ahead::plan(&driver, claim, seen).await?,
            None => None,
        };
        let settings_stmt = conn.prepare(&self.control.settings).await?;
        let before = match &ahead {
            Some(_) => Some(Before::prepare(conn, &self.control).await?),
            None => None,
        };
        // The first round trip: BEGIN, the settings, the request that goes along, the clock
        // (when the skew is bounded, or the walk's reads go ahead in store-clock mode), the queue's settings
        // (`FOR SHARE`: a change of settings waits for this transaction), then the first page
        // of candidates, or the queue's turn, its counts and the walk's first reads.
        let first = async {
            match (&ahead, &before) {
                (Some(ahead), Some(before)) => {
                    let params: Vec<Vec<&(dyn tokio_postgres::types::ToSql + Sync)>> =
                        ahead.planned.iter().map(Planned::params).collect();
                    // The held jobs whose lease has ended are filed with the unheld ones
                    // first, by the page's statement asked for no row.
                    let q = queue.as_str();
                    let none_wanted = 0_i64;
                    let refile_params: [&(dyn tokio_postgres::types::ToSql + Sync); 3] =
                        [&q, &caller_now, &none_wanted];
                    let refile = c.query(&s.candidates, &refile_params);
                    let ((_, found), rows) = try_join(
                        try_join(refile, before.send(c, q, caller_now, ahead.needs)),
                        try_join_all(
                            ahead
                                .planned
                                .iter()
                                .zip(&params)
                                .map(|(p, v)| c.query(&p.statement, v)),
                        ),
                    )
                    .await?;
                    Ok(First::Ahead(found, rows))
                }
                _ => c
                    .query(
                        &s.candidates,
                        &[&queue.as_str(), &caller_now, &want_of(Some(limit))],
                    )
                    .await
                    .map(First::Page),
            }
        };
        let (((((_, settings), along), clock), queue_row), first) = try_join(
            try_join(
                try_join(
                    try_join(try_join(begun, c.query_one(&s.settings, &[])), alongside),
                    clock_if(
                        c,
                        s,
                        check_skew || (ahead.is_some() && caller_now.is_none()),
                    ),
                ),
                c.query_opt(&settings_stmt, &[&queue.as_str()]),
            ),
            first,
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
        self.saw(queue, &settings);
        // What was read ahead stands only under the settings it was read for.
        let (rows, mut done, mut ahead_read) = match (first, ahead) {
            (First::Page(rows), _) => (Some(rows), Found::default(), None),
            (First::Ahead(found, rows), Some(ahead)) => {
                let same = ahead.seen == settings;
                (
                    None,
                    found,
                    same.then_some((ahead.read, ahead.planned, rows)),
                )
            }
            (First::Ahead(found, _), None) => (None, found, None),
        };
        // The term at which the pause and the live leases are judged: the store's clock, read
        // by the first page's statement or in the first round trip, in store-clock mode.
        let first_term = match (rows.as_ref().and_then(|rows| rows.first()), clock) {
            (Some(row), _) => self
                .clock
                .resolve_term(term, stored_now(row_clock(row)?)?)?,
            (None, Some(now)) if ahead_read.is_some() => {
                self.clock.resolve_term(term, stored_now(now)?)?
            }
            (None, _) => term,
        };
        // A page read and found empty: nothing to claim, and no walk runs (nor takes the
        // queue's turn).
        let none = rows.as_ref().is_some_and(Vec::is_empty);
        // Under a limit or group rules, claims of the queue take turns (an advisory lock for
        // the transaction) and count its live leases (and, under a rate, forget the grants
        // expired by this claim's clock and count those of its own rate) after their turn
        // comes, so no two decide on one count; whatever of it the first round trip did not
        // do goes in one more. Without a count or a rate to read after it, the queue's turn
        // is taken in the round trip of the walk's first read instead (`Driver::lock`): the
        // statements of one connection run in order, so the read still runs after the turn.
        let mut needs = Needs::of(&settings).without(done.did);
        if none {
            // Nothing to claim: only the grants expired by now are forgotten.
            needs = Needs {
                forget: needs.forget,
                ..Needs::default()
            };
        }
        if needs.any() {
            if needs.lock && !needs.held && !needs.forget && !needs.counting {
                driver.lock = Some(conn.prepare(&self.control.lock_queue).await?);
            } else {
                let before = Before::prepare(conn, &self.control).await?;
                let now = Some(first_term.now().get());
                let found = before
                    .send(c, queue.as_str(), now, needs)
                    .await
                    .map_err(|e| error::map(e, Stage::BeforeCommit))?;
                done.merge(found);
            }
        }
        driver.wrote = done.forgot;
        let held = lease_ports::codec::count(done.held, "a queue's live leases")?;
        let counting = lease_ports::codec::count(done.counting, "a queue's grants")?;
        let at_first = ClaimNext {
            term: first_term,
            ..claim.clone()
        };
        let mut walk = ClaimWalk::in_queue(&at_first, &settings, held, counting);
        // The page read in the first round trip answers a plain walk's first read; the reads
        // sent ahead answer the walk's first read when it is theirs.
        let mut page = rows;
        while let Some(read) = walk.next_read() {
            if none && !matches!(read, Read::Page { .. }) {
                break;
            }
            driver.stage(walk.take_effects()).await?;
            let answer = match (read, page.take(), ahead_read.take()) {
                (Read::Page { .. }, Some(rows), _) => {
                    let (term, page) = driver.decoded(term, &rows)?;
                    Answer::Page(term, page)
                }
                (read, _, Some((asked, planned, rows))) if read == asked => {
                    let answers = driver.decode_planned(term, &planned, &rows)?;
                    match <[Answer; 1]>::try_from(answers) {
                        Ok([answer]) if !matches!(read, Read::Many(_)) => answer,
                        Ok(answers) => Answer::Many(answers.into()),
                        Err(answers) => Answer::Many(answers),
                    }
                }
                (read, _, _) => driver.answer(&walk, term, read).await?,
            };
            walk.answer(answer)?;
        }
        driver.stage(walk.take_effects()).await?;
        // The grants of the leases under a rate are logged with COMMIT (`Claimed::commit`).
        let grants: Vec<(Option<String>, f64)> = walk
            .grants()
            .iter()
            .map(|(g, at)| (g.as_ref().map(|g| g.as_str().to_owned()), at.get()))
            .collect();
        driver.wrote |= !grants.is_empty();
        let buried = walk.buried().to_vec();
        Ok((
            Claimed {
                leases: walk.into_leases(),
                writes: driver.pending,
                wrote: driver.wrote,
                buried,
                repair: driver.repair,
                grants,
            },
            along,
        ))
    }

    /// The settings this store last read for `queue`, if any.
    pub(crate) fn seen(&self, queue: &QueueName) -> Option<lease_domain::QueueSettings> {
        self.seen
            .lock()
            .ok()
            .and_then(|seen| seen.get(queue).cloned())
    }

    /// Keeps the settings just read for `queue` (for the next claim's reads ahead).
    fn saw(&self, queue: &QueueName, settings: &lease_domain::QueueSettings) {
        if let Ok(mut seen) = self.seen.lock() {
            if seen.get(queue) != Some(settings) {
                seen.insert(queue.clone(), settings.clone());
            }
        }
    }
}

/// The first round trip's last answer: the first page, or what was read ahead.
enum First {
    Page(Vec<tokio_postgres::Row>),
    Ahead(Found, Vec<Vec<tokio_postgres::Row>>),
}

/// The walk's first reads, planned from the settings a claim of the queue last read.
struct Ahead {
    seen: lease_domain::QueueSettings,
    needs: Needs,
    read: Read,
    planned: Vec<Planned>,
}

impl Ahead {
    /// The reads ahead of `claim` under `seen`: `None` unless they make a walk by heads whose
    /// first read can be sent without waiting for anything.
    async fn plan(
        driver: &Driver<'_>,
        claim: &ClaimNext,
        seen: lease_domain::QueueSettings,
    ) -> Result<Option<Self>, StoreError> {
        let mut probe = ClaimWalk::in_queue(claim, &seen, 0, 0);
        if !probe.by_heads() {
            return Ok(None);
        }
        let reads = match probe.next_read() {
            Some(Read::Many(reads)) => reads,
            Some(read @ (Read::Due { .. } | Read::Heads { .. } | Read::Jobs(_))) => vec![read],
            _ => return Ok(None),
        };
        let planned = driver.plan(&reads).await?;
        let read = match <[Read; 1]>::try_from(reads) {
            Ok([one]) => one,
            Err(reads) => Read::Many(reads),
        };
        Ok(Some(Self {
            needs: Needs::of(&seen),
            seen,
            read,
            planned,
        }))
    }
}

/// What a claim takes or reads before its walk, as its queue's settings ask.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Needs {
    /// The queue's turn (its advisory lock).
    lock: bool,
    /// Its live leases.
    held: bool,
    /// Its expired grants forgotten.
    forget: bool,
    /// The grants that count against its own rate.
    counting: bool,
}

impl Needs {
    fn of(settings: &lease_domain::QueueSettings) -> Self {
        Self {
            lock: settings.serializes_claims(),
            held: settings.counts_leases(),
            forget: settings.limits_rate(),
            counting: settings.rate.is_some(),
        }
    }

    /// What `self` asks that `done` has not done.
    fn without(self, done: Needs) -> Self {
        Self {
            lock: self.lock && !done.lock,
            held: self.held && !done.held,
            forget: self.forget && !done.forget,
            counting: self.counting && !done.counting,
        }
    }

    fn any(self) -> bool {
        self.lock || self.held || self.forget || self.counting
    }
}

/// What was done and found before the walk.
#[derive(Debug, Default)]
struct Found {
    did: Needs,
    held: i64,
    forgot: bool,
    counting: i64,
}

impl Found {
    fn merge(&mut self, other: Found) {
        if other.did.held {
            self.held = other.held;
        }
        if other.did.counting {
            self.counting = other.counting;
        }
        self.forgot |= other.forgot;
        self.did = Needs {
            lock: self.did.lock || other.did.lock,
            held: self.did.held || other.did.held,
            forget: self.did.forget || other.did.forget,
            counting: self.did.counting || other.did.counting,
        };
    }
}

/// The statements a claim sends before its walk, prepared.
struct Before {
    lock: tokio_postgres::Statement,
    held: tokio_postgres::Statement,
    forget: tokio_postgres::Statement,
    counting: tokio_postgres::Statement,
}

impl Before {
    async fn prepare(
        conn: &Conn,
        control: &crate::control_sql::ControlSql,
    ) -> Result<Self, StoreError> {
        Ok(Self {
            lock: conn.prepare(&control.lock_queue).await?,
            held: conn.prepare(&control.held).await?,
            forget: conn.prepare(&control.forget_expired_grants).await?,
            counting: conn.prepare(&control.counting).await?,
        })
    }

    /// Sends what `needs` asks, in this order, in one round trip: the queue's turn, its live
    /// leases at `now` (else the store's clock), its grants expired by then forgotten, the
    /// grants counting against its own rate.
    async fn send(
        &self,
        c: &tokio_postgres::Client,
        queue: &str,
        now: Option<f64>,
        needs: Needs,
    ) -> Result<Found, tokio_postgres::Error> {
        let own: [&str; 1] = [""];
        let (((), held), (forgot, counting)) = try_join(
            try_join(
                async {
                    if needs.lock {
                        c.query_one(&self.lock, &[&queue]).await.map(drop)
                    } else {
                        Ok(())
                    }
                },
                async {
                    if needs.held {
                        c.query_one(&self.held, &[&queue, &now])
                            .await
                            .and_then(|row| row.try_get::<_, i64>(0))
                    } else {
                        Ok(0)
                    }
                },
            ),
            try_join(
                async {
                    if needs.forget {
                        c.execute(&self.forget, &[&queue, &now])
                            .await
                            .map(|n| n > 0)
                    } else {
                        Ok(false)
                    }
                },
                async {
                    if needs.counting {
                        let rows = c.query(&self.counting, &[&queue, &own.as_slice()]).await?;
                        match rows.first() {
                            Some(row) => row.try_get::<_, i64>(1),
                            None => Ok(0),
                        }
                    } else {
                        Ok(0)
                    }
                },
            ),
        )
        .await?;
        Ok(Found {
            did: needs,
            held,
            forgot,
            counting,
        })
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

/// A parameter of a planned read, owned.
type Param = Box<dyn tokio_postgres::types::ToSql + Sync + Send>;

/// One read of the walk as a prepared statement and its parameters.
struct Planned {
    statement: tokio_postgres::Statement,
    values: Vec<Param>,
    /// Whether it reads heads (else candidates).
    heads: bool,
}

impl Planned {
    fn params(&self) -> Vec<&(dyn tokio_postgres::types::ToSql + Sync)> {
        self.values
            .iter()
            .map(|b| b.as_ref() as &(dyn tokio_postgres::types::ToSql + Sync))
            .collect()
    }
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
                    .map(|row| sql::decode_with_id(row, 0))
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
    async fn many(&mut self, term: LeaseTerm, reads: Vec<Read>) -> Result<Answer, StoreError> {
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
    async fn plan(&self, reads: &[Read]) -> Result<Vec<Planned>, StoreError> {
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
    fn decode_planned(
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

    /// The rows of `ControlSql::heads` read back: each head once (its rows come together), its
    /// grants that count, its jobs that bear on the group rules and its first due jobs (whose
    /// standing is remembered, as a candidate's).
    fn heads_answer(
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
                Some("b") => bearing.push(sql::decode_with_id(row, 8)?),
                Some("d") => {
                    let seq = lease_ports::codec::seq(row.try_get(7).map_err(Self::db)?)?;
                    let (id, job) = sql::decode_with_id(row, 8)?;
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

/// How many of each head's group's first due jobs are read with the heads (`$5` of
/// `ControlSql::heads`, answered as the `1` of `Answer::HeadsWithStanding::due`): one, what
/// a claim of one job needs; a claim of more reads on.
const DUE_WITH_HEADS: i64 = 1;

/// The clock reading a candidate row carries (its first column).
pub(crate) fn row_clock(row: &tokio_postgres::Row) -> Result<f64, StoreError> {
    row_clock_at(row, 0)
}

/// The clock reading a row carries in column `at`.
fn row_clock_at(row: &tokio_postgres::Row, at: usize) -> Result<f64, StoreError> {
    row.try_get(at).map_err(|e| {
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
    /// The grants to log under the queue's rates (the group, `None` for the queue's own, and
    /// when each expires), with COMMIT.
    pub(crate) grants: Vec<(Option<String>, f64)>,
}

impl Claimed {
    /// Writes `writes` (the claim's rows and whatever the caller adds), moves the heads the
    /// walk read from on, logs the grants of its leases, and commits, in one round trip (rolls
    /// back when nothing was written).
    pub(crate) async fn commit(
        &self,
        conn: &Conn,
        s: &Statements,
        control: &crate::control_sql::ControlSql,
        queue: &QueueName,
        writes: &[Encoded],
        wrote: bool,
    ) -> Result<(), StoreError> {
        if self.repair.is_empty() && self.grants.is_empty() {
            return crate::tx::commit(conn.client(), s, writes, wrote).await;
        }
        let repair = if self.repair.is_empty() {
            None
        } else {
            Some(conn.prepare(&control.repair_heads).await?)
        };
        let log = if self.grants.is_empty() {
            None
        } else {
            Some(conn.prepare(&control.log_grants).await?)
        };
        let (groups, ends): (Vec<Option<&str>>, Vec<f64>) = self
            .grants
            .iter()
            .map(|(g, at)| (g.as_deref(), *at))
            .unzip();
        let c = conn.client();
        let q = queue.as_str();
        try_join(
            try_join(
                try_join_all(
                    writes
                        .iter()
                        .map(|w| update(c, &s.update, &s.update_counted, w)),
                ),
                try_join(
                    async {
                        match &repair {
                            Some(repair) => {
                                c.query_one(repair, &[&q, &self.repair]).await.map(drop)
                            }
                            None => Ok(()),
                        }
                    },
                    async {
                        match &log {
                            Some(log) => c.execute(log, &[&q, &groups, &ends]).await.map(drop),
                            None => Ok(()),
                        }
                    },
                ),
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
            crate::tx::update(conn.client(), &s.update, &s.update_counted, &write)
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

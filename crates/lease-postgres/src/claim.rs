//! `claim_next` inside a transaction: the claim walk (`lease_ports::next::ClaimWalk`) decides,
//! its reads answered by this store's statements (candidates from the ready index or one
//! group's, `FOR UPDATE SKIP LOCKED`, in claim order; the group heads of migration 16; a
//! group's standing; the next fair turn), and the rows it decides go with its next read.

use futures::future::{try_join, try_join_all};
use lease_domain::{ClockMode, LeaseTerm, QueueName};
use lease_ports::next::{Answer, ClaimWalk, Read};
use lease_ports::{ClaimNext, Lease, StoreError};

use crate::PgLeaseStore;
use crate::connection::{Conn, Statements};
use crate::error::{self, Stage};
use crate::row::{Encoded, stored_now};
use crate::tx::{clock_if, update};
use driver::{Driver, Planned};

mod driver;

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
        let before = match &ahead {
            Some(_) => Some(Before::prepare(conn, &self.control).await?),
            None => None,
        };
        let (trip, along) = first_trip(
            &driver,
            claim,
            check_skew,
            (&ahead, &before),
            (begun, alongside),
        )
        .await?;
        let FirstTrip {
            settings,
            clock,
            queue_row,
            first,
        } = trip;
        // Every lease of this claim hands out its fence in the epoch read here.
        let term = term.in_epoch(lease_ports::codec::epoch(settings.get(3))?);
        if let Some(now) = clock {
            self.clock.resolve_term(term, stored_now(now)?)?;
        }
        let settings = match &queue_row {
            Some(row) => crate::row::decode_queue(row)?.1,
            None => lease_domain::QueueSettings::default(),
        };
        self.saw(queue, &settings);
        // What was read ahead stands only under the settings it was read for.
        let (rows, mut done, ahead_read) = match (first, ahead) {
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
        take_turn(&mut driver, &settings, none, first_term, &mut done).await?;
        driver.wrote = done.forgot;
        let held = lease_ports::codec::count(done.held, "a queue's live leases")?;
        let counting = lease_ports::codec::count(done.counting, "a queue's grants")?;
        let at_first = ClaimNext {
            term: first_term,
            ..claim.clone()
        };
        let mut walk = ClaimWalk::in_queue(&at_first, &settings, held, counting);
        walk_on(&mut driver, &mut walk, term, none, (rows, ahead_read)).await?;
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

/// Takes the queue's turn and reads its counts before the walk, as its settings ask. Under a limit or group rules, claims of the queue take turns (an advisory lock for
/// the transaction) and count its live leases (and, under a rate, forget the grants
/// expired by this claim's clock and count those of its own rate) after their turn
/// comes, so no two decide on one count; whatever of it the first round trip did not
/// do goes in one more. Without a count or a rate to read after it, the queue's turn
/// is taken in the round trip of the walk's first read instead (`Driver::lock`): the
/// statements of one connection run in order, so the read still runs after the turn.
async fn take_turn(
    driver: &mut Driver<'_>,
    settings: &lease_domain::QueueSettings,
    none: bool,
    first_term: LeaseTerm,
    done: &mut Found,
) -> Result<(), StoreError> {
    let mut needs = Needs::of(settings).without(done.did);
    if none {
        // Nothing to claim: only the grants expired by now are forgotten.
        needs = Needs {
            forget: needs.forget,
            ..Needs::default()
        };
    }
    if needs.any() {
        if needs.lock && !needs.held && !needs.forget && !needs.counting {
            driver.lock = Some(
                driver
                    .conn
                    .prepare(&driver.store.control.lock_queue)
                    .await?,
            );
        } else {
            let before = Before::prepare(driver.conn, &driver.store.control).await?;
            let now = Some(first_term.now().get());
            let found = before
                .send(driver.conn.client(), driver.queue.as_str(), now, needs)
                .await
                .map_err(|e| error::map(e, Stage::BeforeCommit))?;
            done.merge(found);
        }
    }
    Ok(())
}

/// What a claim's first round trip answers: the store's settings row (its epoch), the clock
/// when it was read, the queue's settings row, and the first page or what was read ahead.
struct FirstTrip {
    settings: tokio_postgres::Row,
    clock: Option<f64>,
    queue_row: Option<tokio_postgres::Row>,
    first: First,
}

/// The first round trip of a claim: BEGIN (when `begun` sends it), the store's settings, the
/// request that goes `alongside`, the clock when needed, the queue's settings `FOR SHARE`,
/// then the first page of candidates, or the queue's turn, its counts and the walk's reads
/// planned `ahead`.
async fn first_trip<T>(
    driver: &Driver<'_>,
    claim: &ClaimNext,
    check_skew: bool,
    (ahead, before): (&Option<Ahead>, &Option<Before>),
    (begun, alongside): (
        impl Future<Output = Result<u64, tokio_postgres::Error>>,
        impl Future<Output = Result<T, tokio_postgres::Error>>,
    ),
) -> Result<(FirstTrip, T), StoreError> {
    let (conn, s, queue, caller_now) = (driver.conn, driver.s, driver.queue, driver.caller_now);
    let c = conn.client();
    let limit = claim.limit;
    let settings_stmt = conn.prepare(&driver.store.control.settings).await?;
    // The first round trip: BEGIN, the settings, the request that goes along, the clock
    // (when the skew is bounded, or the walk's reads go ahead in store-clock mode), the queue's settings
    // (`FOR SHARE`: a change of settings waits for this transaction), then the first page
    // of candidates, or the queue's turn, its counts and the walk's first reads.
    let first = async {
        match (ahead, before) {
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
    Ok((
        FirstTrip {
            settings,
            clock,
            queue_row,
            first,
        },
        along,
    ))
}

/// The walk's first read as it was sent ahead, its planned statements and their rows.
type ReadAhead = (Read, Vec<Planned>, Vec<Vec<tokio_postgres::Row>>);

/// Runs the claim `walk` to its end inside the transaction: the page read in the first round
/// trip answers a plain walk's first read, the reads sent ahead answer the walk's first read
/// when it is theirs, and the driver answers every other read and stages every effect.
async fn walk_on(
    driver: &mut Driver<'_>,
    walk: &mut ClaimWalk,
    term: LeaseTerm,
    none: bool,
    (mut page, mut ahead_read): (Option<Vec<tokio_postgres::Row>>, Option<ReadAhead>),
) -> Result<(), StoreError> {
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
            (read, _, _) => driver.answer(walk, term, read).await?,
        };
        walk.answer(answer)?;
    }
    Ok(())
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

//! A batch of the queue loop's writes (claims, completions with the claims that follow them,
//! and holders' completions, failures and releases with none) decided set by set in Rust
//! (issue 55): one locking read of the rows the holders' writes touch and of the candidates the claims may take, every decision made by the domain
//! (`Command::decided`) and the claim engine (`ClaimWalk`), and one statement writing every
//! row with the counts they move, sent with COMMIT. Two round trips a batch, however many
//! writes it carries, and no per-job PL/pgSQL.
//!
//! The first round trip, pipelined: BEGIN; the planner settings and the epoch; the batch's
//! queues' settings (`FOR SHARE`); the completions' rows, locked in id order (two batches lock
//! in the same order, so neither waits on the other in a cycle; candidates are read
//! `SKIP LOCKED` and wait on nothing); the server's clock, read after those locks; the
//! completions' jobs that others wait on; and, per queue, one page of candidates as many as
//! its claims want together. The second: every row in one `UPDATE ... FROM unnest` and
//! COMMIT.
//!
//! What this path does not decide it declines, rolling back before anything is written, and
//! the batch runs each write alone, as before: a claim's queue with settings, a refused write
//! the audit trail records, a job finished while others wait on it (a workflow's release), a
//! decision with any other change, a request the domain refuses on its own (each caller gets
//! its own answer then). Claims share a queue's page in the batch's order; a candidate one
//! claim passes (not due by its clock) stays for the next. When the page ran out for a claim
//! that wants more and could have held more (a candidate was buried or passed), the rows
//! decided so far are written and another page is read.

use std::collections::HashMap;

use lease_domain::{ClockMode, Command, Decided, Job, JobId, LeaseTerm, Outcome, Timestamp};
use lease_ports::next::ClaimWalk;
use lease_ports::{ClaimNext, StoreError};
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use crate::PgLeaseStore;
use crate::complete_and_claim::Stepped;
use crate::connection::{Conn, Statements};
use crate::error::{self, Stage};
use crate::row;
use crate::row::{Encoded, Standing, stored_now};

/// One write of a batch: a holder's write (if any), then the claim (if any).
pub(crate) struct Write<'a> {
    pub(crate) completion: Option<(&'a JobId, &'a Command)>,
    pub(crate) claim: Option<&'a ClaimNext>,
}

/// What a batch came to.
pub(crate) enum Settled {
    /// Each write's answer, in the batch's order, after the commit.
    Answers(Vec<Stepped>),
    /// Rolled back with nothing written: each write is to run alone.
    Declined,
}

/// Why deciding stopped short of writing.
enum Stop {
    /// Something only a lone write decides: roll back, run each alone.
    Decline,
    /// The rows read cannot be taken as jobs, or the connection failed.
    Fail(StoreError),
}

impl From<StoreError> for Stop {
    fn from(e: StoreError) -> Self {
        Stop::Fail(e)
    }
}

/// The statements of a settled batch, prepared once per connection.
struct Prepared {
    s: Statements,
    queues: tokio_postgres::Statement,
    lock: tokio_postgres::Statement,
    waiting: tokio_postgres::Statement,
    update: tokio_postgres::Statement,
}

/// The rows the batch writes, one per job: the job as it stood when read (for the counts
/// the write moves) and as decided last.
#[derive(Default)]
struct Rows {
    at: HashMap<JobId, usize>,
    rows: Vec<(JobId, Standing, Job, Option<lease_domain::Attempt>)>,
}

impl Rows {
    /// Puts the row of `id` as decided last over `before`, with the attempt the decision
    /// ended, if any. A second attempt ended in one batch declines it (the statement keeps one
    /// a row; a job's lease ends once a batch but for a caller's race no batch needs).
    fn put(
        &mut self,
        id: &JobId,
        before: &Job,
        next: Job,
        ended: Option<lease_domain::Attempt>,
    ) -> Result<(), Stop> {
        match self.at.get(id) {
            Some(&i) => {
                let row = &mut self.rows[i];
                row.2 = next;
                if ended.is_some() {
                    if row.3.is_some() {
                        return Err(Stop::Decline);
                    }
                    row.3 = ended;
                }
            }
            None => {
                self.at.insert(id.clone(), self.rows.len());
                self.rows
                    .push((id.clone(), Standing::of(before), next, ended));
            }
        }
        Ok(())
    }

    fn has(&self, id: &JobId) -> bool {
        self.at.contains_key(id)
    }

    /// The rows as the update's columns; the rows are then written (a later page's rows
    /// start afresh, their standing read again).
    fn take(&mut self) -> Vec<Encoded> {
        self.at.clear();
        std::mem::take(&mut self.rows)
            .into_iter()
            .map(|(id, before, next, ended)| {
                Encoded::from_to(&id, Some(before), &next).ending(ended.as_ref())
            })
            .collect()
    }
}

/// A decision of the batch to observe once it commits: the command, the row it met, and what
/// the domain decided.
type Observed = (Command, Option<Job>, Decided);

impl PgLeaseStore {
    /// Decides and writes `batch` in one transaction on `conn` (see the module's text).
    pub(crate) async fn settle(
        &self,
        conn: &Conn,
        batch: &[Write<'_>],
    ) -> Result<Settled, StoreError> {
        let p = Prepared {
            s: Statements::prepare(conn, &self.sql).await?,
            queues: conn.prepare(&self.sql.settle_queues).await?,
            lock: conn.prepare(&self.sql.settle_lock).await?,
            waiting: conn.prepare(&self.sql.settle_waiting).await?,
            update: conn.prepare(&self.sql.settle_update).await?,
        };
        match self.settle_on(conn, &p, batch).await {
            Ok(answers) => Ok(Settled::Answers(answers)),
            Err(Stop::Decline) => {
                conn.client()
                    .execute(&p.s.rollback, &[])
                    .await
                    .map_err(|e| error::map(e, Stage::BeforeCommit))?;
                Ok(Settled::Declined)
            }
            Err(Stop::Fail(e)) => Err(e),
        }
    }

    async fn settle_on(
        &self,
        conn: &Conn,
        p: &Prepared,
        batch: &[Write<'_>],
    ) -> Result<Vec<Stepped>, Stop> {
        let c = conn.client();
        let store_clock = matches!(self.clock, ClockMode::Store);
        let ids: Vec<&str> = batch
            .iter()
            .filter_map(|w| w.completion.map(|(id, _)| id.as_str()))
            .collect();
        let queues = wanted_by_queue(batch, store_clock);
        let names: Vec<&str> = queues.iter().map(|(q, ..)| *q).collect();
        let pages =
            futures::future::try_join_all(queues.iter().filter(|(_, want, _)| *want > 0).map(
                |(q, want, now)| async move {
                    let params: [&(dyn ToSql + Sync); 3] = [q, now, want];
                    c.query(&p.s.candidates, &params).await
                },
            ));
        let no_ids = ids.is_empty();
        let names_param: [&(dyn ToSql + Sync); 1] = [&names];
        // Every statement of the first round trip is sent before any answer is awaited.
        let (_, settings, with_settings, locked, clock, waiting, pages) = futures::try_join!(
            c.execute(&p.s.begin, &[]),
            c.query_one(&p.s.settings, &[]),
            c.query_one(&p.queues, &names_param),
            async {
                if no_ids {
                    Ok(Vec::new())
                } else {
                    c.query(&p.lock, &[&ids]).await
                }
            },
            async {
                if no_ids || !store_clock {
                    Ok(None)
                } else {
                    c.query_one(&p.s.clock, &[]).await.map(Some)
                }
            },
            async {
                if no_ids {
                    Ok(Vec::new())
                } else {
                    c.query(&p.waiting, &[&ids]).await
                }
            },
            pages,
        )
        .map_err(self.declines(Stage::BeforeCommit))?;
        let epoch = lease_ports::codec::epoch(settings.get(3))?;
        if with_settings.get::<_, i64>(0) > 0 {
            return Err(Stop::Decline);
        }
        let mut current: HashMap<JobId, Job> = locked
            .iter()
            .map(|row| row::decode_with_id(row, 0))
            .collect::<Result<_, _>>()?;
        let waited_on: Vec<String> = waiting.iter().map(|row| row.get(0)).collect();
        let clock = match clock {
            Some(row) => Some(stored_now(row.get(0))?),
            None => None,
        };
        let mut rows = Rows::default();
        let (outcomes, observed) =
            self.decide_completions(batch, clock, &waited_on, &mut current, &mut rows)?;
        // The claims, queue by queue, each taking from its queue's page in the batch's order.
        let mut walks: Vec<Option<ClaimWalk>> = batch.iter().map(|_| None).collect();
        let mut buried = Vec::new();
        let mut pages = pages.into_iter();
        for (queue, want, now) in &queues {
            if *want <= 0 {
                continue;
            }
            let mut page = pages.next().unwrap_or_default();
            let mut asked = *want;
            let mut passed = std::collections::HashSet::new();
            loop {
                let (read, full) = take_page(&page, asked, &current, &rows)?;
                let shared = self.share(batch, queue, epoch, read, &mut walks, &mut rows)?;
                buried.extend(shared.buried);
                let mut progressed = shared.wrote;
                for id in shared.passed {
                    progressed |= passed.insert(id);
                }
                if shared.short == 0 || !full || !progressed {
                    break;
                }
                // The page was full and a candidate was buried or passed: write what is
                // decided (the next page must not read it again), then read on, past what
                // was passed.
                let written = rows.take();
                self.write_rows(c, p, &written).await?;
                asked = shared
                    .short
                    .saturating_add(i64::try_from(passed.len()).unwrap_or(i64::MAX));
                let params: [&(dyn ToSql + Sync); 3] = [queue, now, &asked];
                page = c
                    .query(&p.s.candidates, &params)
                    .await
                    .map_err(self.declines(Stage::BeforeCommit))?;
            }
        }
        // Jobs buried with others waiting on them are settled by a lone write.
        if !buried.is_empty() {
            let buried: Vec<&str> = buried.iter().map(JobId::as_str).collect();
            let waiting = c
                .query(&p.waiting, &[&buried])
                .await
                .map_err(self.declines(Stage::BeforeCommit))?;
            if !waiting.is_empty() {
                return Err(Stop::Decline);
            }
        }
        let written = rows.take();
        let columns = row::Columns::of(&written);
        let params = columns.params();
        let (count, _) = futures::try_join!(
            async {
                if written.is_empty() {
                    Ok(None)
                } else {
                    c.query_one(&p.update, &params).await.map(Some)
                }
            },
            c.execute(&p.s.commit, &[]),
        )
        .map_err(self.declines(Stage::Commit))?;
        check_written(count, written.len())?;
        for (command, stored, decided) in &observed {
            lease_ports::observe::decided(command, stored.as_ref(), decided);
        }
        Ok(outcomes
            .into_iter()
            .zip(walks)
            .map(|(outcome, walk)| Stepped {
                outcome,
                leases: walk.map(ClaimWalk::into_leases).unwrap_or_default(),
            })
            .collect())
    }

    /// Decides the completions of `batch` in its order (an id twice sees its first's decision)
    /// against the `current` rows, putting each decided row in `rows`; declines a completion
    /// whose changes a batch cannot write. Answers each write's outcome (`None` without a
    /// completion) and what to observe once the batch commits.
    fn decide_completions(
        &self,
        batch: &[Write<'_>],
        clock: Option<Timestamp>,
        waited_on: &[String],
        current: &mut HashMap<JobId, Job>,
        rows: &mut Rows,
    ) -> Result<(Vec<Option<Outcome>>, Vec<Observed>), Stop> {
        let mut outcomes = Vec::with_capacity(batch.len());
        let mut observed = Vec::new();
        for w in batch {
            let Some((id, command)) = w.completion else {
                outcomes.push(None);
                continue;
            };
            let command = match clock {
                Some(now) => command.at(now).map_err(|_| Stop::Decline)?,
                None => command.clone(),
            };
            let stored = current.get(id).cloned();
            let decided = command.decided(id, stored.as_ref(), None);
            for change in &decided.changes {
                match change {
                    lease_domain::Change::Row { insert: false, .. }
                    | lease_domain::Change::Attempt(_) => {}
                    lease_domain::Change::Release(..)
                        if !waited_on.iter().any(|w| w == id.as_str()) => {}
                    lease_domain::Change::Refused(_) if self.audit.is_none() => {}
                    _ => return Err(Stop::Decline),
                }
            }
            if let (Some(before), Some(next)) = (&stored, decided.row()) {
                rows.put(id, before, next.clone(), decided.attempt().cloned())?;
                current.insert(id.clone(), next.clone());
            }
            outcomes.push(Some(decided.outcome.clone()));
            observed.push((command, stored, decided));
        }
        Ok((outcomes, observed))
    }

    /// Shares one page of `queue`'s candidates among the batch's claims of it, in order.
    fn share(
        &self,
        batch: &[Write<'_>],
        queue: &str,
        epoch: lease_domain::Epoch,
        (clock, mut pool): Page,
        walks: &mut [Option<ClaimWalk>],
        rows: &mut Rows,
    ) -> Result<Shared, Stop> {
        let mut shared = Shared::default();
        for (w, slot) in batch.iter().zip(walks.iter_mut()) {
            let Some(claim) = w.claim.filter(|c| c.queue.as_str() == queue && c.limit > 0) else {
                continue;
            };
            let walk = match slot {
                Some(walk) => walk,
                None => {
                    let term = self.term_of(claim, clock, epoch)?;
                    slot.insert(
                        ClaimWalk::new(&claim.owner, claim.limit, term)
                            .with_tokens(claim.tokens.clone()),
                    )
                }
            };
            let term = walk.term();
            let mut i = 0;
            while i < pool.len() && !walk.is_full() {
                let wrote = walk.page(term, vec![pool[i].clone()]);
                if wrote.is_empty() {
                    // Passed (not due by this claim's clock): it stays for the next claim.
                    shared.passed.push(pool[i].0.clone());
                    i += 1;
                    continue;
                }
                let (_, before) = pool.remove(i);
                for (id, next) in wrote {
                    if next.finished().is_some() {
                        shared.buried.push(id.clone());
                    }
                    let ended = before.ended_attempt(None, &next);
                    rows.put(&id, &before, next, ended)?;
                    shared.wrote = true;
                }
            }
            let short = claim.limit.saturating_sub(walk.leased());
            shared.short = shared
                .short
                .saturating_add(i64::try_from(short).unwrap_or(i64::MAX));
        }
        Ok(shared)
    }

    /// What a server error does to a batch (it rolled back: the writes run alone), and
    /// what a lost connection does at `stage`.
    fn declines(&self, stage: Stage) -> impl Fn(tokio_postgres::Error) -> Stop {
        move |e| {
            if error::is_connection_loss(&e) {
                Stop::Fail(error::map(e, stage))
            } else {
                Stop::Decline
            }
        }
    }

    /// A claim's term: at the page's clock reading in store-clock mode, in the epoch read.
    fn term_of(
        &self,
        claim: &ClaimNext,
        clock: Option<f64>,
        epoch: lease_domain::Epoch,
    ) -> Result<LeaseTerm, Stop> {
        let term = claim.term.in_epoch(epoch);
        match clock {
            Some(now) => self
                .clock
                .resolve_term(term, stored_now(now)?)
                .map_err(|_| Stop::Decline),
            None => Ok(term),
        }
    }

    /// Writes `written` (rows decided before the next page is read).
    async fn write_rows(
        &self,
        c: &tokio_postgres::Client,
        p: &Prepared,
        written: &[Encoded],
    ) -> Result<(), Stop> {
        if written.is_empty() {
            return Ok(());
        }
        let columns = row::Columns::of(written);
        let row = c
            .query_one(&p.update, &columns.params())
            .await
            .map_err(self.declines(Stage::BeforeCommit))?;
        check_written(Some(row), written.len())
    }
}

/// A page of candidates: its statement's clock reading (none when it is empty), and the jobs.
type Page = (Option<f64>, Vec<(JobId, Job)>);

/// What sharing a page came to.
#[derive(Default)]
struct Shared {
    /// How many leases the queue's claims still want.
    short: i64,
    /// Whether a candidate was leased or buried.
    wrote: bool,
    /// The candidates passed by every claim.
    passed: Vec<JobId>,
    /// The jobs buried.
    buried: Vec<JobId>,
}

/// The candidates of a page read for `asked` leases, as jobs, with the page's clock reading,
/// and whether more may be behind them (the page came back full). A candidate the batch's
/// completions read is taken as they decided it (a completion refused leaves it as read; one
/// applied between the completion's clock reading and the page's leaves it finished, so no
/// claim takes it).
fn take_page(
    page: &[Row],
    asked: i64,
    current: &HashMap<JobId, Job>,
    rows: &Rows,
) -> Result<(Page, bool), Stop> {
    let full = i64::try_from(page.len()).unwrap_or(i64::MAX) >= asked;
    let clock = page.first().map(crate::claim::row_clock).transpose()?;
    let mut read = Vec::with_capacity(page.len());
    for row in page {
        let (id, mut job) = row::decode_with_id(row, 1)?;
        // A job the batch's completions read is decided as they left it.
        if let Some(decided) = current.get(&id) {
            let payload = job.payload.take();
            job = decided.clone();
            job.payload = payload;
        }
        if !rows.has(&id) || current.contains_key(&id) {
            read.push((id, job));
        }
    }
    Ok(((clock, read), full))
}

/// Checks the update wrote every row it was sent (each was locked by this transaction).
fn check_written(count: Option<Row>, sent: usize) -> Result<(), Stop> {
    let wrote = count.map_or(0, |row| row.get::<_, i64>(0));
    if usize::try_from(wrote).ok() == Some(sent) {
        Ok(())
    } else {
        Err(Stop::Fail(StoreError::Corrupt(
            format!("a batch's update wrote {wrote} of the {sent} rows it had locked").into(),
        )))
    }
}

/// The queues of `batch`'s claims in the order their claims first come, each with what its
/// claims want and (caller's clocks) the latest of their clocks, at which its page is read: a
/// claim whose clock is earlier passes the candidates not yet due by it.
fn wanted_by_queue<'a>(batch: &[Write<'a>], store_clock: bool) -> Vec<(&'a str, i64, Option<f64>)> {
    let mut queues: Vec<(&str, i64, Option<f64>)> = Vec::new();
    for claim in batch.iter().filter_map(|w| w.claim) {
        let q = claim.queue.as_str();
        let want = i64::try_from(claim.limit).unwrap_or(i64::MAX);
        let now = (!store_clock).then(|| claim.term.now().get());
        match queues.iter_mut().find(|(name, ..)| *name == q) {
            Some((_, total, at)) => {
                *total = total.saturating_add(want);
                // Caller's clocks: the page is read at the latest; a claim whose clock
                // is earlier passes the candidates not yet due by it.
                *at = match (*at, now) {
                    (Some(a), Some(b)) => Some(a.max(b)),
                    (a, b) => a.or(b),
                };
            }
            None => queues.push((q, want, now)),
        }
    }
    queues
}

//! The PostgreSQL rows of the report: claim, claim + complete, and claim-next + complete
//! through the store, against a raw tokio-postgres loop of the same statements (one statement
//! per round trip, as a hand-written loop does), with 1, 16 and 64 callers in one process and
//! spread over four; and the round trips each operation makes, counted by a relay between the
//! client and the server.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use lease_domain::{JobId, JobResult, LeaseTerm, Owner, QueueName};
use lease_ports::LeaseStore;
use lease_postgres::{PgLeaseStore, PgOptions, ScratchDatabase, StatementTexts};

use crate::harness::{
    Caller, Plan, Row, Run, SLOT_MS, measure, median, next_complete_loop, summarize, timed,
};

/// What one measured operation does.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Op {
    Claim,
    ClaimComplete,
    NextComplete,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Claim => "claim",
            Op::ClaimComplete => "claim + complete",
            Op::NextComplete => "claim-next + complete",
        }
    }

    fn parse(text: &str) -> Op {
        match text {
            "claim" => Op::Claim,
            "claim + complete" => Op::ClaimComplete,
            _ => Op::NextComplete,
        }
    }
}

/// Jobs one process's run may need: more than it can finish in its window (under 10,000
/// operations a second on this kind of machine; 4,000 was the bound before the generic plans
/// and ran out).
fn jobs_for(window: Duration) -> u64 {
    u64::try_from(window.as_millis()).unwrap_or(1000) * 12 + 500
}

/// Makes `n` pending jobs named `{prefix}{k}` in one statement: in queue `q` for claim-next,
/// elsewhere for the claims by id, whose leases would otherwise crowd the front of `q`.
fn make_jobs(url: &str, prefix: &str, n: u64, op: Op) {
    let queue = if op == Op::NextComplete { "q" } else { "by-id" };
    execute(
        url,
        &format!(
            "INSERT INTO lease.jobs(id, queue) SELECT '{prefix}' || g, '{queue}' \
             FROM generate_series(0, {}) g",
            n.saturating_sub(1)
        ),
    );
}

/// Runs `sql` on a connection of its own.
fn execute(url: &str, sql: &str) {
    rt().block_on(async {
        let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .expect("connect");
        tokio::spawn(conn);
        client.batch_execute(sql).await.expect("statement");
    });
}

/// `claim_next(limit 1)` latency with no live lease, and with [`crate::live_leases`] live
/// leases ahead of the next due job (taken through the store, outlasting the run); 1,000
/// pending jobs behind them. Each measured lease lasts one tick, so it has ended (and is found
/// again) by the next call.
fn live_lease_rows(plan: &Plan, url: &str, rows: &mut Vec<Row>) {
    let pending = 1_000_u64;
    for live in [0, crate::live_leases(plan)] {
        let queue = format!("live-{live}");
        execute(
            url,
            &format!(
                "INSERT INTO lease.jobs(id, queue, max_attempts) SELECT '{queue}-' || g, \
                 '{queue}', 1000000000 FROM generate_series(0, {}) g; ANALYZE lease.jobs",
                live + pending - 1
            ),
        );
        let runs: Vec<Run> = rt().block_on(async {
            let store = PgLeaseStore::open(url, PgOptions::default())
                .await
                .expect("open");
            let q = QueueName::new(queue.clone()).expect("queue");
            let (holder, me) = (
                Owner::new("holder").expect("owner"),
                Owner::new("w").expect("owner"),
            );
            let mut held = 0;
            while held < live {
                let want = usize::try_from((live - held).min(1_000)).unwrap_or(1_000);
                let term = LeaseTerm::new(0.0, 1e12).expect("term");
                let taken = store
                    .claim_next(&q, &holder, term, want)
                    .await
                    .expect("take");
                held += u64::try_from(taken.len()).unwrap_or(0);
            }
            let runs =
                claim_each_tick(plan, &store, &q, &me, "a due job behind the live leases").await;
            store.close();
            runs
        });
        rows.push(summarize(
            &format!("pg claim_next, {live} live leases ahead, {pending} pending jobs"),
            1,
            live + pending,
            &runs,
            false,
        ));
    }
}

/// The group rules on PostgreSQL, as [`crate::claim_next_groups`] measures them on SQLite:
/// `claim_next(limit 1)` on a queue of many groups (100,000, and a backlog of 1,000,000 in one
/// of them, first in claim order; 200 and 2,000 in the smoke pass), without a rule (each call
/// leases the backlog's head again), then with the backlog's group held each way a group is
/// held (`--per-group 1` and its head leased, `--ordered` and its head running, paused,
/// throttled by a rate per group whose window its grants fill), where each call must reach
/// past the whole backlog to another group: the rows issue 54's group heads are to bring
/// within 1.5x of the first. Each measured lease lasts one tick, so it has ended by the next
/// call.
fn group_rows(plan: &Plan, url: &str, rows: &mut Vec<Row>) {
    let (groups, backlog) = if plan.big_table > 10_000 {
        (100_000_u64, 1_000_000_u64)
    } else {
        (200, 2_000)
    };
    let total = groups + backlog;
    // The backlog first (claim order is enqueue order here), then the groups, 10,000 a
    // transaction: 100,000 new groups in one ran the server out of lock slots ("out of shared
    // memory", `max_locks_per_transaction`) in the trigger that keeps the groups' turns.
    execute(
        url,
        &format!(
            "INSERT INTO lease.jobs(id, queue, max_attempts, grp) SELECT 'grp-' || g, 'groups', \
             1000000000, 'backlog' FROM generate_series(0, {}) g",
            backlog - 1
        ),
    );
    let mut from = backlog;
    while from < total {
        let to = (from + 10_000).min(total);
        execute(
            url,
            &format!(
                "INSERT INTO lease.jobs(id, queue, max_attempts, grp) SELECT 'grp-' || g, \
                 'groups', 1000000000, 'g' || g FROM generate_series({from}, {}) g",
                to - 1
            ),
        );
        from = to;
    }
    execute(url, "ANALYZE lease.jobs");
    let rules: [(&str, &str, bool); 5] = [
        ("no group rule", "", false),
        (
            "--per-group 1, its group full",
            "INSERT INTO lease.queues(queue, per_group) VALUES ('groups', 1);",
            true,
        ),
        (
            "--ordered, its group running",
            "INSERT INTO lease.queues(queue, ordered) VALUES ('groups', true);",
            true,
        ),
        (
            "a paused group",
            "INSERT INTO lease.queues(queue) VALUES ('groups'); \
             INSERT INTO lease.group_pauses(queue, grp, until) VALUES ('groups', 'backlog', NULL);",
            false,
        ),
        (
            "--rate-per-group 10000/1h, its group throttled (10000 grants counting)",
            "INSERT INTO lease.queues(queue, group_rate_count, group_rate_period) \
             VALUES ('groups', 10000, 3600); \
             INSERT INTO lease.grants(queue, grp, expires) \
             SELECT 'groups', 'backlog', 1e12 FROM generate_series(1, 10000); \
             INSERT INTO lease.grant_counts(queue, grp, n) VALUES ('groups', 'backlog', 10000);",
            false,
        ),
    ];
    for (rule, settings, hold_head) in rules {
        // Every lease and grant of the run before ends; the attempts start again.
        execute(
            url,
            &format!(
                "UPDATE lease.jobs SET owner = NULL, until = 0, leased_until = NULL, attempts = 0 \
                 WHERE queue = 'groups' AND (owner IS NOT NULL OR attempts > 0 \
                 OR leased_until IS NOT NULL); DELETE FROM lease.grants; \
                 DELETE FROM lease.grant_counts; DELETE FROM lease.group_pauses; \
                 DELETE FROM lease.queues WHERE queue = 'groups'; {settings}"
            ),
        );
        let runs: Vec<Run> = rt().block_on(async {
            let store = PgLeaseStore::open(url, PgOptions::default())
                .await
                .expect("open");
            let q = QueueName::new("groups").expect("queue");
            let (holder, me) = (
                Owner::new("holder").expect("owner"),
                Owner::new("w").expect("owner"),
            );
            if hold_head {
                let term = LeaseTerm::new(0.0, 1e12).expect("term");
                let held = store.claim_next(&q, &holder, term, 1).await.expect("hold");
                assert_eq!(held.len(), 1, "the backlog's head is leased");
                assert_eq!(
                    held[0].group.as_ref().map(|g| g.as_str()),
                    Some("backlog"),
                    "the backlog's group is held"
                );
            }
            let leased = format!("{rule}: a job of the queue is leased");
            let runs = claim_each_tick(plan, &store, &q, &me, &leased).await;
            store.close();
            runs
        });
        rows.push(summarize(
            &format!("pg claim_next, {groups} groups and a backlog of {backlog} in one, {rule}"),
            1,
            total,
            &runs,
            false,
        ));
    }
}

/// The group rows alone (`-- --groups-only` runs them after SQLite's), in a scratch database.
pub fn group_rows_only(plan: &Plan, rows: &mut Vec<Row>) {
    if let Some(db) = scratch_lease_database() {
        group_rows(plan, db.url(), rows);
    }
}

/// `plan.runs` windows of `claim_next(limit 1)` by `me` on `q`, one call a tick of a clock
/// that starts at 1, each lease lasting half a tick (so it has ended by the next call); each
/// call must lease one job (`leased` says which).
async fn claim_each_tick(
    plan: &Plan,
    store: &PgLeaseStore,
    q: &QueueName,
    me: &Owner,
    leased: &str,
) -> Vec<Run> {
    let mut tick = 1.0;
    let mut runs = Vec::new();
    for _ in 0..plan.runs {
        let mut me_caller = Caller::default();
        let start = Instant::now();
        while start.elapsed() < plan.window {
            let term = LeaseTerm::new(tick, 0.5).expect("term");
            tick += 1.0;
            let began = Instant::now();
            let leases = store.claim_next(q, me, term, 1).await.expect("claim_next");
            me_caller.latencies.push(began.elapsed());
            assert_eq!(leases.len(), 1, "{leased}");
        }
        runs.push(Run {
            callers: vec![me_caller],
            wall: start.elapsed(),
        });
    }
    runs
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// The raw loop: one connection per caller, statements prepared once, each awaited in turn.
struct Raw {
    client: tokio_postgres::Client,
    begin: tokio_postgres::Statement,
    commit: tokio_postgres::Statement,
    lock: tokio_postgres::Statement,
    claim: tokio_postgres::Statement,
    complete: tokio_postgres::Statement,
    candidates: tokio_postgres::Statement,
}

impl Raw {
    async fn connect(url: &str) -> Raw {
        let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .expect("connect");
        tokio::spawn(conn);
        // The store's planner settings for claim-next, so that both run the same plans.
        client
            .batch_execute(&format!(
                "SET synchronous_commit = on; SET {}",
                lease_postgres::CLAIM_NEXT_SETTINGS.join("; SET ")
            ))
            .await
            .expect("set");
        let sql = StatementTexts::new("lease");
        let prepare = |q: String| {
            let client = &client;
            async move { client.prepare(&q).await.expect("prepare") }
        };
        Raw {
            begin: prepare("BEGIN".into()).await,
            commit: prepare("COMMIT".into()).await,
            lock: prepare(sql.lock.clone()).await,
            claim: prepare(
                "UPDATE lease.jobs SET owner = $2, until = $3, leased_until = $3, fence = fence + 1 \
                 WHERE id = $1"
                    .into(),
            )
            .await,
            complete: prepare(
                "UPDATE lease.jobs SET done = true, result = $2, result_fence = fence, \
                 leased_until = NULL WHERE id = $1"
                    .into(),
            )
            .await,
            candidates: prepare(sql.candidates.clone()).await,
            client,
        }
    }

    async fn tx(
        &self,
        job: &str,
        write: &tokio_postgres::Statement,
        value: &(dyn tokio_postgres::types::ToSql + Sync),
        until: Option<f64>,
    ) {
        let c = &self.client;
        c.execute(&self.begin, &[]).await.expect("begin");
        c.query_opt(&self.lock, &[&job]).await.expect("lock");
        match until {
            Some(until) => c
                .execute(write, &[&job, value, &until])
                .await
                .expect("write"),
            None => c.execute(write, &[&job, value]).await.expect("write"),
        };
        c.execute(&self.commit, &[]).await.expect("commit");
    }

    async fn run(&self, op: Op, job: &str, now: f64) {
        match op {
            Op::Claim => self.tx(job, &self.claim, &"w", Some(now + 1e9)).await,
            Op::ClaimComplete => {
                self.tx(job, &self.claim, &"w", Some(now + 1e9)).await;
                self.tx(job, &self.complete, &"r", None).await;
            }
            Op::NextComplete => {
                let c = &self.client;
                c.execute(&self.begin, &[]).await.expect("begin");
                let rows = c
                    .query(&self.candidates, &[&"q", &Some(now), &1_i64])
                    .await
                    .expect("candidates");
                let id: Option<String> = rows.first().map(|r| r.get(1));
                if let Some(id) = &id {
                    c.execute(&self.claim, &[id, &"w", &(now + 1e9)])
                        .await
                        .expect("claim");
                }
                c.execute(&self.commit, &[]).await.expect("commit");
                if let Some(id) = id {
                    self.tx(&id, &self.complete, &"r", None).await;
                }
            }
        }
    }
}

async fn adapter_op(store: &PgLeaseStore, op: Op, job: &JobId, now: f64) {
    let me = Owner::new("w").expect("owner");
    let term = LeaseTerm::new(now, 1e9).expect("term");
    let result = JobResult::new("r").expect("result");
    match op {
        Op::Claim => {
            store.claim(job, &me, term).await.expect("claim").ok();
        }
        Op::ClaimComplete => {
            let fence = store
                .claim(job, &me, term)
                .await
                .expect("claim")
                .expect("granted");
            store
                .complete(job, &me, fence, term.now(), &result)
                .await
                .expect("complete")
                .expect("accepted");
        }
        Op::NextComplete => {
            let q = QueueName::new("q").expect("queue");
            let leases = store
                .claim_next(&q, &me, term, 1)
                .await
                .expect("claim next");
            for lease in leases {
                store
                    .complete(&lease.job, &me, lease.fence, term.now(), &result)
                    .await
                    .expect("complete")
                    .expect("accepted");
            }
        }
    }
}

/// Runs `callers` tasks in this process for `window`, through the store or raw, on jobs
/// `{prefix}{k}` drawn from a shared counter; returns each caller's latencies.
fn run_here(url: &str, op: Op, raw: bool, callers: usize, window: Duration, prefix: &str) -> Run {
    make_jobs(url, prefix, jobs_for(window), op);
    let runtime = rt();
    runtime.block_on(async {
        let store = if raw {
            None
        } else {
            let options = PgOptions {
                pool_size: callers,
                ..PgOptions::default()
            };
            Some(Arc::new(
                PgLeaseStore::open(url, options).await.expect("open"),
            ))
        };
        let next = Arc::new(AtomicU64::new(0));
        let mut raws = Vec::new();
        if raw {
            for _ in 0..callers {
                raws.push(Some(Raw::connect(url).await));
            }
        }
        // Warm-up, untimed: the pool opens its connections and each prepares its statements.
        if let Some(store) = &store {
            let me = Owner::new("warm-up").expect("owner");
            let term = LeaseTerm::new(0.0, 1.0).expect("term");
            let ids: Vec<JobId> = (0..callers)
                .map(|c| JobId::new(format!("warm-up-{c}")).expect("id"))
                .collect();
            futures::future::join_all(ids.iter().map(|id| store.claim(id, &me, term))).await;
            let q = QueueName::new("warm-up").expect("queue");
            futures::future::join_all((0..callers).map(|_| store.claim_next(&q, &me, term, 1)))
                .await;
        }
        // A logical clock: claims on expired leases never wait on time.
        let clock = Arc::new(AtomicU64::new(1));
        let start = Instant::now();
        let mut tasks = tokio::task::JoinSet::new();
        for c in 0..callers {
            let (store, next, clock) = (store.clone(), Arc::clone(&next), Arc::clone(&clock));
            let raw_client = raws.get_mut(c).and_then(Option::take);
            let prefix = prefix.to_owned();
            tasks.spawn(async move {
                let mut me = Caller::default();
                while start.elapsed() < window {
                    let k = next.fetch_add(1, Ordering::Relaxed);
                    let job = format!("{prefix}{k}");
                    let now = clock.fetch_add(2, Ordering::Relaxed) as f64;
                    let began = Instant::now();
                    match (&store, &raw_client) {
                        (Some(store), _) => {
                            adapter_op(store, op, &JobId::new(job).expect("id"), now).await;
                        }
                        (None, Some(raw)) => raw.run(op, &job, now).await,
                        (None, None) => unreachable!("a caller has the store or a raw client"),
                    }
                    me.latencies.push(began.elapsed());
                    let slot = usize::try_from(start.elapsed().as_millis() / SLOT_MS).unwrap_or(0);
                    if me.per_slot.len() <= slot {
                        me.per_slot.resize(slot + 1, 0);
                    }
                    me.per_slot[slot] += 1;
                }
                me
            });
        }
        let mut all = Vec::new();
        while let Some(done) = tasks.join_next().await {
            all.push(done.expect("caller"));
        }
        if let Some(store) = store {
            store.close();
        }
        Run {
            callers: all,
            wall: start.elapsed(),
        }
    })
}

/// The same, spread over `processes` child processes started at once.
fn run_spread(
    url: &str,
    op: Op,
    raw: bool,
    callers: usize,
    processes: usize,
    window: Duration,
    prefix: &str,
) -> Run {
    if processes == 1 {
        return run_here(url, op, raw, callers, window, prefix);
    }
    let start = Instant::now();
    let children: Vec<_> = (0..processes)
        .map(|p| {
            Command::new(std::env::current_exe().expect("exe"))
                .env("LEASE_BENCH_PG_CHILD", "1")
                .env("LEASE_BENCH_PG_URL", url)
                .env("LEASE_BENCH_PG_OP", op.name())
                .env("LEASE_BENCH_PG_RAW", if raw { "1" } else { "0" })
                .env("LEASE_BENCH_PG_CALLERS", (callers / processes).to_string())
                .env("LEASE_BENCH_PG_WINDOW_MS", window.as_millis().to_string())
                .env("LEASE_BENCH_PG_PREFIX", format!("{prefix}p{p}-"))
                .stdout(Stdio::piped())
                .spawn()
                .expect("spawn")
        })
        .collect();
    let mut callers_out = Vec::new();
    for child in children {
        let out = child.wait_with_output().expect("child");
        assert!(out.status.success(), "a bench child failed");
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let latencies: Vec<Duration> = line
                .split(' ')
                .filter(|t| !t.is_empty())
                .map(|t| Duration::from_nanos(t.parse().expect("ns")))
                .collect();
            // Slots are not reported across processes; each call counts in one slot.
            callers_out.push(Caller {
                per_slot: Vec::new(),
                latencies,
            });
        }
    }
    Run {
        callers: callers_out,
        wall: start
            .elapsed()
            .min(window + Duration::from_millis(50))
            .max(window),
    }
}

/// The child side of [`run_spread`]: prints one line of latencies (ns) per caller.
pub fn child() -> bool {
    if std::env::var_os("LEASE_BENCH_PG_CHILD").is_none() {
        return false;
    }
    let var = |n: &str| std::env::var(n).expect(n);
    let window = Duration::from_millis(var("LEASE_BENCH_PG_WINDOW_MS").parse().expect("ms"));
    let run = run_here(
        &var("LEASE_BENCH_PG_URL"),
        Op::parse(&var("LEASE_BENCH_PG_OP")),
        var("LEASE_BENCH_PG_RAW") == "1",
        var("LEASE_BENCH_PG_CALLERS").parse().expect("callers"),
        window,
        &var("LEASE_BENCH_PG_PREFIX"),
    );
    let mut out = std::io::stdout().lock();
    for caller in run.callers {
        let line: Vec<String> = caller
            .latencies
            .iter()
            .map(|d| d.as_nanos().to_string())
            .collect();
        let _ = writeln!(out, "{}", line.join(" "));
    }
    true
}

/// A relay between clients and the server that counts round trips (each time a client sends
/// after the server has answered, one more exchange began) and the statements clients send
/// (the protocol's Execute and Query messages).
struct Relay {
    port: u16,
    exchanges: Arc<AtomicU64>,
    statements: Arc<AtomicU64>,
}

/// Reads the messages a client sends, as they arrive in pieces, counting Execute (`E`) and
/// Query (`Q`) messages. Before the startup message (and any 8-byte SSL or GSS request before
/// it) messages carry no type byte.
#[derive(Default)]
struct ClientMessages {
    started: bool,
    header: Vec<u8>,
    skip: usize,
}

impl ClientMessages {
    fn feed(&mut self, mut bytes: &[u8], statements: &AtomicU64) {
        while !bytes.is_empty() {
            if self.skip > 0 {
                let n = self.skip.min(bytes.len());
                self.skip -= n;
                bytes = &bytes[n..];
                continue;
            }
            let need = if self.started { 5 } else { 4 };
            let n = (need - self.header.len()).min(bytes.len());
            self.header.extend_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
            if self.header.len() < need {
                return;
            }
            let length = |b: &[u8]| {
                usize::try_from(u32::from_be_bytes([b[0], b[1], b[2], b[3]])).unwrap_or(4)
            };
            if self.started {
                if matches!(self.header[0], b'E' | b'Q') {
                    statements.fetch_add(1, Ordering::SeqCst);
                }
                self.skip = length(&self.header[1..]).saturating_sub(4);
            } else {
                let len = length(&self.header);
                self.skip = len.saturating_sub(4);
                self.started = len != 8;
            }
            self.header.clear();
        }
    }
}

impl Relay {
    fn start() -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let exchanges = Arc::new(AtomicU64::new(0));
        let statements = Arc::new(AtomicU64::new(0));
        let (counted, sent) = (Arc::clone(&exchanges), Arc::clone(&statements));
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let server = TcpStream::connect("127.0.0.1:5432").expect("server");
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                // Whether the server spoke last on this connection.
                let answered = Arc::new(AtomicBool::new(true));
                let pipe = |mut from: TcpStream, mut to: TcpStream, from_client: bool| {
                    let (answered, counted) = (Arc::clone(&answered), Arc::clone(&counted));
                    let sent = Arc::clone(&sent);
                    std::thread::spawn(move || {
                        let mut buf = [0_u8; 65536];
                        let mut messages = ClientMessages::default();
                        while let Ok(n) = from.read(&mut buf) {
                            if n == 0 {
                                break;
                            }
                            if from_client {
                                if answered.swap(false, Ordering::SeqCst) {
                                    counted.fetch_add(1, Ordering::SeqCst);
                                }
                                messages.feed(&buf[..n], &sent);
                            } else {
                                answered.store(true, Ordering::SeqCst);
                            }
                            if to.write_all(&buf[..n]).is_err() {
                                break;
                            }
                        }
                        let _ = to.shutdown(std::net::Shutdown::Both);
                    });
                };
                pipe(
                    client.try_clone().expect("clone"),
                    server.try_clone().expect("clone"),
                    true,
                );
                pipe(server, client, false);
            }
        });
        Relay {
            port,
            exchanges,
            statements,
        }
    }

    /// The round trips and statements counted so far.
    fn counts(&self) -> (u64, u64) {
        (
            self.exchanges.load(Ordering::SeqCst),
            self.statements.load(Ordering::SeqCst),
        )
    }
}

/// Round trips per operation: `ops` operations through the relay after a warm-up (which
/// prepares the statements), single caller.
fn round_trips(db: &ScratchDatabase, op: Op, raw: bool, prefix: &str) -> f64 {
    const OPS: u64 = 50;
    let relay = Relay::start();
    let url = format!("postgres://postgres@127.0.0.1:{}/{}", relay.port, db.name());
    make_jobs(db.url(), prefix, 2 * OPS + 10, op);
    let runtime = rt();
    let exchanges = runtime.block_on(async {
        let options = PgOptions {
            pool_size: 1,
            ..PgOptions::default()
        };
        let store = if raw {
            None
        } else {
            Some(PgLeaseStore::open(&url, options).await.expect("open"))
        };
        let client = if raw {
            Some(Raw::connect(&url).await)
        } else {
            None
        };
        let mut k = 0_u64;
        let one = |k: &mut u64| {
            *k += 1;
            (
                format!("{prefix}{}", *k - 1),
                f64::from(u32::try_from(*k * 2).unwrap_or(0)),
            )
        };
        // Warm-up: statements are prepared once per connection.
        for _ in 0..5 {
            let (job, now) = one(&mut k);
            match (&store, &client) {
                (Some(s), _) => adapter_op(s, op, &JobId::new(job).expect("id"), now).await,
                (_, Some(c)) => c.run(op, &job, now).await,
                _ => {}
            }
        }
        let before = relay.exchanges.load(Ordering::SeqCst);
        for _ in 0..OPS {
            let (job, now) = one(&mut k);
            match (&store, &client) {
                (Some(s), _) => adapter_op(s, op, &JobId::new(job).expect("id"), now).await,
                (_, Some(c)) => c.run(op, &job, now).await,
                _ => {}
            }
        }
        relay.exchanges.load(Ordering::SeqCst) - before
    });
    exchanges as f64 / OPS as f64
}

/// Jobs of each PostgreSQL queue-loop run: `LEASE_BENCH_PG_LOOP_JOBS`, else the plan's (3,000,
/// issue 28's figures; 200 in the smoke pass, which only runs the code). With 64 workers 3,000
/// is 47 jobs a connection, so a larger number shows more of the steady state and less of each
/// new server process's first statements.
fn loop_jobs(plan: &Plan) -> u64 {
    std::env::var("LEASE_BENCH_PG_LOOP_JOBS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(plan.loop_jobs)
}

/// The queue anyone would write by hand, in a table of its own: a claim is one autocommit
/// `UPDATE ... WHERE id = (SELECT ... FOR UPDATE SKIP LOCKED LIMIT 1) RETURNING`, a completion
/// one autocommit `UPDATE` (two commits per job).
fn hand_table(url: &str, table: &str, jobs: u64) {
    execute(
        url,
        &format!(
            "CREATE TABLE {table} (id text PRIMARY KEY, seq bigint GENERATED ALWAYS AS IDENTITY, \
             queue text NOT NULL, priority bigint NOT NULL DEFAULT 0, run_at double precision, \
             owner text, until double precision NOT NULL DEFAULT 0, fence bigint NOT NULL \
             DEFAULT 0, attempts bigint NOT NULL DEFAULT 0, done boolean NOT NULL DEFAULT false, \
             result text); \
             CREATE INDEX ON {table} (queue, priority DESC, run_at ASC NULLS FIRST, seq) \
             WHERE NOT done; \
             INSERT INTO {table}(id, queue) SELECT 'h' || g, 'q' FROM generate_series(1, {jobs}) g; \
             ANALYZE {table}"
        ),
    );
}

/// A hand-written worker's connection and its two statements.
struct Hand {
    client: tokio_postgres::Client,
    claim: tokio_postgres::Statement,
    complete: tokio_postgres::Statement,
}

/// Connects a hand-written worker (before the clock starts, as the store's pool is opened).
async fn hand_connect(url: &str, table: &str) -> Hand {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect");
    tokio::spawn(conn);
    client
        .batch_execute("SET synchronous_commit = on")
        .await
        .expect("set");
    let claim = client
        .prepare(&format!(
            "UPDATE {table} SET owner = $2, until = $3 + 60, fence = fence + 1, \
             attempts = attempts + 1 WHERE id = (SELECT id FROM {table} WHERE queue = $1 \
             AND NOT done AND until <= $3 AND (run_at IS NULL OR run_at <= $3) \
             ORDER BY priority DESC, run_at ASC NULLS FIRST, seq \
             FOR UPDATE SKIP LOCKED LIMIT 1) RETURNING id, fence"
        ))
        .await
        .expect("prepare claim");
    let complete = client
        .prepare(&format!(
            "UPDATE {table} SET done = true, result = $3 WHERE id = $1 AND fence = $2"
        ))
        .await
        .expect("prepare complete");
    Hand {
        client,
        claim,
        complete,
    }
}

/// One hand-written worker: claims and completes until nothing is due.
async fn hand_worker(hand: Hand, start: Instant) -> Caller {
    let Hand {
        client,
        claim,
        complete,
    } = hand;
    let mut me = Caller::default();
    loop {
        let now = 1.0 + start.elapsed().as_secs_f64();
        let began = Instant::now();
        let Some(row) = client
            .query_opt(&claim, &[&"q", &"w", &now])
            .await
            .expect("claim")
        else {
            break;
        };
        let (id, fence): (String, i64) = (row.get(0), row.get(1));
        client
            .execute(&complete, &[&id, &fence, &"r"])
            .await
            .expect("complete");
        me.latencies.push(began.elapsed());
    }
    me
}

/// Makes `jobs` pending jobs in `queue` of the lease schema.
fn loop_queue(url: &str, queue: &str, jobs: u64) {
    execute(
        url,
        &format!(
            "INSERT INTO lease.jobs(id, queue) SELECT '{queue}-' || g, '{queue}' \
             FROM generate_series(1, {jobs}) g; ANALYZE lease.jobs"
        ),
    );
}

/// A store over `url` with `workers` connections, every one made (and its statements prepared)
/// before the clock starts, as the hand-written workers' are: `workers` concurrent claims of an
/// empty queue.
async fn warm_store(url: &str, workers: usize, step: bool, batch: bool) -> Arc<PgLeaseStore> {
    let options = PgOptions {
        // With group commit, its runners' connections besides the workers'.
        pool_size: workers + if batch { 2 } else { 0 },
        step,
        max_batch: if batch {
            PgOptions::default().max_batch
        } else {
            1
        },
        ..PgOptions::default()
    };
    let store = Arc::new(PgLeaseStore::open(url, options).await.expect("open"));
    let empty = QueueName::new("warm-up").expect("queue");
    let warming: Vec<_> = (0..workers)
        .map(|w| {
            let store = Arc::clone(&store);
            let (q, me) = (empty.clone(), Owner::new(format!("w{w}")).expect("owner"));
            tokio::spawn(async move {
                let term = LeaseTerm::new(1.0, 1.0).expect("term");
                store
                    .claim_next(&q, &me, term, 1)
                    .await
                    .expect("warm-up claim");
            })
        })
        .collect();
    for task in warming {
        task.await.expect("warm-up");
    }
    store
}

/// The run of callers started at `start`, once each task has finished.
async fn joined(tasks: Vec<tokio::task::JoinHandle<Caller>>, start: Instant) -> Run {
    let mut callers = Vec::new();
    for task in tasks {
        callers.push(task.await.expect("worker"));
    }
    Run {
        callers,
        wall: start.elapsed(),
    }
}

/// The store's queue loop (`claim_next`, then `complete_and_claim_next`) with `workers` tasks,
/// or the worker runtime with as many slots (`runtime`: with `WorkerConfig`'s defaults, which
/// hold 20 ms of work ahead while the jobs are short, or with no prefetch), on `queue` until
/// it is empty.
async fn store_loop(
    store: Arc<PgLeaseStore>,
    queue: &str,
    workers: usize,
    runtime: Option<bool>,
) -> Run {
    let q = QueueName::new(queue).expect("queue");
    let run = if let Some(prefetch) = runtime {
        // `LEASE_BENCH_PREFETCH` sets the defaults row's prefetch, to try other numbers.
        let prefetch = if prefetch {
            std::env::var("LEASE_BENCH_PREFETCH")
                .ok()
                .and_then(|v| v.parse().ok())
        } else {
            Some(0)
        };
        crate::harness::worker_run(store.clone(), q, workers, prefetch).await
    } else {
        let start = Instant::now();
        let tasks: Vec<_> = (0..workers)
            .map(|w| {
                let store: Arc<dyn LeaseStore> = store.clone();
                let me = Owner::new(format!("w{w}")).expect("owner");
                tokio::spawn(next_complete_loop(store, q.clone(), me, start))
            })
            .collect();
        joined(tasks, start).await
    };
    store.close();
    run
}

/// The queue loop on PostgreSQL, [`loop_jobs`] jobs, W workers in one process: the
/// hand-written loop against the store's loop (its writes as `step` calls, and as separate
/// statements) and the worker runtime, run in turn, medians of the runs; ratios to the
/// hand-written loop of the same run.
fn queue_loop_rows(plan: &Plan, url: &str, rows: &mut Vec<Row>) {
    // (row, step function, group commit, worker runtime: with its defaults, or no prefetch)
    const STORE_ROWS: [(&str, bool, bool, Option<bool>); 6] = [
        (
            "pg queue loop, claim_next + complete_and_claim_next, one step call per job (group commit off), jobs/s",
            true,
            false,
            None,
        ),
        (
            "pg queue loop, claim_next + complete_and_claim_next, group commit (batches settled set by set), jobs/s",
            true,
            true,
            None,
        ),
        (
            "pg queue loop, claim_next + complete_and_claim_next, as statements (the build before issue 28), jobs/s",
            false,
            false,
            None,
        ),
        (
            "pg queue loop, Worker runtime, one step call per job (group commit off), no prefetch, jobs/s",
            true,
            false,
            Some(false),
        ),
        (
            "pg queue loop, Worker runtime, group commit (batches settled set by set), no prefetch, jobs/s",
            true,
            true,
            Some(false),
        ),
        (
            "pg queue loop, Worker runtime, its defaults (group commit, 20 ms of work held ahead while jobs are short), jobs/s",
            true,
            true,
            Some(true),
        ),
    ];
    let jobs = loop_jobs(plan);
    let mut round = 0_u32;
    for workers in [1_usize, 16, 64] {
        let mut hands = Vec::new();
        let mut stores: [Vec<Run>; 6] = Default::default();
        let mut ratios: [Vec<f64>; 6] = Default::default();
        // Each run's CPU per job, in µs: the server's processes', and this process's.
        let mut cpu: [Vec<(f64, f64)>; 6] = Default::default();
        for _ in 0..plan.runs.max(1) {
            round += 1;
            let table = format!("public.hand_{round}");
            hand_table(url, &table, jobs);
            let hand = rt().block_on(async {
                let mut hands = Vec::new();
                for _ in 0..workers {
                    hands.push(hand_connect(url, &table).await);
                }
                let start = Instant::now();
                let tasks: Vec<_> = hands
                    .into_iter()
                    .map(|hand| tokio::spawn(hand_worker(hand, start)))
                    .collect();
                joined(tasks, start).await
            });
            for (k, (_, step, batch, runtime)) in STORE_ROWS.into_iter().enumerate() {
                let queue = format!("loop-{round}-{k}");
                loop_queue(url, &queue, jobs);
                let (store, server, own) = rt().block_on(async {
                    let store = warm_store(url, workers, step, batch).await;
                    let (server, own) = (server_cpu(), crate::cpu_seconds());
                    // The store outlives the loop, so its server processes are read after it.
                    let run = store_loop(Arc::clone(&store), &queue, workers, runtime).await;
                    let server = cpu_used(&server, &server_cpu());
                    drop(store);
                    (run, server, crate::cpu_seconds() - own)
                });
                let per_job = |seconds: f64| seconds * 1e6 / store.ops().max(1) as f64;
                cpu[k].push((per_job(server), per_job(own)));
                assert_eq!(hand.ops(), store.ops(), "both loops finish every job");
                ratios[k].push(store.rate(false) / hand.rate(false));
                stores[k].push(store);
            }
            hands.push(hand);
        }
        rows.push(summarize(
            "pg queue loop, hand-written (claim UPDATE ... SKIP LOCKED; complete UPDATE; two commits per job), jobs/s",
            workers,
            jobs,
            &hands,
            false,
        ));
        for (k, (name, _, _, _)) in STORE_ROWS.into_iter().enumerate() {
            let server = median(cpu[k].iter().map(|c| c.0).collect());
            let own = median(cpu[k].iter().map(|c| c.1).collect());
            let name = format!("{name} [CPU per job: server {server:.0} µs, lease {own:.0} µs]");
            rows.push(Row {
                ratio: Some(median(std::mem::take(&mut ratios[k]))),
                baseline: Some("hand-written loop"),
                ..summarize(&name, workers, jobs, &stores[k], false)
            });
        }
    }
}

/// The CPU seconds each PostgreSQL server process on this machine has used so far, by pid
/// (`/proc/<pid>/stat` of every process named `postgres`: the backends, the WAL writer, the
/// checkpointer). The report runs alone on the machine, so this is the server's cost of the run.
fn server_cpu() -> std::collections::HashMap<u32, f64> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return std::collections::HashMap::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|comm| comm.trim() == "postgres")
        })
        .map(|pid| (pid, crate::cpu_seconds_of(&format!("/proc/{pid}/stat"))))
        .collect()
}

/// The CPU seconds the server's processes used between two readings (a process that started
/// between them counts whole).
fn cpu_used(
    before: &std::collections::HashMap<u32, f64>,
    after: &std::collections::HashMap<u32, f64>,
) -> f64 {
    after
        .iter()
        .map(|(pid, now)| now - before.get(pid).copied().unwrap_or(0.0))
        .sum()
}

/// Round trips and statements sent per job, one worker, counted by the relay over 200 jobs
/// (after each connection has prepared its statements): the hand-written loop, the store's loop
/// with `step` calls, and as statements.
fn loop_round_trips(db: &ScratchDatabase) -> [(f64, f64); 3] {
    const JOBS: u64 = 200;
    let relay = Relay::start();
    let url = format!("postgres://postgres@127.0.0.1:{}/{}", relay.port, db.name());
    hand_table(db.url(), "public.hand_trips", JOBS);
    let per_job = |before: (u64, u64), jobs: usize| {
        let (trips, statements) = relay.counts();
        let jobs = jobs.max(1) as f64;
        (
            (trips - before.0) as f64 / jobs,
            (statements - before.1) as f64 / jobs,
        )
    };
    for step in [true, false] {
        execute(
            db.url(),
            &format!(
                "INSERT INTO lease.jobs(id, queue) SELECT 'trips-{step}-' || g, 'trips-{step}' \
                 FROM generate_series(1, {JOBS}) g"
            ),
        );
    }
    rt().block_on(async {
        let hand = hand_connect(&url, "public.hand_trips").await;
        let before = relay.counts();
        let done = hand_worker(hand, Instant::now()).await;
        let hand = per_job(before, done.latencies.len());
        let mut stores = Vec::new();
        for step in [true, false] {
            let queue = format!("trips-{step}");
            // The warm-up's claim prepares the connection's statements.
            let store = warm_store(&url, 1, step, false).await;
            let q = QueueName::new(queue).expect("queue");
            let before = relay.counts();
            let me = Owner::new("w0").expect("owner");
            let done = next_complete_loop(store.clone(), q, me, Instant::now()).await;
            stores.push(per_job(before, done.latencies.len()));
            store.close();
        }
        [hand, stores[0], stores[1]]
    })
}

/// The PostgreSQL queue-loop rows alone (`-- --pg-loop-only`), in a scratch database.
pub fn loop_rows_only(plan: &Plan, rows: &mut Vec<Row>) {
    if let Some(db) = scratch_lease_database() {
        queue_loop_rows(plan, db.url(), rows);
        let [hand, step, statements] = loop_round_trips(&db);
        println!(
            "PostgreSQL queue loop, round trips and statements sent per job: hand-written \
             {:.2} and {:.2}, the store's step calls {:.2} and {:.2}, the store's statements \
             {:.2} and {:.2}",
            hand.0, hand.1, step.0, step.1, statements.0, statements.1
        );
    }
}

/// The live-lease rows alone (`-- --live-only`), in a scratch database of their own.
pub fn live_rows_only(plan: &Plan, rows: &mut Vec<Row>) {
    if let Some(db) = scratch_lease_database() {
        live_lease_rows(plan, db.url(), rows);
    }
}

/// The PostgreSQL enqueue-signal rows alone (`-- --pg-signal-only`), in a scratch database.
pub fn signal_rows_only(plan: &Plan, rows: &mut Vec<Row>) -> Option<String> {
    let db = scratch_lease_database()?;
    Some(signal_rows(plan, db.url(), rows))
}

/// Enqueues by 16 callers, each followed by the signal `lease serve` sends after an enqueue
/// (`pg_notify` from a pooled connection, after the commit, not awaited), against the same
/// enqueues without it, in alternating runs; a listener is on in both, as in a server. Returns
/// how many signals the listener heard of those sent.
fn signal_rows(plan: &Plan, url: &str, rows: &mut Vec<Row>) -> String {
    use lease_ports::signal::EnqueueSignal;
    let rt = rt();
    let store = rt
        .block_on(PgLeaseStore::open(url, PgOptions::default()))
        .expect("open");
    let heard = Arc::new(AtomicU64::new(0));
    let into = Arc::clone(&heard);
    {
        let _runtime = rt.enter();
        assert!(store.watch(Arc::new(move |_: &str, jobs: usize| {
            into.fetch_add(u64::try_from(jobs).unwrap_or(0), Ordering::Relaxed);
        })));
    }
    let (next, sent) = (AtomicU64::new(0), AtomicU64::new(0));
    let (mut runs, mut ratios) = (Vec::new(), Vec::new());
    for _ in 0..plan.runs {
        let mut rate = [0.0; 2];
        for (i, signal) in [false, true].into_iter().enumerate() {
            let run = measure(16, plan.window, &|_, _| {
                let id = JobId::new(format!("sig-{}", next.fetch_add(1, Ordering::Relaxed)))
                    .expect("id");
                timed(|| {
                    rt.block_on(async {
                        assert!(store.enqueue(&id).await.expect("enqueue"), "a new job");
                        if signal {
                            store.signal("default", 1);
                            sent.fetch_add(1, Ordering::Relaxed);
                        }
                    });
                })
            });
            rate[i] = run.rate(false);
            if signal {
                runs.push(run);
            }
            // The signals still on their way finish before the next run.
            std::thread::sleep(Duration::from_millis(300));
        }
        ratios.push(rate[1] / rate[0]);
    }
    rows.push(Row {
        ratio: Some(median(ratios)),
        baseline: Some("the same enqueues, no signal"),
        ..summarize(
            "pg enqueue + signal (NOTIFY after commit)",
            16,
            0,
            &runs,
            false,
        )
    });
    format!(
        "enqueue signal: the listener heard {} of {} signals sent",
        heard.load(Ordering::Relaxed),
        sent.load(Ordering::Relaxed)
    )
}

/// A scratch database with the lease schema, or `None` when no server answers.
fn scratch_lease_database() -> Option<ScratchDatabase> {
    TcpStream::connect("127.0.0.1:5432").ok()?;
    let db = ScratchDatabase::create();
    rt().block_on(PgLeaseStore::init(db.url(), PgOptions::default()))
        .expect("init");
    Some(db)
}

/// The PostgreSQL rows; skipped, with a note, when no server answers.
pub fn rows(plan: &Plan, rows: &mut Vec<Row>) -> Option<String> {
    if TcpStream::connect("127.0.0.1:5432").is_err() {
        return Some("PostgreSQL rows skipped: no server on 127.0.0.1:5432".to_owned());
    }
    let db = ScratchDatabase::create();
    rt().block_on(PgLeaseStore::init(db.url(), PgOptions::default()))
        .expect("init");
    let url = db.url().to_owned();
    let mut round = 0_u32;
    let mut prefix = || {
        round += 1;
        format!("r{round}-")
    };
    live_lease_rows(plan, &url, rows);
    group_rows(plan, &url, rows);
    queue_loop_rows(plan, &url, rows);
    let mut notes = vec![signal_rows(plan, &url, rows)];
    for op in [Op::Claim, Op::ClaimComplete, Op::NextComplete] {
        let rt_adapter = round_trips(&db, op, false, &prefix());
        let rt_raw = round_trips(&db, op, true, &prefix());
        notes.push(format!(
            "{}: {rt_adapter:.1} round trips per operation through the store, {rt_raw:.1} raw",
            op.name()
        ));
        let mut single = None;
        for (callers, processes) in [(1, 1), (16, 1), (64, 1), (16, 4), (64, 4)] {
            let (mut runs, mut ratios) = (Vec::new(), Vec::new());
            for _ in 0..plan.runs {
                let p = prefix();
                let raw = run_spread(
                    &url,
                    op,
                    true,
                    callers,
                    processes,
                    plan.window,
                    &format!("{p}a"),
                );
                let run = run_spread(
                    &url,
                    op,
                    false,
                    callers,
                    processes,
                    plan.window,
                    &format!("{p}b"),
                );
                ratios.push(run.rate(false) / raw.rate(false));
                runs.push(run);
            }
            let name = format!(
                "pg {}{}",
                op.name(),
                if processes > 1 {
                    format!(" ({processes} processes)")
                } else {
                    String::new()
                }
            );
            let mut row = Row {
                ratio: Some(median(ratios)),
                baseline: Some("raw tokio-postgres loop"),
                ..summarize(&name, callers, 0, &runs, false)
            };
            if callers == 1 {
                single = Some(row.ops_per_sec);
            } else if let Some(single) = single {
                row.operation
                    .push_str(&format!(" [{:.1}x one caller]", row.ops_per_sec / single));
            }
            rows.push(row);
        }
    }
    Some(notes.join("; "))
}

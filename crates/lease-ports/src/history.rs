//! Recorded histories of store calls, and a linearizability checker against the sequential
//! contract (the `lease_domain` rules applied one call at a time).
//!
//! A history is linearizable when every call can be given one instant between its invocation
//! and its return such that, taken in that order, each call's answer is the one the sequential
//! rules give. A call that never returned (its process was killed) may take effect at any time
//! after its invocation, or never. The checker is a Wing & Gong search with memoisation, per job.

use std::collections::{BTreeMap, HashSet};

use lease_domain::{Fence, Job, JobId, JobResult, LeaseTerm, Outcome, Owner};

/// One call to a store, with the caller's inputs: the domain's [`Command`](lease_domain::Command).
pub use lease_domain::Command as Call;

/// What a call answered, reduced to what the contract pins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// `enqueue` inserted (`true`) or found the job (`false`).
    Enqueued(bool),
    /// `claim` gave this fence, or was refused.
    Claimed(Option<Fence>),
    /// `renew`, `complete` or `release` was accepted (`true`) or refused.
    Wrote(bool),
}

/// One call in a history. Times are any monotonic clock shared by every caller (nanoseconds).
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// The job the call was about.
    pub job: JobId,
    /// The call.
    pub call: Call,
    /// Its answer; `None` when it never returned (it may or may not have taken effect).
    pub answer: Option<Answer>,
    /// When the call was made.
    pub invoked: u64,
    /// When it returned; ignored when `answer` is `None`.
    pub returned: u64,
}

impl From<&Outcome> for Answer {
    fn from(outcome: &Outcome) -> Self {
        match outcome {
            Outcome::Enqueued(inserted) => Answer::Enqueued(*inserted),
            Outcome::Claimed(claimed) => Answer::Claimed(claimed.as_ref().ok().copied()),
            Outcome::Wrote(wrote) => Answer::Wrote(wrote.is_ok()),
            Outcome::Failed(failed) => Answer::Wrote(failed.is_ok()),
        }
    }
}

/// Applies one call to the sequential model and gives the answer the contract requires.
/// (Histories start from the job's absence and never purge, so no purge mark is involved.)
#[must_use]
pub fn apply(job: &JobId, state: Option<&Job>, call: &Call) -> (Option<Job>, Answer) {
    let (next, outcome) = call.decide(job, state, None);
    (next.or_else(|| state.cloned()), Answer::from(&outcome))
}

/// Why a history is not linearizable.
#[derive(Debug, Clone, PartialEq)]
pub struct Violation {
    /// The job whose history has no valid order.
    pub job: JobId,
    /// How many calls that job's history holds.
    pub calls: usize,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the {} calls on job {} have no sequential order that explains every answer",
            self.calls, self.job
        )
    }
}

/// Checks every job's history, each from the job's absence (`None`) as the start state.
///
/// # Errors
/// The first job whose history cannot be linearized.
pub fn check_linearizable(events: &[Event]) -> Result<usize, Violation> {
    let mut by_job: BTreeMap<&JobId, Vec<&Event>> = BTreeMap::new();
    for event in events {
        by_job.entry(&event.job).or_default().push(event);
    }
    for (job, history) in &by_job {
        if !linearizable(history) {
            return Err(Violation {
                job: (*job).clone(),
                calls: history.len(),
            });
        }
    }
    Ok(by_job.len())
}

const NEVER: u64 = u64::MAX;

fn returned(event: &Event) -> u64 {
    if event.answer.is_some() {
        event.returned
    } else {
        NEVER
    }
}

/// Depth-first search over which pending call takes effect next.
fn linearizable(history: &[&Event]) -> bool {
    let mut order: Vec<&Event> = history.to_vec();
    order.sort_by_key(|e| e.invoked);
    let mut done = vec![false; order.len()];
    let mut seen = HashSet::new();
    search(&order, &mut done, None, &mut seen)
}

fn search(
    order: &[&Event],
    done: &mut [bool],
    state: Option<Job>,
    seen: &mut HashSet<(Vec<bool>, String)>,
) -> bool {
    // Every call that returned is placed; the ones that never returned may simply never happen.
    if order
        .iter()
        .zip(done.iter())
        .all(|(e, d)| *d || e.answer.is_none())
    {
        return true;
    }
    if !seen.insert((done.to_vec(), format!("{state:?}"))) {
        return false;
    }
    // A call may go next only if it was invoked before every pending call returned.
    let horizon = order
        .iter()
        .zip(done.iter())
        .filter(|(_, d)| !**d)
        .map(|(e, _)| returned(e))
        .min()
        .unwrap_or(NEVER);
    for i in 0..order.len() {
        if done[i] || order[i].invoked > horizon {
            continue;
        }
        let (next, answer) = apply(&order[i].job, state.as_ref(), &order[i].call);
        if order[i].answer.is_some_and(|a| a != answer) {
            continue;
        }
        done[i] = true;
        if search(order, done, next, seen) {
            return true;
        }
        done[i] = false;
    }
    false
}

/// A concurrent random workload whose history the checker can judge.
#[derive(Debug, Clone, Copy)]
pub struct Workload {
    /// Concurrent callers.
    pub workers: usize,
    /// Calls per caller.
    pub calls_per_worker: usize,
    /// Jobs the callers share.
    pub jobs: usize,
    /// Seed of the callers' choices.
    pub seed: u64,
}

/// A small xorshift generator: reproducible choices without a dependency.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed (0 is replaced by a fixed odd constant).
    #[must_use]
    pub fn new(seed: u64) -> Self {
        Self(if seed == 0 {
            0x9E37_79B9_7F4A_7C15
        } else {
            seed
        })
    }

    /// The next number in `0..bound` (`bound` > 0).
    pub fn below(&mut self, bound: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % bound.max(1)
    }
}

/// Picks the next call for a caller that remembers the fences it was granted.
///
/// Times come from a shared logical clock so leases expire as calls go by; owners are reused, and
/// old fences are presented on purpose, so stale writers are common.
pub fn random_call(rng: &mut Rng, me: &Owner, granted: &[Fence], now: u32) -> Call {
    let now = f64::from(now);
    let ttl = match rng.below(3) {
        0 => 1.0,
        1 => 2.0,
        _ => 3.0,
    };
    let term = LeaseTerm::new(now, ttl).expect("a small whole now and ttl 1..=3 form a valid term");
    let fence = match granted {
        [] => Fence::ZERO,
        [.., last] if rng.below(3) != 0 => *last,
        _ => granted[usize::try_from(rng.below(granted.len() as u64)).unwrap_or(0)],
    };
    let result = JobResult::new(format!("{me}@{fence}")).expect("owner names hold no NUL");
    match rng.below(10) {
        0 => Call::Enqueue,
        1..=3 => Call::Claim(me.clone(), term),
        4 | 5 => Call::Renew(me.clone(), fence, term),
        6 | 7 => Call::Complete(me.clone(), fence, term.now(), result),
        _ => Call::Release(me.clone(), fence),
    }
}

#[cfg(feature = "conformance")]
mod workload {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Instant;

    use super::{Answer, Call, Event, Rng, Workload, random_call};
    use crate::{JobId, LeaseStore, Owner, StoreError};

    /// Makes one call and reduces its answer; storage errors are returned as they are.
    pub async fn perform(
        store: &dyn LeaseStore,
        job: &JobId,
        call: &Call,
    ) -> Result<Answer, StoreError> {
        Ok(match store.apply(job, call.clone(), None).await?.outcome {
            crate::Outcome::Enqueued(inserted) => Answer::Enqueued(inserted),
            crate::Outcome::Claimed(claimed) => Answer::Claimed(claimed.ok()),
            crate::Outcome::Wrote(wrote) => Answer::Wrote(wrote.is_ok()),
            crate::Outcome::Failed(failed) => Answer::Wrote(failed.is_ok()),
        })
    }

    /// Runs the workload with one Tokio task per caller and returns the recorded history.
    ///
    /// A call that fails with a storage error is recorded as never having returned.
    pub async fn record(store: Arc<dyn LeaseStore>, workload: Workload) -> Vec<Event> {
        let start = Instant::now();
        let clock = Arc::new(AtomicU64::new(0));
        let mut tasks = tokio::task::JoinSet::new();
        for w in 0..workload.workers {
            let (store, clock) = (Arc::clone(&store), Arc::clone(&clock));
            tasks.spawn(async move {
                let mut rng = Rng::new(workload.seed.wrapping_mul(31).wrapping_add(w as u64 + 1));
                let me = Owner::new(format!("w{w}")).expect("w<n> is a valid owner");
                let mut granted: Vec<Vec<crate::Fence>> = vec![Vec::new(); workload.jobs];
                let mut events = Vec::new();
                for _ in 0..workload.calls_per_worker {
                    let j = usize::try_from(rng.below(workload.jobs as u64)).unwrap_or(0);
                    let job = JobId::new(format!("job-{j}")).expect("job-<n> is a valid id");
                    let now =
                        u32::try_from(clock.fetch_add(1, Ordering::SeqCst) / 4).unwrap_or(u32::MAX);
                    let call = random_call(&mut rng, &me, &granted[j], now);
                    let invoked = elapsed(start);
                    let answer = perform(store.as_ref(), &job, &call).await.ok();
                    let returned = elapsed(start);
                    if let Some(Answer::Claimed(Some(fence))) = answer {
                        granted[j].push(fence);
                    }
                    events.push(Event {
                        job,
                        call,
                        answer,
                        invoked,
                        returned,
                    });
                }
                events
            });
        }
        let mut history = Vec::new();
        while let Some(done) = tasks.join_next().await {
            history.extend(done.unwrap_or_default());
        }
        history
    }

    fn elapsed(start: Instant) -> u64 {
        u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

#[cfg(feature = "conformance")]
pub use workload::{perform, record};

/// One line per call in a history log, so that processes (and processes killed mid-call) can
/// record histories in files: `I <caller>/<seq> <ns> <job> <call>` before a call is made and
/// `A <caller>/<seq> <ns> <answer>` after it returns.
#[cfg(feature = "conformance")]
pub mod log {

    use std::collections::BTreeMap;
    use std::path::Path;

    use super::{Answer, Call, Event};
    use crate::{Fence, JobId, JobResult, LeaseTerm, Owner, Timestamp};

    /// The text of a call that [`super::random_call`] makes.
    ///
    /// # Panics
    /// For a queue call, which `random_call` never makes.
    #[must_use]
    pub fn call_text(call: &Call) -> String {
        let term = |t: &LeaseTerm| format!("{} {}", t.now(), t.until().get() - t.now().get());
        match call {
            Call::Enqueue => "E".to_owned(),
            Call::Claim(o, t) => format!("C {o} {}", term(t)),
            Call::Renew(o, f, t) => format!("R {o} {f} {}", term(t)),
            Call::Complete(o, f, now, r) => format!("P {o} {f} {now} {}", r.as_str()),
            Call::Release(o, f) => format!("L {o} {f}"),
            other => panic!("random_call never makes {other:?}, and the soak logs only its calls"),
        }
    }

    /// Reads [`call_text`] split at spaces.
    ///
    /// # Panics
    /// For text that `call_text` did not write.
    #[must_use]
    pub fn parse_call(parts: &[&str]) -> Call {
        let owner = |s: &str| Owner::new(s).unwrap();
        let fence = |s: &str| Fence::new(s.parse().unwrap()).unwrap();
        let term = |now: &str, ttl: &str| {
            LeaseTerm::new(now.parse().unwrap(), ttl.parse().unwrap()).unwrap()
        };
        match parts {
            ["E"] => Call::Enqueue,
            ["C", o, now, ttl] => Call::Claim(owner(o), term(now, ttl)),
            ["R", o, f, now, ttl] => Call::Renew(owner(o), fence(f), term(now, ttl)),
            ["P", o, f, now, r] => Call::Complete(
                owner(o),
                fence(f),
                Timestamp::new(now.parse().unwrap()).unwrap(),
                JobResult::new(*r).unwrap(),
            ),
            ["L", o, f] => Call::Release(owner(o), fence(f)),
            other => panic!("unreadable call {other:?}"),
        }
    }

    /// The text of an answer.
    #[must_use]
    pub fn answer_text(answer: Answer) -> String {
        match answer {
            Answer::Enqueued(b) => format!("e{}", u8::from(b)),
            Answer::Claimed(Some(f)) => format!("c{f}"),
            Answer::Claimed(None) => "c-".to_owned(),
            Answer::Wrote(b) => format!("w{}", u8::from(b)),
        }
    }

    /// Reads [`answer_text`].
    ///
    /// # Panics
    /// For text that `answer_text` did not write.
    #[must_use]
    pub fn parse_answer(text: &str) -> Answer {
        match text {
            "e1" => Answer::Enqueued(true),
            "e0" => Answer::Enqueued(false),
            "c-" => Answer::Claimed(None),
            "w1" => Answer::Wrote(true),
            "w0" => Answer::Wrote(false),
            fence => Answer::Claimed(Some(Fence::new(fence[1..].parse().unwrap()).unwrap())),
        }
    }

    /// Every event logged in the files of `logs`; a call without an `A` line never returned.
    /// A file's last line without its newline is a write torn by a kill (the kernel checks for
    /// a fatal signal between the pages a write spans, so a line across a page boundary can be
    /// cut short) and is left out: a torn `I` line's call was never made (it is logged before
    /// the call), and a torn `A` line leaves its call unreturned, which the checker already
    /// allows to have taken effect or not.
    ///
    /// # Panics
    /// For an unreadable directory or line.
    #[must_use]
    pub fn read_history(logs: &Path) -> Vec<Event> {
        let mut invoked: BTreeMap<String, Event> = BTreeMap::new();
        for entry in std::fs::read_dir(logs).unwrap() {
            let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
            let whole = text
                .split_inclusive('\n')
                .filter_map(|line| line.strip_suffix('\n'));
            for line in whole {
                let parts: Vec<&str> = line.split(' ').collect();
                match parts.as_slice() {
                    ["I", id, at, job, call @ ..] => {
                        let event = Event {
                            job: JobId::new(*job).unwrap(),
                            call: parse_call(call),
                            answer: None,
                            invoked: at.parse().unwrap(),
                            returned: 0,
                        };
                        invoked.insert((*id).to_owned(), event);
                    }
                    ["A", id, at, answer] => {
                        let event = invoked.get_mut(*id).unwrap();
                        event.answer = Some(parse_answer(answer));
                        event.returned = at.parse().unwrap();
                    }
                    _ => panic!("unreadable history line {line:?}"),
                }
            }
        }
        invoked.into_values().collect()
    }
}

#[cfg(all(test, feature = "conformance"))]
mod log_tests {
    use super::log::read_history;

    #[test]
    fn a_line_torn_by_a_kill_is_left_out_of_the_history() {
        let dir = std::env::temp_dir().join(format!("lease-torn-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("h0"),
            "I h0/0 10 job-1 E\nA h0/0 20 e1\nI h0/1 30 job-1 C h0 5 10\nA h0/1 40 c1\nI h0/2 50 job-1",
        )
        .unwrap();
        std::fs::write(dir.join("h1"), "I h1/0 15 job-1 E\nA h1/0 25 e").unwrap();
        let history = read_history(&dir);
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(history.len(), 3, "the torn invocation is not an event");
        let returned = history.iter().filter(|e| e.answer.is_some()).count();
        assert_eq!(returned, 2, "a torn answer leaves its call unreturned");
    }
}

//! The claim walk's unit tests.
use lease_domain::{Concurrency, Ended, Fence, Timestamp};
use proptest::prelude::*;

use super::*;

fn term(now: f64) -> LeaseTerm {
    LeaseTerm::new(now, 10.0).unwrap()
}

fn due(id: &str) -> (JobId, Job) {
    (JobId::new(id).unwrap(), Job::new())
}

fn exhausted(id: &str) -> (JobId, Job) {
    let job = Job {
        fence: Fence::MAX,
        ..Job::new()
    };
    (JobId::new(id).unwrap(), job)
}

/// Runs a plain walk over a candidate list that, like a store's query, drops leased and
/// buried jobs and keeps skipped ones; returns the leased ids and the pages read.
fn run(mut jobs: Vec<(JobId, Job)>, limit: usize) -> (Vec<String>, usize) {
    let mut walk = ClaimWalk::new(&Owner::new("w").unwrap(), limit, term(100.0));
    let mut pages = 0;
    while let Some(read) = walk.next_read() {
        let Read::Page { want } = read else {
            panic!("a plain walk asked for {read:?}")
        };
        pages += 1;
        let page: Vec<_> = jobs.iter().take(want).cloned().collect();
        walk.answer(Answer::Page(term(100.0), page)).unwrap();
        for effect in walk.take_effects() {
            let Effect::Job(id, ..) = effect else {
                panic!("a plain walk wrote {effect:?}")
            };
            jobs.retain(|(j, _)| *j != id);
        }
    }
    let leased = walk
        .into_leases()
        .into_iter()
        .map(|l| l.job.as_str().to_owned())
        .collect();
    (leased, pages)
}

#[test]
fn a_skipped_head_does_not_hide_the_jobs_behind_it() {
    let (leased, pages) = run(vec![exhausted("a"), due("b"), due("c")], 1);
    assert_eq!(leased, ["b"]);
    assert_eq!(pages, 2, "the second page reads past the skipped head");
}

#[test]
fn the_walk_stops_at_the_limit_and_when_the_candidates_run_out() {
    assert_eq!(
        run(vec![due("a"), due("b"), due("c")], 2),
        (vec!["a".into(), "b".into()], 1)
    );
    let (leased, pages) = run(vec![due("a")], 5);
    assert_eq!((leased, pages), (vec!["a".to_owned()], 1));
    assert_eq!(run(vec![exhausted("a"), exhausted("b")], 1), (vec![], 3));
    assert_eq!(run(vec![due("a")], 0), (vec![], 0));
}

#[test]
fn a_page_that_repeats_only_skipped_rows_ends_the_walk() {
    // A store that ignores `want` and returns the same skipped row forever.
    let mut walk = ClaimWalk::new(&Owner::new("w").unwrap(), 3, term(1.0));
    let mut pages = 0;
    while let Some(Read::Page { want }) = walk.next_read() {
        pages += 1;
        let page = vec![exhausted("a"); want];
        walk.answer(Answer::Page(term(1.0), page)).unwrap();
        assert!(walk.take_effects().is_empty());
    }
    assert_eq!(pages, 2);
}

/// A store in a vector, answering the walk's reads as the stores do, and counting the
/// job rows it read.
struct Toy {
    jobs: Vec<(JobId, Job, u64)>,
    now: Timestamp,
    rows_read: usize,
    /// Reads the walk asked for, reads sent together counted once.
    round_trips: usize,
    /// Whether heads come with their groups' standing ([`Answer::HeadsWithStanding`]).
    heads_with_standing: bool,
}

impl Toy {
    fn candidates(&self, group: Option<Option<&GroupKey>>) -> Vec<Candidate> {
        let mut found: Vec<Candidate> = self
            .jobs
            .iter()
            .filter(|(_, job, _)| job.is_claim_candidate(self.now))
            .filter(|(_, job, _)| group.is_none_or(|g| job.group.as_ref() == g))
            .map(|(id, job, seq)| Candidate {
                id: id.clone(),
                job: job.clone(),
                seq: *seq,
            })
            .collect();
        found.sort_by_key(Candidate::key);
        found
    }

    fn bearing(&self, groups: &[GroupKey]) -> Vec<(JobId, Job)> {
        self.jobs
            .iter()
            .filter(|(_, job, _)| {
                job.group.as_ref().is_some_and(|g| groups.contains(g))
                    && job.bears_on_group(self.now)
            })
            .map(|(id, job, _)| (id.clone(), job.clone()))
            .collect()
    }

    fn answer(&mut self, read: Read) -> Answer {
        let t = term(self.now.get());
        match read {
            Read::Page { want } => {
                let page: Vec<_> = self.candidates(None).into_iter().take(want).collect();
                self.rows_read += page.len();
                Answer::Page(t, page.into_iter().map(|c| (c.id, c.job)).collect())
            }
            Read::Due { group, want } => {
                let due: Vec<_> = self
                    .candidates(Some(group.as_ref()))
                    .into_iter()
                    .take(want)
                    .collect();
                self.rows_read += due.len();
                Answer::Candidates(t, due)
            }
            Read::Jobs(ids) => {
                let found: Vec<_> = self
                    .candidates(None)
                    .into_iter()
                    .filter(|c| ids.contains(&c.id))
                    .collect();
                self.rows_read += found.len();
                Answer::Candidates(t, found)
            }
            Read::Heads { want, skip } => {
                let mut heads: Vec<Head> = Vec::new();
                for c in self.candidates(None) {
                    let Some(group) = &c.job.group else { continue };
                    if skip.contains(group) || heads.iter().any(|h| h.group == *group) {
                        continue;
                    }
                    heads.push(Head {
                        group: group.clone(),
                        key: c.key(),
                    });
                }
                heads.truncate(want);
                if self.heads_with_standing {
                    let groups: Vec<GroupKey> = heads.iter().map(|h| h.group.clone()).collect();
                    // The first due job of each, as a store that reads them with the heads.
                    let due: Vec<Candidate> = groups
                        .iter()
                        .filter_map(|g| self.candidates(Some(Some(g))).into_iter().next())
                        .collect();
                    self.rows_read += due.len();
                    Answer::HeadsWithStanding {
                        heads,
                        bearing: self.bearing(&groups),
                        counting: Vec::new(),
                        due: Some((t, 1, due)),
                    }
                } else {
                    Answer::Heads(heads)
                }
            }
            Read::Standing(groups) => Answer::Standing {
                bearing: self.bearing(&groups),
                counting: Vec::new(),
            },
            Read::Turn { .. } => Answer::Turn(None),
            Read::Many(reads) => {
                Answer::Many(reads.into_iter().map(|read| self.answer(read)).collect())
            }
        }
    }

    fn claim(&mut self, settings: &QueueSettings, limit: usize) -> Vec<String> {
        let claim = crate::ClaimNext::new(
            &QueueName::default(),
            &Owner::new("w").unwrap(),
            term(self.now.get()),
            limit,
        );
        let mut walk = ClaimWalk::in_queue(&claim, settings, 0, 0);
        while let Some(read) = walk.next_read() {
            self.round_trips += 1;
            self.write(walk.take_effects());
            let answer = self.answer(read);
            walk.answer(answer).unwrap();
        }
        self.write(walk.take_effects());
        walk.into_leases()
            .into_iter()
            .map(|l| l.job.as_str().to_owned())
            .collect()
    }

    fn write(&mut self, effects: Vec<Effect>) {
        for effect in effects {
            if let Effect::Job(id, job, _) = effect {
                let row = self.jobs.iter_mut().find(|(j, _, _)| *j == id).unwrap();
                row.1 = job;
            }
        }
    }
}

use lease_domain::QueueName;

/// The claim as the group rules define it: every candidate in claim order, each leased
/// when the gate (knowing every group's standing) admits it.
fn reference(toy: &Toy, settings: &QueueSettings, limit: usize) -> Vec<String> {
    let now = toy.now;
    let mut gate = GroupGate::new(settings, now);
    let groups: Vec<GroupKey> = toy
        .jobs
        .iter()
        .filter_map(|(_, j, _)| j.group.clone())
        .collect::<HashSet<_>>()
        .into_iter()
        .collect();
    let jobs: Vec<(JobId, Job)> = toy
        .jobs
        .iter()
        .map(|(id, job, _)| (id.clone(), job.clone()))
        .collect();
    gate.learn(&groups, &jobs, &[], now);
    let owner = Owner::new("w").unwrap();
    let mut leased = Vec::new();
    for c in toy.candidates(None) {
        if leased.len() >= limit {
            break;
        }
        if !gate.admits(&c.id, &c.job) {
            continue;
        }
        match decide_claim_next(&c.job, &owner, term(now.get())) {
            NextDecision::Lease(_) => {
                gate.leased(c.job.group.as_ref());
                leased.push(c.id.as_str().to_owned());
            }
            NextDecision::Bury(_) => gate.buried(c.job.group.as_ref()),
            NextDecision::Skip => {}
        }
    }
    leased
}

fn group(name: &str) -> GroupKey {
    GroupKey::new(name).unwrap()
}

#[test]
fn a_held_group_is_passed_in_one_step_whatever_its_backlog() {
    let mut jobs = Vec::new();
    let running = Job {
        owner: Some(Owner::new("other").unwrap()),
        until: Timestamp::new(200.0).unwrap(),
        fence: Fence::new(1).unwrap(),
        attempts: 1,
        group: Some(group("big")),
        ..Job::new()
    };
    jobs.push((JobId::new("big-running").unwrap(), running, 0));
    for n in 1..=10_000 {
        let job = Job {
            group: Some(group("big")),
            ..Job::new()
        };
        jobs.push((JobId::new(format!("big-{n}")).unwrap(), job, n));
    }
    let small = Job {
        group: Some(group("small")),
        ..Job::new()
    };
    jobs.push((JobId::new("small-1").unwrap(), small, 20_000));
    let settings = QueueSettings {
        per_group: Concurrency::new(1),
        ..QueueSettings::default()
    };
    for heads_with_standing in [false, true] {
        let mut toy = Toy {
            jobs: jobs.clone(),
            now: Timestamp::new(100.0).unwrap(),
            rows_read: 0,
            round_trips: 0,
            heads_with_standing,
        };
        assert_eq!(toy.claim(&settings, 1), ["small-1"]);
        assert!(toy.rows_read <= 2, "read {} job rows", toy.rows_read);
        // The jobs without a group and the heads together, the groups' standing and
        // small's jobs (unless they came with the heads).
        let expected = if heads_with_standing { 1 } else { 3 };
        assert_eq!(
            toy.round_trips, expected,
            "heads with standing: {heads_with_standing}"
        );
    }
}

fn job_strategy() -> impl Strategy<Value = (Option<u8>, i64, u8, u8, bool)> {
    // (group, priority, state, attempts, run_at later)
    (
        prop::option::of(0_u8..4),
        0_i64..3,
        0_u8..5,
        0_u8..3,
        any::<bool>(),
    )
}

fn toy_of(specs: &[(Option<u8>, i64, u8, u8, bool)]) -> Toy {
    let now = Timestamp::new(100.0).unwrap();
    let jobs = specs
        .iter()
        .enumerate()
        .map(|(n, (g, priority, state, attempts, later))| {
            let mut job = Job {
                group: g.map(|g| group(&format!("g{g}"))),
                priority: *priority,
                max_attempts: 2,
                attempts: u32::from(*attempts),
                run_at: Timestamp::new(if *later { 150.0 } else { 50.0 + n as f64 }).ok(),
                ..Job::new()
            };
            if job.attempts > 0 {
                job.fence = Fence::new(u64::from(job.attempts)).unwrap();
            }
            match state {
                0 => {
                    job.owner = Some(Owner::new("other").unwrap());
                    job.until = Timestamp::new(200.0).unwrap();
                    job.attempts = job.attempts.max(1);
                    job.fence = Fence::new(u64::from(job.attempts)).unwrap();
                }
                1 => job.ended = Some(Ended::Dead),
                2 => job.done = true,
                _ => {}
            }
            (JobId::new(format!("j{n:03}")).unwrap(), job, n as u64)
        })
        .collect();
    Toy {
        jobs,
        now,
        rows_read: 0,
        round_trips: 0,
        heads_with_standing: false,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]
    #[test]
    fn the_walk_by_heads_leases_what_claim_order_and_the_group_rules_say(
        specs in prop::collection::vec(job_strategy(), 0..40),
        per_group in prop::option::of(1_u32..3),
        ordered in any::<bool>(),
        paused in prop::option::of(0_u8..4),
        limit in 0_usize..6,
    ) {
        let mut settings = QueueSettings {
            per_group: per_group.and_then(Concurrency::new),
            ordered,
            ..QueueSettings::default()
        };
        if let Some(g) = paused {
            settings.paused_groups.insert(group(&format!("g{g}")), None);
        }
        let mut toy = toy_of(&specs);
        let expected = reference(&toy, &settings, limit);
        prop_assert_eq!(toy.claim(&settings, limit), expected.clone());
        // The same when the heads come with their groups' standing.
        let mut toy = toy_of(&specs);
        toy.heads_with_standing = true;
        prop_assert_eq!(toy.claim(&settings, limit), expected);
    }
}

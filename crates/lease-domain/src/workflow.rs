//! Workflows (issue 38), the rules first: a job may run after other jobs (its parents), a
//! batch of jobs that name each other must form no cycle, a waiting child becomes due,
//! waits, or is cancelled by how its parents ended, and a checkpoint's name is checked.
//! Pure, as every rule here: the stores read the parents' ends in the transaction that
//! finishes a parent and apply what [`decide_child`] says.

use std::collections::{BTreeMap, BTreeSet};

use crate::queue::{Ended, ErrorText, OnParentFailure, Status};
use crate::rules::Job;
use crate::values::{
    JobId, MAX_CHECKPOINT_NAME_BYTES, MAX_CHECKPOINT_VALUE_BYTES, MAX_CHECKPOINTS, MAX_PARENTS,
    Timestamp, WorkflowRefused,
};

/// What a waiting child becomes, judged from how its parents stand.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChildFate {
    /// It keeps waiting: a parent it waits for has not finished.
    Wait,
    /// It becomes due (pending, then as its run_at, priority and flow control say).
    Due,
    /// It is cancelled by this parent, which ended so (dead or cancelled).
    Cancel(JobId, Status),
}

/// What a waiting child with `policy` becomes when its parents stand as `parents` (each
/// parent's finished status, `None` while it is unfinished; a parent that is gone, purged
/// after it finished, counts as done: a purge takes only finished jobs, and a child whose
/// parent ended dead or cancelled was cancelled then). Under [`OnParentFailure::Cancel`] the
/// first parent (in the order given) that ended dead or cancelled cancels it, else it is due
/// once every parent is done; under [`OnParentFailure::Run`] it is due once every parent has
/// finished. A parent that is done weighs on neither, so a store may leave done parents out
/// of `parents` (and read only the others).
#[must_use]
pub fn decide_child(policy: OnParentFailure, parents: &[(JobId, Option<Status>)]) -> ChildFate {
    if policy == OnParentFailure::Cancel {
        let failed = parents
            .iter()
            .find(|(_, end)| matches!(end, Some(Status::Dead | Status::Cancelled)));
        if let Some((parent, Some(end))) = failed {
            return ChildFate::Cancel(parent.clone(), *end);
        }
    }
    if parents.iter().all(|(_, end)| end.is_some()) {
        ChildFate::Due
    } else {
        ChildFate::Wait
    }
}

/// The error of a child that `parent` cancelled by ending so.
#[must_use]
pub fn cancelled_by(parent: &JobId, end: Status) -> ErrorText {
    ErrorText::lossy(format!(
        "cancelled: its parent {parent} ended {}",
        end.as_str()
    ))
}

/// A waiting child as a store reads it when one of its parents finishes: its policy and
/// each of its parents with how it stands (finished status, `None` while unfinished).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting {
    /// The child.
    pub id: JobId,
    /// What it does when a parent fails.
    pub policy: OnParentFailure,
    /// Its parents and how each stands, as read.
    pub parents: Vec<(JobId, Option<Status>)>,
}

/// The fates of the children waiting on `finished`, which has just ended as `end`, and
/// transitively of theirs: each child is judged by [`decide_child`] with the ends decided
/// here taking the place of what was read (the store reads them in the same transaction,
/// before this finish is written); a child that becomes due is done with (it has not
/// finished); a child cancelled by a parent ends cancelled, so its own waiting children are
/// judged next. Each child is decided at most once. `children_of` reads the jobs waiting on
/// a job. In the order decided.
pub fn propagate(
    finished: &JobId,
    end: Status,
    children_of: &mut dyn FnMut(&JobId) -> Vec<Waiting>,
) -> Vec<(JobId, ChildFate)> {
    let mut propagation = Propagation::new(finished, end);
    let mut fates = Vec::new();
    while let Some(parent) = propagation.next_parent() {
        fates.extend(propagation.judge(children_of(&parent)));
    }
    fates
}

/// [`propagate`] one step at a time, for a store that reads the waiting children of each
/// job with a request of its own: ask [`Propagation::next_parent`] whose children to read,
/// then give them to [`Propagation::judge`], until there is no next parent.
#[derive(Debug, Clone)]
pub struct Propagation {
    ends: BTreeMap<JobId, Status>,
    next: Vec<JobId>,
    decided: BTreeSet<JobId>,
}

impl Propagation {
    /// The propagation of `finished`'s end, `end`.
    #[must_use]
    pub fn new(finished: &JobId, end: Status) -> Self {
        Self {
            ends: BTreeMap::from([(finished.clone(), end)]),
            next: vec![finished.clone()],
            decided: BTreeSet::new(),
        }
    }

    /// The next job whose waiting children must be read; `None` when all are settled.
    pub fn next_parent(&mut self) -> Option<JobId> {
        self.next.pop()
    }

    /// Judges the children waiting on the last job [`Propagation::next_parent`] gave, as
    /// read, and answers the fate of each one decided now (a child that still waits, or was
    /// decided before, is left out); a cancelled child's own children are read next.
    pub fn judge(&mut self, children: Vec<Waiting>) -> Vec<(JobId, ChildFate)> {
        let mut fates = Vec::new();
        for mut child in children {
            if self.decided.contains(&child.id) {
                continue;
            }
            for (id, stands) in &mut child.parents {
                if let Some(end) = self.ends.get(id) {
                    *stands = Some(*end);
                }
            }
            let fate = decide_child(child.policy, &child.parents);
            match &fate {
                ChildFate::Wait => continue,
                ChildFate::Due => {}
                ChildFate::Cancel(..) => {
                    self.ends.insert(child.id.clone(), Status::Cancelled);
                    self.next.push(child.id.clone());
                }
            }
            self.decided.insert(child.id.clone());
            fates.push((child.id, fate));
        }
        fates
    }
}

/// Whether the store must judge `next` against its parents before it commits: `next` names
/// parents, can still run, and has just been enqueued, run again or retried (it was not
/// stored, or was finished). It then reads how each parent stands and stores
/// [`Job::settled`] with [`decide_child`]'s fate.
#[must_use]
pub fn judges_parents(before: Option<&Job>, next: &Job) -> bool {
    !next.after.is_empty()
        && next.finished().is_none()
        && before.is_none_or(|b| b.finished().is_some())
}

/// The end `next` has just come to (done, dead or cancelled) when `before` had not finished:
/// the store then judges the jobs waiting on it with [`propagate`], in the same transaction.
#[must_use]
pub fn finishes(before: Option<&Job>, next: &Job) -> Option<Status> {
    next.finished()
        .filter(|_| before.is_some_and(|b| b.finished().is_none()))
}

impl Job {
    /// The job as `fate` leaves it, changed `at` (the time its parent finished; `None`: not
    /// known, its last change kept), or `None` when it changes nothing: `Wait` makes it wait,
    /// `Due` ends its wait (it is pending, due as its `run_at` says), `Cancel` ends it
    /// cancelled with an error naming the parent ([`cancelled_by`]).
    #[must_use]
    pub fn settled(&self, fate: &ChildFate, at: Option<Timestamp>) -> Option<Job> {
        let updated = at.or(self.updated);
        match fate {
            ChildFate::Wait => (!self.waiting).then(|| Job {
                waiting: true,
                ..self.clone()
            }),
            ChildFate::Due => self.waiting.then(|| Job {
                waiting: false,
                updated,
                ..self.clone()
            }),
            ChildFate::Cancel(parent, end) => Some(Job {
                waiting: false,
                ended: Some(Ended::Cancelled),
                error: Some(cancelled_by(parent, *end).as_str().to_owned()),
                updated,
                ..self.clone()
            }),
        }
    }
}

/// Checks a batch of jobs and the parents each names: no job names itself, every parent is
/// stored (`stored`) or in the batch (named before or after its child), no job names more
/// than [`MAX_PARENTS`], and the batch's jobs form no cycle (a stored job cannot name a job
/// of the batch, so a cycle can only be among them). Returns each job's parents without
/// repeats, in the order first named.
///
/// # Errors
/// The first problem found, naming the job: [`WorkflowRefused::SelfParent`],
/// [`WorkflowRefused::TooManyParents`], [`WorkflowRefused::MissingParent`] or
/// [`WorkflowRefused::Cycle`] (naming the smallest id of the jobs left in cycles).
pub fn check_workflow(
    batch: &[(JobId, Vec<JobId>)],
    stored: impl Fn(&JobId) -> bool,
) -> Result<Vec<Vec<JobId>>, WorkflowRefused> {
    let in_batch: BTreeSet<&JobId> = batch.iter().map(|(id, _)| id).collect();
    let mut parents_of = Vec::with_capacity(batch.len());
    for (child, parents) in batch {
        let mut seen = BTreeSet::new();
        let unique: Vec<JobId> = parents
            .iter()
            .filter(|p| seen.insert(*p))
            .cloned()
            .collect();
        if unique.len() > MAX_PARENTS {
            return Err(WorkflowRefused::TooManyParents {
                child: child.clone(),
                count: unique.len(),
            });
        }
        for parent in &unique {
            if parent == child {
                return Err(WorkflowRefused::SelfParent(child.clone()));
            }
            if !in_batch.contains(parent) && !stored(parent) {
                return Err(WorkflowRefused::MissingParent {
                    child: child.clone(),
                    parent: parent.clone(),
                });
            }
        }
        parents_of.push(unique);
    }
    // Kahn's algorithm over the edges within the batch: whatever is left is in a cycle.
    let mut waiting: BTreeMap<&JobId, usize> = BTreeMap::new();
    let mut children: BTreeMap<&JobId, Vec<&JobId>> = BTreeMap::new();
    for ((child, _), parents) in batch.iter().zip(&parents_of) {
        let inner: Vec<&JobId> = parents.iter().filter(|p| in_batch.contains(p)).collect();
        *waiting.entry(child).or_default() += inner.len();
        for parent in inner {
            children.entry(parent).or_default().push(child);
        }
    }
    let mut ready: Vec<&JobId> = waiting
        .iter()
        .filter(|(_, n)| **n == 0)
        .map(|(id, _)| *id)
        .collect();
    while let Some(done) = ready.pop() {
        waiting.remove(done);
        for child in children.get(done).map_or(&[][..], Vec::as_slice) {
            if let Some(n) = waiting.get_mut(child) {
                *n -= 1;
                if *n == 0 {
                    ready.push(child);
                }
            }
        }
    }
    match waiting.keys().next() {
        Some(id) => Err(WorkflowRefused::Cycle((*id).clone())),
        None => Ok(parents_of),
    }
}

/// A checkpoint's name: 1 to [`MAX_CHECKPOINT_NAME_BYTES`] bytes, no NUL.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CheckpointName(String);

impl CheckpointName {
    /// Checks and wraps a checkpoint name.
    ///
    /// # Errors
    /// [`WorkflowRefused::CheckpointName`].
    pub fn new(name: impl Into<String>) -> Result<Self, WorkflowRefused> {
        let name = name.into();
        if name.is_empty() || name.len() > MAX_CHECKPOINT_NAME_BYTES || name.contains('\0') {
            return Err(WorkflowRefused::CheckpointName(name));
        }
        Ok(Self(name))
    }

    /// The name.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A checkpoint's value: text without NUL, at most [`MAX_CHECKPOINT_VALUE_BYTES`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointValue(String);

impl CheckpointValue {
    /// Checks and wraps a checkpoint value.
    ///
    /// # Errors
    /// [`crate::InputError::NulInText`], or [`WorkflowRefused::CheckpointValue`] wrapped in
    /// [`crate::InputError::Workflow`].
    pub fn new(value: impl Into<String>) -> Result<Self, crate::InputError> {
        let value = value.into();
        if value.len() > MAX_CHECKPOINT_VALUE_BYTES {
            return Err(WorkflowRefused::CheckpointValue(value.len()).into());
        }
        if value.contains('\0') {
            return Err(crate::InputError::NulInText {
                what: "checkpoint value",
            });
        }
        Ok(Self(value))
    }

    /// The value.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A durable step's result as a lease holder writes it: a name and a value. A job keeps one
/// value per name (a second write of a name replaces it), at most [`MAX_CHECKPOINTS`] names,
/// across failed attempts, lease expiry and retries; a run again of a finished job
/// (`--replace-finished`) starts without them ([`Command::clears_checkpoints`]).
///
/// [`Command::clears_checkpoints`]: crate::Command::clears_checkpoints
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    /// Its name.
    pub name: CheckpointName,
    /// Its value.
    pub value: CheckpointValue,
}

/// A checkpoint a job keeps: what was written, by which lease (`fence`) and when.
#[derive(Debug, Clone, PartialEq)]
pub struct KeptCheckpoint {
    /// Its name.
    pub name: CheckpointName,
    /// Its value.
    pub value: CheckpointValue,
    /// The fence of the lease that wrote it.
    pub fence: crate::Fence,
    /// When it was written, by the clock the store decides with.
    pub at: Timestamp,
}

/// Whether job `job`, which keeps `kept` checkpoints, may keep one more: a name it keeps
/// already (`replaces`) always may, a new one only under [`MAX_CHECKPOINTS`].
///
/// # Errors
/// [`WorkflowRefused::TooManyCheckpoints`].
pub fn checkpoint_fits(job: &JobId, kept: usize, replaces: bool) -> Result<(), WorkflowRefused> {
    if replaces || kept < MAX_CHECKPOINTS {
        Ok(())
    } else {
        Err(WorkflowRefused::TooManyCheckpoints(job.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(name: &str) -> JobId {
        JobId::new(name).unwrap()
    }

    fn batch(edges: &[(&str, &[&str])]) -> Vec<(JobId, Vec<JobId>)> {
        edges
            .iter()
            .map(|(child, parents)| (id(child), parents.iter().map(|p| id(p)).collect()))
            .collect()
    }

    #[test]
    fn a_chain_and_a_fan_in_are_accepted_with_parents_named_before_or_after() {
        let jobs = batch(&[
            ("c", &["b"]),
            ("b", &["a"]),
            ("a", &[]),
            ("d", &["a", "b", "a"]),
        ]);
        let parents = check_workflow(&jobs, |_| false).unwrap();
        assert_eq!(parents[3], [id("a"), id("b")], "repeats are dropped");
        // A parent already stored is fine.
        let later = batch(&[("e", &["stored"])]);
        assert!(check_workflow(&later, |p| p.as_str() == "stored").is_ok());
    }

    #[test]
    fn a_self_parent_a_missing_parent_and_too_many_are_refused_naming_the_job() {
        let err = check_workflow(&batch(&[("a", &["a"])]), |_| false).unwrap_err();
        assert_eq!(err, WorkflowRefused::SelfParent(id("a")));
        assert!(err.to_string().contains("job a names itself"));
        let err = check_workflow(&batch(&[("a", &["ghost"])]), |_| false).unwrap_err();
        assert!(
            err.to_string().contains("job a names parent ghost"),
            "{err}"
        );
        let many: Vec<JobId> = (0..=MAX_PARENTS).map(|n| id(&format!("p{n}"))).collect();
        let err = check_workflow(&[(id("child"), many)], |_| true).unwrap_err();
        assert!(
            matches!(err, WorkflowRefused::TooManyParents { count, .. } if count == MAX_PARENTS + 1)
        );
    }

    #[test]
    fn a_cycle_of_any_length_is_refused_naming_a_job_in_it() {
        let two = batch(&[("a", &["b"]), ("b", &["a"]), ("free", &[])]);
        assert_eq!(
            check_workflow(&two, |_| false).unwrap_err(),
            WorkflowRefused::Cycle(id("a"))
        );
        let three = batch(&[
            ("x", &["z"]),
            ("y", &["x"]),
            ("z", &["y"]),
            ("tail", &["x"]),
        ]);
        let err = check_workflow(&three, |_| false).unwrap_err();
        assert!(
            matches!(&err, WorkflowRefused::Cycle(j) if ["tail", "x", "y", "z"].contains(&j.as_str())),
            "{err}"
        );
    }

    #[test]
    fn a_child_is_released_cancelled_or_kept_waiting_by_its_parents_and_policy() {
        let done = Some(Status::Done);
        let dead = Some(Status::Dead);
        let parents = |ends: &[Option<Status>]| -> Vec<(JobId, Option<Status>)> {
            ends.iter()
                .enumerate()
                .map(|(n, end)| (id(&format!("p{n}")), *end))
                .collect()
        };
        use OnParentFailure::{Cancel, Run};
        assert_eq!(
            decide_child(Cancel, &parents(&[done, None])),
            ChildFate::Wait
        );
        assert_eq!(
            decide_child(Cancel, &parents(&[done, done])),
            ChildFate::Due
        );
        assert_eq!(
            decide_child(Cancel, &parents(&[done, None, dead])),
            ChildFate::Cancel(id("p2"), Status::Dead),
            "a failed parent cancels at once, before the others finish"
        );
        assert_eq!(decide_child(Run, &parents(&[dead, None])), ChildFate::Wait);
        assert_eq!(
            decide_child(Run, &parents(&[dead, Some(Status::Cancelled), done])),
            ChildFate::Due
        );
        assert_eq!(decide_child(Run, &[]), ChildFate::Due);
        let text = cancelled_by(&id("p2"), Status::Dead);
        assert!(
            text.as_str().contains("parent p2 ended dead"),
            "{}",
            text.as_str()
        );
    }

    #[test]
    fn a_failure_cancels_down_the_chain_and_a_run_child_is_released_once_all_finished() {
        // a -> b -> c, a -> r (runs whatever), and d waits on a and b.
        // Each parent's waiting children: (child, policy, the child's parents).
        type Children<'a> = Vec<(&'a str, OnParentFailure, Vec<&'a str>)>;
        let graph: BTreeMap<&str, Children<'_>> = BTreeMap::from([
            (
                "a",
                vec![
                    ("b", OnParentFailure::Cancel, vec!["a"]),
                    ("r", OnParentFailure::Run, vec!["a"]),
                    ("d", OnParentFailure::Cancel, vec!["a", "b"]),
                ],
            ),
            (
                "b",
                vec![
                    ("c", OnParentFailure::Cancel, vec!["b"]),
                    ("d", OnParentFailure::Cancel, vec!["a", "b"]),
                ],
            ),
        ]);
        let mut read = |parent: &JobId| -> Vec<Waiting> {
            graph
                .get(parent.as_str())
                .map(|children| {
                    children
                        .iter()
                        .map(|(child, policy, parents)| Waiting {
                            id: id(child),
                            policy: *policy,
                            parents: parents.iter().map(|p| (id(p), None)).collect(),
                        })
                        .collect()
                })
                .unwrap_or_default()
        };
        let fates = propagate(&id("a"), Status::Dead, &mut read);
        let by: BTreeMap<String, ChildFate> = fates
            .into_iter()
            .map(|(j, f)| (j.as_str().to_owned(), f))
            .collect();
        assert_eq!(by["b"], ChildFate::Cancel(id("a"), Status::Dead));
        assert_eq!(by["c"], ChildFate::Cancel(id("b"), Status::Cancelled));
        assert_eq!(by["d"], ChildFate::Cancel(id("a"), Status::Dead));
        assert_eq!(by["r"], ChildFate::Due);
        assert_eq!(by.len(), 4, "each child decided once: {by:?}");
        // Done, a releases r and keeps b (its only parent done: due) and d waiting on b.
        let fates = propagate(&id("a"), Status::Done, &mut read);
        let by: BTreeMap<String, ChildFate> = fates
            .into_iter()
            .map(|(j, f)| (j.as_str().to_owned(), f))
            .collect();
        assert_eq!(
            by.keys().map(String::as_str).collect::<Vec<_>>(),
            ["b", "r"],
            "d still waits on b"
        );
    }

    #[test]
    fn ten_thousand_children_of_one_parent_are_all_released() {
        let mut read = |parent: &JobId| -> Vec<Waiting> {
            if parent.as_str() != "root" {
                return Vec::new();
            }
            (0..10_000)
                .map(|n| Waiting {
                    id: id(&format!("c{n}")),
                    policy: OnParentFailure::Cancel,
                    parents: vec![(id("root"), None)],
                })
                .collect()
        };
        let fates = propagate(&id("root"), Status::Done, &mut read);
        assert_eq!(fates.len(), 10_000);
        assert!(fates.iter().all(|(_, f)| *f == ChildFate::Due));
    }

    #[test]
    fn a_policy_and_a_checkpoint_name_are_checked() {
        assert_eq!(OnParentFailure::parse("run").unwrap(), OnParentFailure::Run);
        assert_eq!(OnParentFailure::default().as_str(), "cancel");
        assert!(
            OnParentFailure::parse("skip")
                .unwrap_err()
                .to_string()
                .contains("skip")
        );
        assert!(CheckpointName::new("fetch").is_ok());
        for bad in [String::new(), "x".repeat(257), "a\0b".to_owned()] {
            assert!(
                CheckpointName::new(bad)
                    .unwrap_err()
                    .to_string()
                    .contains("name")
            );
        }
        assert!(CheckpointName::new("x".repeat(256)).is_ok());
    }

    #[test]
    fn a_checkpoint_value_over_the_limit_or_with_nul_is_refused_naming_it() {
        assert!(CheckpointValue::new("x".repeat(MAX_CHECKPOINT_VALUE_BYTES)).is_ok());
        let long = CheckpointValue::new("x".repeat(MAX_CHECKPOINT_VALUE_BYTES + 1)).unwrap_err();
        assert!(long.to_string().contains("(value)"), "{long}");
        let nul = CheckpointValue::new("a\0b").unwrap_err();
        assert!(nul.to_string().contains("checkpoint value"), "{nul}");
    }

    #[test]
    fn a_job_keeps_at_most_the_checkpoint_limit_but_may_always_rewrite_a_name() {
        let job = id("j");
        assert!(checkpoint_fits(&job, MAX_CHECKPOINTS - 1, false).is_ok());
        assert_eq!(
            checkpoint_fits(&job, MAX_CHECKPOINTS, false),
            Err(WorkflowRefused::TooManyCheckpoints(job.clone()))
        );
        assert!(checkpoint_fits(&job, MAX_CHECKPOINTS, true).is_ok());
    }

    #[test]
    fn a_done_parent_weighs_on_no_decision_so_a_store_may_leave_it_out() {
        let stands = [
            None,
            Some(Status::Done),
            Some(Status::Dead),
            Some(Status::Cancelled),
        ];
        for policy in [OnParentFailure::Cancel, OnParentFailure::Run] {
            for a in stands {
                for b in stands {
                    let all = [(id("a"), a), (id("done"), Some(Status::Done)), (id("b"), b)];
                    let without: Vec<_> = all
                        .iter()
                        .filter(|(_, s)| *s != Some(Status::Done))
                        .cloned()
                        .collect();
                    assert_eq!(
                        decide_child(policy, &all),
                        decide_child(policy, &without),
                        "{policy:?} {a:?} {b:?}"
                    );
                }
            }
        }
    }
}

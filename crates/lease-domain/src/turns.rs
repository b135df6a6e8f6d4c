//! Fair claims: a queue with `fair` set serves its groups in turn, the group served least
//! recently first, so that a group with a large backlog cannot starve one enqueued later.
//!
//! The rule, which every store follows with its own reads:
//! - every group of the queue with an unfinished job has a [`Turn`]: the number of the queue's
//!   lease that last served it (`served`; 0 for a group never served) and its key;
//! - a fair claim first takes the due jobs without a group, in claim order (each is as if its
//!   own group, never served); then it visits the groups in [`Turn`] order and offers each its
//!   due jobs in claim order (the group rules of [`crate::GroupGate`] still decide which it
//!   may lease);
//! - each lease moves its group behind every other ([`Turn::next_served`]), so a claim that
//!   wants more than one job goes round the groups, and the next claim starts with the group
//!   that has waited longest;
//! - a group left with no unfinished job loses its turn (a group that comes back starts as if
//!   never served).
//!
//! Priority still orders the jobs of one group; across groups the turn decides.

use crate::queue::GroupKey;
use crate::rules::Job;

/// A group's place in the turn order of a fair queue: the group served least recently first,
/// then by key. Ordered by `served`, then `group`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Turn {
    /// The number of the queue's lease that last served the group (0: never served).
    pub served: u64,
    /// The group.
    pub group: GroupKey,
}

impl Turn {
    /// The `served` a lease gives its group: after every group of the queue, when `last` is
    /// the largest the queue has given (0 for none).
    #[must_use]
    pub fn next_served(last: u64) -> u64 {
        last.saturating_add(1)
    }

    /// The group whose turn `job` keeps: its group while it is unfinished (a store gives the
    /// group a turn, as never served, when it has none).
    #[must_use]
    pub fn kept_by(job: &Job) -> Option<&GroupKey> {
        job.group.as_ref().filter(|_| job.finished().is_none())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn group(name: &str) -> GroupKey {
        GroupKey::new(name).unwrap()
    }

    /// Serves `claims` leases one at a time from `backlog` (jobs per group) by the turn rule,
    /// adding the `late` groups (with their jobs) after `after` leases; returns the groups in
    /// the order served.
    fn serve(
        backlog: &[(&str, usize)],
        late: &[(&str, usize)],
        after: usize,
        claims: usize,
    ) -> Vec<String> {
        let mut left: BTreeMap<GroupKey, usize> =
            backlog.iter().map(|(g, n)| (group(g), *n)).collect();
        let mut turns: BTreeMap<GroupKey, u64> = left.keys().map(|g| (g.clone(), 0)).collect();
        let mut last = 0;
        let mut served = Vec::new();
        for n in 0..claims {
            if n == after {
                for (g, jobs) in late {
                    left.insert(group(g), *jobs);
                    turns.entry(group(g)).or_insert(0);
                }
            }
            let next = turns
                .iter()
                .map(|(group, served)| Turn {
                    served: *served,
                    group: group.clone(),
                })
                .filter(|turn| left.get(&turn.group).is_some_and(|n| *n > 0))
                .min();
            let Some(turn) = next else { break };
            last = Turn::next_served(last);
            turns.insert(turn.group.clone(), last);
            *left.get_mut(&turn.group).unwrap() -= 1;
            if left[&turn.group] == 0 {
                turns.remove(&turn.group);
            }
            served.push(turn.group.as_str().to_owned());
        }
        served
    }

    #[test]
    fn groups_with_work_are_served_in_turn_whatever_their_backlog() {
        let served = serve(&[("big", 1_000), ("a", 2), ("b", 2)], &[], 0, 7);
        assert_eq!(served, ["a", "b", "big", "a", "b", "big", "big"]);
    }

    #[test]
    fn a_group_that_arrives_late_is_served_within_one_round() {
        // "big" has been served 100 times in a row when three small groups arrive.
        let served = serve(&[("big", 1_000)], &[("x", 1), ("y", 1), ("z", 1)], 100, 104);
        assert!(served[..100].iter().all(|g| g == "big"));
        let mut round: Vec<&str> = served[100..103].iter().map(String::as_str).collect();
        round.sort_unstable();
        assert_eq!(round, ["x", "y", "z"]);
        assert_eq!(served[103], "big");
    }

    #[test]
    fn the_group_that_waited_longest_goes_first() {
        let a = Turn {
            served: 3,
            group: group("z"),
        };
        let b = Turn {
            served: 5,
            group: group("a"),
        };
        let never = Turn {
            served: 0,
            group: group("m"),
        };
        let mut turns = vec![b.clone(), a.clone(), never.clone()];
        turns.sort();
        assert_eq!(turns, [never, a, b]);
        assert_eq!(Turn::next_served(5), 6);
        assert_eq!(Turn::next_served(u64::MAX), u64::MAX);
    }
}

//! The fair walk: the jobs without a group, then one lease per group on its turn.

use lease_domain::{GroupKey, GroupTurn, JobId};

use super::*;

/// The fair walk.
#[derive(Debug)]
pub(super) struct Fair {
    pub(super) phase: Phase,
    pub(super) after: Option<(u64, GroupKey)>,
}

#[derive(Debug)]
pub(super) enum Phase {
    /// Offering the jobs without a group.
    Ungrouped,
    /// Looking for the next turn.
    Turns,
    /// Reading a group's standing before its turn.
    Learn(GroupKey),
    /// A group's turn.
    Group {
        group: GroupKey,
        only: Option<Vec<JobId>>,
        leased: usize,
        found: bool,
        /// The last read left nothing to decide: the turn ends.
        over: bool,
    },
    Over,
}

impl ClaimWalk {
    /// The next step of a fair walk ([`lease_domain::Turn`]): the due jobs without a group
    /// first, then each group's on its turn, the group served least recently first, one lease
    /// a turn; each lease moves its group behind every other, and a group found with no
    /// candidate loses its turn when it has no unfinished job.
    pub(super) fn fair_step(&mut self, fair: &mut Fair) -> Option<Read> {
        loop {
            if self.is_full() && !matches!(fair.phase, Phase::Group { .. }) {
                fair.phase = Phase::Over;
            }
            match &mut fair.phase {
                Phase::Over => return None,
                Phase::Ungrouped => {
                    return Some(Read::Due {
                        group: None,
                        want: self.limit - self.leases.len(),
                    });
                }
                Phase::Turns => {
                    return Some(Read::Turn {
                        after: fair.after.clone(),
                    });
                }
                Phase::Learn(group) => return Some(Read::Standing(vec![group.clone()])),
                Phase::Group {
                    group,
                    only,
                    leased,
                    found,
                    over,
                } => {
                    if !*over && *leased == 0 && !self.is_full() {
                        return Some(match only {
                            Some(ids) => Read::Jobs(ids.clone()),
                            None => Read::Due {
                                group: Some(group.clone()),
                                want: 1,
                            },
                        });
                    }
                    if *leased > 0 {
                        self.effects.push(Effect::ServeTurn(group.clone()));
                    } else if !*found {
                        self.effects.push(Effect::DropTurn(group.clone()));
                    }
                    fair.phase = Phase::Turns;
                }
            }
        }
    }

    pub(super) fn fair_answer(
        &mut self,
        fair: &mut Fair,
        answer: Answer,
    ) -> Result<(), crate::StoreError> {
        match (&mut fair.phase, answer) {
            (Phase::Ungrouped, Answer::Candidates(term, read)) => {
                self.term = term;
                if !self.offer(term, read, usize::MAX) {
                    fair.phase = Phase::Turns;
                }
            }
            (Phase::Turns, Answer::Turn(turn)) => match turn {
                None => fair.phase = Phase::Over,
                Some(turn) => {
                    let group = turn.1.clone();
                    fair.after = Some(turn);
                    fair.phase = if self.gate.must_learn(&group) {
                        Phase::Learn(group)
                    } else {
                        self.enter_turn(group)
                    };
                }
            },
            (Phase::Learn(group), Answer::Standing { bearing, counting }) => {
                let group = group.clone();
                self.gate.learn(
                    std::slice::from_ref(&group),
                    &bearing,
                    &counting,
                    self.term.now(),
                );
                fair.phase = self.enter_turn(group);
            }
            (
                Phase::Group {
                    only,
                    leased,
                    found,
                    over,
                    ..
                },
                Answer::Candidates(term, mut read),
            ) => {
                self.term = term;
                if only.is_some() {
                    read.retain(|c| c.job.is_claim_candidate(term.now()));
                    read.sort_by_key(Candidate::key);
                }
                *found |= !read.is_empty();
                let before = self.leases.len();
                // One lease a turn.
                *over = !self.offer(term, read, 1);
                *leased += self.leases.len() - before;
            }
            (phase, other) => {
                return Err(wrong_answer(&format!("the answer in {phase:?}"), &other));
            }
        }
        Ok(())
    }

    /// What a fair walk does on `group`'s turn.
    pub(super) fn enter_turn(&self, group: GroupKey) -> Phase {
        let only = match self.gate.turn(&group) {
            GroupTurn::Closed => return Phase::Turns,
            GroupTurn::Only(ids) => Some(ids.into_iter().cloned().collect()),
            GroupTurn::Open => None,
        };
        Phase::Group {
            group,
            only,
            leased: 0,
            found: false,
            over: false,
        }
    }
}

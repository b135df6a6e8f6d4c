//! Copying jobs between stores without ever reissuing a fence: how an incoming job meets what
//! the target already holds (a job with the same id, or the fence a purged id had).

use crate::rules::Job;
use crate::values::{Epoch, Fence, Timestamp};

/// What to do with one incoming job.
#[derive(Debug, Clone, PartialEq)]
pub enum ImportDecision {
    /// The target has no such job: store this one.
    Insert(Job),
    /// The target's job has a smaller fence: store the incoming one over it.
    Replace(Job),
    /// The target's job has the same or a larger fence: keep it.
    Keep,
}

/// Decides an incoming job against the target's job with the same id and the fence the target
/// remembers for that id if it was purged there. The larger fence always wins, so the next
/// claim on the target is above every fence either side handed out.
#[must_use]
pub fn decide_import(
    incoming: &Job,
    existing: Option<&Job>,
    purged: Option<Fence>,
) -> ImportDecision {
    match existing {
        Some(current) if current.fence >= incoming.fence => ImportDecision::Keep,
        Some(_) => ImportDecision::Replace(incoming.clone()),
        None => ImportDecision::Insert(raise_fence(incoming, purged)),
    }
}

/// The job with its fence raised to `floor` if that is higher. A lease taken under the lower
/// fence cannot be the current one any more, so it is given back (no owner, `until = 0`); a
/// result stays.
#[must_use]
pub fn raise_fence(job: &Job, floor: Option<Fence>) -> Job {
    match floor {
        Some(floor) if floor > job.fence => Job {
            fence: floor,
            owner: None,
            until: Timestamp::ZERO,
            ..job.clone()
        },
        _ => job.clone(),
    }
}

/// The epoch a target must be at, at least, once it holds a source's jobs: the source's own
/// epoch and the epoch of every fence it brings (jobs and purge marks), so that a fence the
/// target hands out after a loss of its own history is above every fence either side handed
/// out before.
#[must_use]
pub fn carried_epoch(source: Epoch, fences: impl IntoIterator<Item = Fence>) -> Epoch {
    fences
        .into_iter()
        .map(Fence::epoch)
        .fold(source, std::cmp::max)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::values::Owner;

    fn job(fence: u64) -> Job {
        Job {
            fence: Fence::new(fence).unwrap(),
            owner: Some(Owner::new("w").unwrap()),
            until: Timestamp::new(50.0).unwrap(),
            ..Job::new()
        }
    }

    #[test]
    fn the_larger_fence_wins_and_a_tie_keeps_the_target() {
        assert_eq!(
            decide_import(&job(3), Some(&job(7)), None),
            ImportDecision::Keep
        );
        assert_eq!(
            decide_import(&job(7), Some(&job(7)), None),
            ImportDecision::Keep
        );
        assert_eq!(
            decide_import(&job(9), Some(&job(7)), None),
            ImportDecision::Replace(job(9))
        );
        assert_eq!(
            decide_import(&job(2), None, None),
            ImportDecision::Insert(job(2))
        );
    }

    #[test]
    fn a_purged_id_lifts_the_incoming_fence_and_ends_its_lease() {
        let ImportDecision::Insert(lifted) =
            decide_import(&job(2), None, Some(Fence::new(5).unwrap()))
        else {
            panic!("a missing job is inserted");
        };
        assert_eq!(lifted.fence, Fence::new(5).unwrap());
        assert_eq!((lifted.owner, lifted.until), (None, Timestamp::ZERO));
        assert_eq!(raise_fence(&job(6), Some(Fence::new(5).unwrap())), job(6));
    }

    #[test]
    fn the_carried_epoch_is_the_sources_or_that_of_a_later_fence_it_brings() {
        let e = |n| Epoch::new(n).unwrap();
        assert_eq!(carried_epoch(e(2), []), e(2));
        assert_eq!(carried_epoch(e(2), [job(7).fence]), e(2));
        let from_epoch_5 = e(5).first_fence();
        assert_eq!(carried_epoch(e(2), [job(7).fence, from_epoch_5]), e(5));
        assert_eq!(carried_epoch(Epoch::ZERO, [Fence::ZERO]), Epoch::ZERO);
    }
}

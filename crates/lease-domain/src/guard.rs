//! The resource side of fencing: a protected resource keeps, per key, the highest fence it has
//! seen, and accepts a write only from a fence at least that high.

use crate::values::Fence;

/// Why a protected resource refused a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("fence {presented} is stale (the resource has seen fence {current})")]
pub struct GuardRefused {
    /// The fence the writer presented.
    pub presented: Fence,
    /// The highest fence the resource has seen for the key.
    pub current: Fence,
}

/// Decides a write to a protected resource: accepted when `presented` is at least the highest
/// fence seen for the key (`current`, `None` before the first write); equal means the same
/// holder writing again, higher means a newer holder. Returns the fence to keep.
///
/// # Errors
/// [`GuardRefused`] for a lower fence: a stale holder, whose write must not happen.
pub fn decide_guard(current: Option<Fence>, presented: Fence) -> Result<Fence, GuardRefused> {
    match current {
        Some(current) if presented < current => Err(GuardRefused { presented, current }),
        _ => Ok(presented),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fence(n: u64) -> Fence {
        Fence::new(n).unwrap()
    }

    #[test]
    fn a_resource_accepts_the_same_or_a_newer_fence_and_refuses_an_older_one() {
        assert_eq!(decide_guard(None, fence(1)), Ok(fence(1)));
        assert_eq!(decide_guard(Some(fence(2)), fence(2)), Ok(fence(2)));
        assert_eq!(decide_guard(Some(fence(2)), fence(3)), Ok(fence(3)));
        let refused = decide_guard(Some(fence(3)), fence(2)).unwrap_err();
        assert_eq!(
            refused,
            GuardRefused {
                presented: fence(2),
                current: fence(3)
            }
        );
        assert_eq!(
            refused.to_string(),
            "fence 2 is stale (the resource has seen fence 3)"
        );
    }
}

//! A child process a test starts, killed and reaped when the test ends, pass or fail: a test
//! that panics half way never leaves a `lease work` or `lease serve` running.

use std::process::{Child, Output};

/// A child process killed (if it still runs) and reaped when dropped; use it as the `Child`
/// (`spawn().map(Reaped::new)`).
pub struct Reaped(Option<Child>);

impl Reaped {
    pub fn new(child: Child) -> Self {
        Self(Some(child))
    }

    /// `Child::wait_with_output`, which takes the child.
    pub fn wait_with_output(mut self) -> std::io::Result<Output> {
        self.0
            .take()
            .expect("not yet waited for")
            .wait_with_output()
    }
}

impl std::ops::Deref for Reaped {
    type Target = Child;
    fn deref(&self) -> &Child {
        self.0.as_ref().expect("not yet waited for")
    }
}

impl std::ops::DerefMut for Reaped {
    fn deref_mut(&mut self) -> &mut Child {
        self.0.as_mut().expect("not yet waited for")
    }
}

impl Drop for Reaped {
    fn drop(&mut self) {
        if let Some(child) = self.0.as_mut() {
            if matches!(child.try_wait(), Ok(None)) {
                let _ = child.kill();
            }
            let _ = child.wait();
        }
    }
}

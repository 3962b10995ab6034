//! [`Permit`]: one slot of a concurrency limit, given back on drop.

use core::fmt;
use std::sync::Arc;

use super::direct::Core;
use super::keyed::KeyedCore;

/// One slot of a [`ConcurrencyLimiter`](super::ConcurrencyLimiter) or of one key of a
/// [`KeyedConcurrencyLimiter`](super::KeyedConcurrencyLimiter), held until dropped.
///
/// Dropping it gives the slot back on every path: a normal return, a panic unwinding past
/// it, a future holding it dropped. [`release`](Self::release) gives it back early, by name.
/// A permit owns a reference to its limiter's counter (`Send + 'static`): it may move to
/// another thread or task, and outlive the limiter that handed it out.
///
/// ```
/// use std::num::NonZeroU32;
/// use tollgate::concurrency::ConcurrencyLimiter;
///
/// let lim = ConcurrencyLimiter::new(NonZeroU32::new(1).unwrap());
/// let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
///     let _permit = lim.try_acquire().unwrap();
///     panic!("the handler failed");
/// }));
/// assert!(caught.is_err());
/// assert_eq!(lim.in_flight(), 0); // given back while unwinding
/// # Ok::<(), tollgate::concurrency::Saturated>(())
/// ```
#[must_use = "a permit gives its slot back as soon as it is dropped"]
pub struct Permit {
    from: Option<From>,
}

enum From {
    Direct(Arc<Core>),
    Keyed(Arc<KeyedCore>, u64),
}

impl Permit {
    #[inline]
    pub(super) fn direct(core: Arc<Core>) -> Self {
        Self {
            from: Some(From::Direct(core)),
        }
    }

    #[inline]
    pub(super) fn keyed(core: Arc<KeyedCore>, fp: u64) -> Self {
        Self {
            from: Some(From::Keyed(core, fp)),
        }
    }

    /// Gives the slot back now (what dropping the permit does).
    #[inline]
    pub fn release(self) {
        drop(self);
    }
}

impl Drop for Permit {
    #[inline]
    fn drop(&mut self) {
        match self.from.take() {
            Some(From::Direct(core)) => core.release(),
            Some(From::Keyed(core, fp)) => core.release(fp),
            None => {}
        }
    }
}

impl fmt::Debug for Permit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.from {
            Some(From::Direct(_)) => "direct",
            Some(From::Keyed(..)) => "keyed",
            None => "released",
        };
        f.debug_struct("Permit").field("of", &kind).finish()
    }
}

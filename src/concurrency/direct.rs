//! [`ConcurrencyLimiter`]: one count of permits in flight against one limit, both in one
//! atomic word (see the module's docs for the argument).

use core::fmt;
use core::num::NonZeroU32;
#[cfg(feature = "tokio")]
use core::time::Duration;
use std::sync::Arc;

use super::permit::Permit;
use super::queue::WaitQueue;
use super::{LimitError, Saturated};
use crate::shaping::priority::Priorities;
use crate::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use crate::sync::Mutex;

/// The shared state of a [`ConcurrencyLimiter`] and its clones and permits.
pub(crate) struct Core {
    /// `limit << 32 | QUEUED? | in_flight` (31 bits). In flight never exceeds
    /// [`MAX_IN_FLIGHT`] (an acquire needs it below the slots, which are capped there), so a
    /// `+ 1` never carries into the flag, and a release only subtracts a count that an
    /// acquire added.
    ///
    /// The flag says waiters are queued (set and cleared under `queue`'s lock). It lives in
    /// the word so that a release learns it from its own `fetch_sub`: a waiter sets it with a
    /// `fetch_or` *before* its grant attempt, and both are read-modify-writes of one
    /// location, so either the release comes first (and the attempt, which reads the word
    /// after the `fetch_or`, sees the freed slot) or it sees the flag and grants. No wake-up
    /// is lost without any ordering across two atomics (`concurrency_wait_loses_no_wake_up`).
    word: AtomicU64,
    /// How many waiters are queued (written under `queue`'s lock), for [`waiting`].
    ///
    /// [`waiting`]: ConcurrencyLimiter::waiting
    pub(super) waiting: AtomicUsize,
    pub(super) queue: Mutex<WaitQueue>,
    /// Acquires refused (at once, or after a wait): a statistic, nothing is ordered by it.
    pub(super) saturations: AtomicU64,
    priorities: Option<Priorities>,
    #[cfg(feature = "tokio")]
    pub(super) max_wait: Option<Duration>,
}

/// The word's bit saying waiters are queued.
const QUEUED: u64 = 1 << 31;

/// The most permits a limiter hands out at once, whatever its limit: 2^31 − 1 (the count's
/// bits in the word).
pub(super) const MAX_IN_FLIGHT: u32 = (1 << 31) - 1;

#[inline]
fn split(word: u64) -> (u32, u32) {
    // The limit and the count, by construction (the count's 31 bits).
    (
        (word >> 32) as u32,
        (word & u64::from(MAX_IN_FLIGHT)) as u32,
    )
}

impl Core {
    #[inline]
    fn slots(&self, limit: u32, class: u8) -> u32 {
        let limit = limit.min(MAX_IN_FLIGHT);
        match &self.priorities {
            None => limit,
            Some(p) => p.reserve_of(class).slots(limit),
        }
    }

    /// Takes one slot for `class` if one is open: the one step that admits.
    #[inline]
    pub(super) fn take(&self, class: u8) -> Result<(), Saturated> {
        // A waiter's attempt reads the word after its own `fetch_or` of the flag (coherence
        // on one location: no stronger ordering needed).
        let mut w = self.word.load(Ordering::Relaxed);
        loop {
            let (limit, n) = split(w);
            let slots = self.slots(limit, class);
            if n >= slots {
                return Err(Saturated::limit_reached(limit, n, slots));
            }
            match self
                .word
                .compare_exchange_weak(w, w + 1, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => return Ok(()),
                Err(now) => w = now,
            }
        }
    }

    /// Gives one slot back, and hands it on to a waiter if any is queued.
    #[inline]
    pub(crate) fn release(&self) {
        if self.word.fetch_sub(1, Ordering::AcqRel) & QUEUED != 0 {
            self.grant(&mut self.queue.lock());
        }
    }

    /// Queues a waiter of `class` and tries to grant it (and any earlier one) a slot at
    /// once: its ticket.
    #[cfg_attr(not(any(feature = "tokio", loom)), allow(dead_code))] // reason: the waits'
    pub(super) fn enqueue(&self, class: u8) -> u64 {
        let mut q = self.queue.lock();
        let id = q.push(class);
        // The flag is set before the grant attempt (see `word`). Set after it, a release in
        // between would wake nobody: the model `concurrency_wait_loses_no_wake_up` fails so.
        self.word.fetch_or(QUEUED, Ordering::AcqRel);
        self.grant(&mut q);
        id
    }

    /// Gives one slot back with the queue's lock held.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))] // reason: the waits' (feature tokio)
    pub(super) fn release_locked(&self, q: &mut WaitQueue) {
        self.word.fetch_sub(1, Ordering::AcqRel);
        self.grant(q);
    }

    /// Grants open slots to the queued waiters (the queue's lock held).
    pub(super) fn grant(&self, q: &mut WaitQueue) {
        q.grant(|class| self.take(class));
        self.published(q);
    }

    /// Publishes the queue's count of waiters (its lock held), clearing the flag when none
    /// is left.
    pub(super) fn published(&self, q: &WaitQueue) {
        let n = q.waiting();
        self.waiting.store(n, Ordering::Release);
        if n == 0 {
            self.word.fetch_and(!QUEUED, Ordering::AcqRel);
        }
    }

    /// The refusal `class` would get now.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))] // reason: the waits' (feature tokio)
    pub(super) fn refusal(&self, class: u8) -> Saturated {
        let (limit, n) = split(self.word.load(Ordering::Acquire));
        Saturated::limit_reached(limit, n, self.slots(limit, class))
    }

    pub(super) fn in_flight(&self) -> u32 {
        split(self.word.load(Ordering::Acquire)).1
    }

    pub(super) fn limit(&self) -> u32 {
        split(self.word.load(Ordering::Acquire)).0
    }
}

/// A limit on how many permits may be out at once (one counter; see the [module
/// docs](super) for the guarantees).
///
/// Clones share one counter (as do the permits they hand out). A [`Permit`] gives its slot
/// back when dropped, and may outlive the limiter and move between threads.
///
/// ```
/// use std::num::NonZeroU32;
/// use tollgate::concurrency::ConcurrencyLimiter;
///
/// let lim = ConcurrencyLimiter::new(NonZeroU32::new(2).unwrap());
/// let clone = lim.clone(); // the same counter
/// let p = lim.try_acquire()?;
/// let q = clone.try_acquire()?;
/// assert!(lim.try_acquire().is_err());
/// // A permit can leave for another thread and outlive its limiter.
/// drop(lim);
/// std::thread::spawn(move || drop(p)).join().unwrap();
/// assert_eq!(clone.in_flight(), 1);
/// drop(q);
/// assert_eq!(clone.in_flight(), 0);
/// # Ok::<(), tollgate::concurrency::Saturated>(())
/// ```
#[derive(Clone)]
pub struct ConcurrencyLimiter {
    pub(super) core: Arc<Core>,
}

impl ConcurrencyLimiter {
    /// A limiter of `limit` permits, no priority classes, and (feature `tokio`) waits with
    /// no bound. Whatever the limit, at most 2^31 − 1 permits are out at once.
    pub fn new(limit: NonZeroU32) -> Self {
        Self::builder(limit).build()
    }

    /// [`new`](Self::new) from a plain integer.
    ///
    /// # Errors
    ///
    /// [`LimitError::Zero`] for a limit of 0.
    pub fn try_new(limit: u32) -> Result<Self, LimitError> {
        NonZeroU32::new(limit)
            .map(Self::new)
            .ok_or(LimitError::Zero)
    }

    /// A builder, for priority classes and (feature `tokio`) a bound on waits.
    pub fn builder(limit: NonZeroU32) -> ConcurrencyLimiterBuilder {
        ConcurrencyLimiterBuilder {
            limit,
            priorities: None,
            #[cfg(feature = "tokio")]
            max_wait: None,
        }
    }

    /// A permit if a slot is open, at once. Class 0 (the most critical).
    ///
    /// This never waits, and it may take a slot that frees while others wait in
    /// [`acquire`](Self::acquire) (feature `tokio`): the queue is fair among waiters.
    ///
    /// # Errors
    ///
    /// [`Saturated`] with the limit and the count in flight when every slot is taken.
    #[inline]
    pub fn try_acquire(&self) -> Result<Permit, Saturated> {
        self.try_acquire_class(0)
    }

    /// [`try_acquire`](Self::try_acquire) for a priority class: a class with a reserve
    /// leaves that share of the slots to the classes above it.
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use tollgate::concurrency::ConcurrencyLimiter;
    /// use tollgate::shaping::Priorities;
    ///
    /// // Recovery traffic (class 2) may fill half the slots; heartbeats (class 0) all.
    /// let lim = ConcurrencyLimiter::builder(NonZeroU32::new(4).unwrap())
    ///     .priorities(Priorities::new([(2, 0.5)])?)
    ///     .build();
    /// let recovery = [lim.try_acquire_class(2)?, lim.try_acquire_class(2)?];
    /// let err = lim.try_acquire_class(2).unwrap_err();
    /// assert_eq!((err.in_flight(), err.slots(), err.limit()), (2, 2, 4));
    /// let heartbeats = [lim.try_acquire()?, lim.try_acquire()?];
    /// assert_eq!(lim.in_flight(), 4);
    /// # drop((recovery, heartbeats));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Saturated`] when the class's slots are all taken.
    #[inline]
    pub fn try_acquire_class(&self, class: u8) -> Result<Permit, Saturated> {
        if let Err(s) = self.core.take(class) {
            // Relaxed: a statistic (see `saturations`).
            self.core.saturations.fetch_add(1, Ordering::Relaxed);
            return Err(s);
        }
        Ok(Permit::direct(Arc::clone(&self.core)))
    }

    /// Acquires refused so far, at once or after a wait: what a dashboard alerts on.
    pub fn saturations(&self) -> u64 {
        self.core.saturations.load(Ordering::Relaxed)
    }

    /// The permits out now.
    pub fn in_flight(&self) -> u32 {
        self.core.in_flight()
    }

    /// The limit in force.
    pub fn limit(&self) -> u32 {
        self.core.limit()
    }

    /// Waiters queued in [`acquire`](Self::acquire) (feature `tokio`).
    pub fn waiting(&self) -> usize {
        self.core.waiting.load(Ordering::Acquire)
    }

    /// Changes the limit, live. Lowering it revokes nothing: the permits out stay valid and
    /// new ones are refused until the count drains below the new limit. Raising it grants
    /// the new slots to waiters at once.
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use tollgate::concurrency::ConcurrencyLimiter;
    ///
    /// let lim = ConcurrencyLimiter::try_new(3)?;
    /// let held: Vec<_> = (0..3).map(|_| lim.try_acquire()).collect::<Result<_, _>>()?;
    /// lim.set_limit(NonZeroU32::new(1).unwrap());
    /// assert_eq!((lim.limit(), lim.in_flight()), (1, 3)); // nothing revoked
    /// let mut held = held.into_iter();
    /// drop(held.next());
    /// drop(held.next());
    /// assert!(lim.try_acquire().is_err()); // 1 in flight: still at the new limit
    /// drop(held.next());
    /// assert!(lim.try_acquire().is_ok());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_limit(&self, limit: NonZeroU32) {
        let core = &self.core;
        let mut w = core.word.load(Ordering::Relaxed);
        loop {
            let new = u64::from(limit.get()) << 32 | (w & u64::from(u32::MAX));
            match core
                .word
                .compare_exchange_weak(w, new, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => break,
                Err(now) => w = now,
            }
        }
        if w & QUEUED != 0 {
            core.grant(&mut core.queue.lock());
        }
    }

    /// [`set_limit`](Self::set_limit) from a plain integer.
    ///
    /// # Errors
    ///
    /// [`LimitError::Zero`] for 0 (the limit is left as it was).
    pub fn try_set_limit(&self, limit: u32) -> Result<(), LimitError> {
        let limit = NonZeroU32::new(limit).ok_or(LimitError::Zero)?;
        self.set_limit(limit);
        Ok(())
    }
}

/// Hooks for `tests/loom.rs`: the waits' queue protocol without an async runtime.
#[cfg(loom)]
impl ConcurrencyLimiter {
    /// Queues a waiter of class 0, as `acquire` does when no slot is open.
    #[doc(hidden)]
    pub fn loom_enqueue(&self) -> u64 {
        self.core.enqueue(0)
    }

    /// Takes ticket `id` out of the queue: whether it had been granted a slot (which the
    /// caller then owns: dropped here as a permit would be).
    #[doc(hidden)]
    pub fn loom_leave(&self, id: u64) -> bool {
        let granted = self.core.queue.lock().leave(id) == super::queue::Left::Granted;
        if granted {
            self.core.release();
        }
        granted
    }
}

impl fmt::Debug for ConcurrencyLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConcurrencyLimiter")
            .field("limit", &self.limit())
            .field("in_flight", &self.in_flight())
            .field("waiting", &self.waiting())
            .finish()
    }
}

/// Builds a [`ConcurrencyLimiter`]: [`ConcurrencyLimiter::builder`].
#[derive(Clone, Debug)]
#[must_use = "a builder does nothing until build()"]
pub struct ConcurrencyLimiterBuilder {
    limit: NonZeroU32,
    priorities: Option<Priorities>,
    #[cfg(feature = "tokio")]
    max_wait: Option<Duration>,
}

impl ConcurrencyLimiterBuilder {
    /// Priority classes: see [`try_acquire_class`](ConcurrencyLimiter::try_acquire_class).
    pub fn priorities(mut self, priorities: Priorities) -> Self {
        // Classes that reserve nothing need no arithmetic on the fast path.
        let none = priorities.classes().all(|(_, r)| r == 0.0);
        self.priorities = (!none).then_some(priorities);
        self
    }

    /// The longest an [`acquire`](ConcurrencyLimiter::acquire) waits before it returns
    /// [`Saturated`] (default: no bound).
    #[cfg(feature = "tokio")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
    pub fn max_wait(mut self, max_wait: Duration) -> Self {
        self.max_wait = Some(max_wait);
        self
    }

    /// The limiter.
    pub fn build(self) -> ConcurrencyLimiter {
        ConcurrencyLimiter {
            core: Arc::new(Core {
                word: AtomicU64::new(u64::from(self.limit.get()) << 32),
                waiting: AtomicUsize::new(0),
                queue: Mutex::new(WaitQueue::default()),
                saturations: AtomicU64::new(0),
                priorities: self.priorities,
                #[cfg(feature = "tokio")]
                max_wait: self.max_wait,
            }),
        }
    }
}

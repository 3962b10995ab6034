//! The keyed limiter's check entry points: [`check_key`](KeyedRateLimiter::check_key) and its
//! variants, the steady step they try first, and the general and attached paths they fall
//! back to. The table's own check paths are in `table.rs`.

use core::borrow::Borrow;
use core::hash::Hash;

use super::{table, Ask, KeyedRateLimiter};
use crate::engine::check::Check;
use crate::engine::error::InsufficientCapacity;
use crate::engine::verdict::Verdict;
use crate::limiter::guard::{Guard, Hot};
use crate::shaping::priority;

/// One unit for the key with fingerprint `fp`: the steady step on the limiter's hot path, or
/// the general check. A macro, not a function: written out in `check_key` itself, the step
/// keeps the shape it has under callgrind (a call in between, even `#[inline(always)]`, cost
/// 7–21 Ir per check in `benches/callgrind.sh tollgate-keyed-10k`).
macro_rules! one_unit {
    ($lim:expr, $fp:expr) => {{
        let (lim, fp) = ($lim, $fp);
        let general = || lim.check_fp_general(fp);
        match &lim.hot {
            Hot::Bare(clock) => {
                let count = table::Bump(&lim.counters);
                lim.step_steady(fp, clock.now_for_step(), count, general)
            }
            Hot::Detected(clock, d) => {
                let d = d.shared();
                if d.pass_reason().is_some() {
                    return general();
                }
                let now = clock.now_for_step();
                let count = table::ObservedAt {
                    detector: d,
                    counters: &lim.counters,
                    fp,
                    now,
                };
                lim.step_steady(fp, now, count, general)
            }
            Hot::Other => lim.check_fp(fp),
        }
    }};
}

impl<K> KeyedRateLimiter<K> {
    /// [`check_key`](Self::check_key) on another clock, or with more attached.
    #[inline(never)]
    pub(super) fn check_fp(&self, fp: u64) -> Verdict {
        let general = || self.check_fp_general(fp);
        match &self.guard {
            None => {
                let count = table::Bump(&self.counters);
                self.step_steady(fp, self.clock.now_nanos(), count, general)
            }
            // As `Hot::Detected`, with the detector on a clock of its own: counted with its
            // tick.
            Some(g) => match g.detector_only().map(|d| d.shared()) {
                Some(d) if d.pass_reason().is_none() => {
                    let count = table::Observed {
                        detector: d,
                        counters: &self.counters,
                        fp,
                    };
                    self.step_steady(fp, self.clock.now_nanos(), count, general)
                }
                _ => general(),
            },
        }
    }

    /// [`check_key`](Self::check_key) past the steady-state step: new keys, byte budgets,
    /// quota changes, anything attached. Out of line, so the fast path keeps its registers.
    #[inline(never)]
    pub(super) fn check_fp_general(&self, fp: u64) -> Verdict {
        if let Some(v) = self
            .guard
            .as_ref()
            .and_then(|g| self.check_fast_guarded(g, fp))
        {
            return v;
        }
        let snap = self.params.load_check();
        self.step_key(Ask::plain(fp, 1, snap.cur.unit()), &snap)
    }

    /// [`check_key_with`](Self::check_key_with) with something attached: the class's
    /// tolerance, the retry budget (peek, step, debit), the counts.
    #[inline(never)]
    pub(super) fn check_fp_attached(
        &self,
        g: &Guard,
        fp: u64,
        check: Check,
    ) -> Result<Verdict, InsufficientCapacity> {
        let snap = self.params.load();
        let p = snap.cur;
        let (cost, reserve) = (check.units(), g.reserve(check.priority_class()));
        let tol = reserve.tolerance(&p);
        let w = priority::weight_within(&p, cost, tol)?;
        if w == 0 {
            return Ok(self.peek_fp(fp, 0, |p| reserve.tolerance(p)));
        }
        let retry = check.attempt_number() > 0;
        if retry {
            let now = self.now();
            if let Some(v) = g.over_budget(now) {
                g.observe(&self.counters, &v, Some(fp), true, || now);
                return Ok(v);
            }
        }
        let ask = Ask {
            fp,
            cost,
            w,
            reserve,
            retry,
        };
        Ok(self.step_key_guarded(g, ask, &snap))
    }
}

impl<K: Hash> KeyedRateLimiter<K> {
    /// Checks one unit for `key`.
    #[inline]
    pub fn check_key<Q>(&self, key: &Q) -> Verdict
    where
        K: Borrow<Q>,
        Q: Hash + ?Sized,
    {
        let fp = self.fingerprinter.fingerprint(key);
        one_unit!(self, fp)
    }

    /// Checks `cost` units for `key`: all or nothing. A cost of 0 reports the remaining
    /// capacity and writes nothing (a new key is not inserted).
    ///
    /// # Errors
    ///
    /// [`InsufficientCapacity`] if `cost` exceeds the burst.
    #[inline]
    pub fn check_key_n<Q>(&self, key: &Q, cost: u64) -> Result<Verdict, InsufficientCapacity>
    where
        K: Borrow<Q>,
        Q: Hash + ?Sized,
    {
        self.check_fp_n(self.fingerprinter.fingerprint(key), cost)
    }

    /// Checks `key` with per-request arguments: cost, attempt, priority class.
    ///
    /// With [`Priorities`](crate::shaping::Priorities) attached, the check sees its class's tolerance on the key's cell;
    /// with a [`RetryBudget`](crate::shaping::RetryBudget) attached (one for the whole limiter), a retry must fit it as
    /// well as the key's quota; with a [`FaultDetector`](crate::safety::FaultDetector) attached, originals and retries are
    /// counted apart. Without them this is [`check_key_n`](Self::check_key_n).
    ///
    /// # Errors
    ///
    /// [`InsufficientCapacity`] if the cost exceeds the burst, or the capacity of its class.
    ///
    /// ```
    /// use tollgate::{Check, KeyedRateLimiter};
    /// use tollgate::shaping::Priorities;
    ///
    /// let lim = KeyedRateLimiter::<u64>::builder("10/s".parse()?)
    ///     .priorities(Priorities::new([(0, 0.0), (1, 0.3)])?)
    ///     .build();
    /// assert_eq!(lim.check_key_with(&7, Check::cost(8).class(1)).unwrap_err().capacity(), 7);
    /// assert!(lim.check_key_with(&7, Check::cost(7).class(1))?.is_permitted());
    /// assert!(lim.check_key_with(&7, Check::cost(3))?.is_permitted());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn check_key_with<Q>(&self, key: &Q, check: Check) -> Result<Verdict, InsufficientCapacity>
    where
        K: Borrow<Q>,
        Q: Hash + ?Sized,
    {
        self.check_fp_with(self.fingerprinter.fingerprint(key), check)
    }

    /// What [`check_key`](Self::check_key) would say now, without writing anything.
    pub fn peek_key<Q>(&self, key: &Q) -> Verdict
    where
        K: Borrow<Q>,
        Q: Hash + ?Sized,
    {
        self.peek_fp(self.fingerprinter.fingerprint(key), 1, |p| p.tau)
    }
}

impl KeyedRateLimiter<String> {
    /// [`check_key`](Self::check_key) of the key whose UTF-8 is `key`, fingerprinted in one
    /// SipHash pass (the gateway layer's lean path, whose keys are visible ASCII).
    #[cfg(feature = "tower")]
    #[inline]
    pub(crate) fn check_utf8(&self, key: &[u8]) -> Verdict {
        let fp = self.fingerprinter.fingerprint_utf8(key);
        one_unit!(self, fp)
    }
}

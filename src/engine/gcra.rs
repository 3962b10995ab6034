//! The pure GCRA step over integer nanoseconds.
//!
//! Vocabulary, defined once:
//!
//! * `tat` — the *theoretical arrival time*: the instant (ns since the process epoch) at which
//!   the cell would be empty again if no further work arrived. A cell with `tat <= now` is full.
//! * `w` — the *weight* of one check: `n·T` for a request quota of interval `T = ⌈P/C⌉`,
//!   `⌈n·P/C⌉` for a byte budget (P in ns, C in bytes).
//! * `tau` (τ) — the *tolerance*: how far `tat` may run ahead of `now`. `τ = burst·T` for
//!   requests, `⌈burst·P/C⌉` for bytes, clamped to [`MAX_TAU`].
//!
//! A check of weight `w` at `now` is allowed iff `max(tat, now) + w − now ≤ τ`, and then
//! `tat ← max(tat, now) + w`. Before every step `tat ← min(tat, now + τ)`. Nothing here knows
//! about clocks, atomics or Redis: [`step`] is a function of four integers.
//!
//! A quota change keeps each cell's *fill level*: a cell that has used the share
//! `u = clamp((tat − now)/τ_old, 0, 1)` of its burst has used the same share of the new burst
//! afterwards, `tat' = now + ⌈u·τ_new⌉` ([`rescale`]).

/// The largest tolerance a cell may have: 2^62 ns (about 146 years). Quotas whose
/// `burst·T` exceeds it get the largest burst that fits (see [`crate::Quota::burst`]).
pub(crate) const MAX_TAU: u64 = 1 << 62;

/// How the weight of a cost is computed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Per {
    /// A request quota: a cost of `n` weighs `n·t` ns, `t = ⌈P/C⌉ ≥ 1`.
    Request {
        /// The interval `T` in ns.
        t: u64,
    },
    /// A byte budget: a cost of `n` bytes weighs `⌈n·num/den⌉` ns, where `num/den` is the
    /// exact number of ns per byte (a reduced fraction, both non-zero).
    Byte {
        /// Numerator of ns per byte.
        num: u64,
        /// Denominator of ns per byte.
        den: u128,
    },
}

/// The parameters of one cell, derived from a [`crate::Quota`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Params {
    /// How costs become weights.
    pub(crate) per: Per,
    /// The tolerance τ in ns, `1 ≤ tau ≤ MAX_TAU`.
    pub(crate) tau: u64,
    /// The effective burst in work units (requests or bytes): the largest cost a check may ask.
    pub(crate) burst: u64,
    /// How far past `now + τ` a [charge](crate::engine::charge) may push the TAT, in ns
    /// (`0 ≤ debt ≤` [`MAX_TAU`]; 0 unless a limiter is built with `max_debt`). Checks never
    /// push it there: they are allowed only while `tat − now ≤ τ` after their step.
    pub(crate) debt: u64,
}

impl Params {
    /// The parameters a one-request step reads: `T` and `τ` (the burst is not consulted).
    #[inline]
    pub(crate) fn request(t: u64, tau: u64) -> Self {
        Self {
            per: Per::Request { t },
            tau,
            burst: u64::MAX,
            debt: 0,
        }
    }

    /// The same parameters with a debt cap of `debt` ns.
    #[inline]
    pub(crate) fn with_debt(self, debt: u64) -> Self {
        Self { debt, ..self }
    }

    /// How far ahead of `now` a TAT may stand: `τ + debt` (at most 2^63, so `now + bound`
    /// saturates exactly as `now + τ` does). The clamp before every step lowers a TAT to it.
    #[inline]
    pub(crate) fn bound(&self) -> u64 {
        self.tau + self.debt
    }

    /// The same parameters with the tolerance of a priority class, `tol ≤ τ`: what the class
    /// is allowed and told (its remaining capacity, its retry-after).
    #[inline]
    pub(crate) fn within(&self, tol: u64) -> Self {
        Self { tau: tol, ..*self }
    }

    /// The weight of one unit (a request, or a byte), the cost of [`crate::RateLimiter::check`].
    #[inline]
    pub(crate) fn unit(&self) -> u64 {
        match self.per {
            Per::Request { t } => t,
            // Every burst is at least 1, so one unit always has a weight ≤ τ.
            Per::Byte { .. } => self.weight(1).unwrap_or(self.tau),
        }
    }
}

impl Params {
    /// The weight in ns of a cost of `n` units, or `None` if `n` exceeds the burst (then the
    /// check can never conform: [`crate::InsufficientCapacity`]).
    #[inline]
    pub(crate) fn weight(&self, n: u64) -> Option<u64> {
        if n > self.burst {
            return None;
        }
        match self.per {
            // n ≤ burst, so n·t ≤ τ ≤ MAX_TAU: no overflow.
            Per::Request { t } => Some(n * t),
            Per::Byte { num, den } => Some(byte_weight(n, num, den)),
        }
    }

    /// `slack`, or the weight of one unit (capped at τ) if `slack` holds less than one: the
    /// least tolerance a priority class gets. No division unless `slack` is raised.
    #[inline]
    pub(crate) fn at_least_one_unit(&self, slack: u64) -> u64 {
        let holds = match self.per {
            Per::Request { t } => slack >= t,
            // `⌊slack·den/num⌋ ≥ 1`, as in `bytes_in`; an overflowing product holds plenty.
            Per::Byte { num, den } => u128::from(slack)
                .checked_mul(den)
                .is_none_or(|x| x >= u128::from(num)),
        };
        if holds {
            slack
        } else {
            self.unit().min(self.tau)
        }
    }

    /// How many units fit in `slack` ns of tolerance, capped at the burst.
    #[inline]
    pub(crate) fn units_in(&self, slack: u64) -> u64 {
        let units = match self.per {
            Per::Request { t } => slack / t,
            Per::Byte { num, den } => bytes_in(slack, num, den),
        };
        units.min(self.burst)
    }
}

/// `⌈n·num/den⌉`: the weight of `n` bytes. Out of line: u128 division stays off the request
/// path.
#[cold]
#[inline(never)]
fn byte_weight(n: u64, num: u64, den: u128) -> u64 {
    ceil_div(u128::from(n) * u128::from(num), den)
}

/// `⌊slack·den/num⌋`: the bytes that fit in `slack` ns.
#[cold]
#[inline(never)]
fn bytes_in(slack: u64, num: u64, den: u128) -> u64 {
    match u128::from(slack).checked_mul(den) {
        Some(x) => u64::try_from(x / u128::from(num.max(1))).unwrap_or(u64::MAX),
        None => u64::MAX,
    }
}

/// `⌈a / b⌉` for `b > 0`; the result fits u64 whenever it is at most τ.
#[inline]
fn ceil_div(a: u128, b: u128) -> u64 {
    let q = a / b + u128::from(a % b != 0);
    u64::try_from(q).unwrap_or(u64::MAX)
}

/// The outcome of one step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Conforms: store `tat` (the new TAT). `ahead = tat − now`.
    Allow { tat: u64, ahead: u64 },
    /// Does not conform: allowed again after exactly `retry_after` ns.
    Deny { retry_after: u64 },
    /// The new TAT would not fit in u64 (a clock reading near `u64::MAX`): denied.
    Overflow,
}

/// The largest TAT a cell may hold; `u64::MAX` is reserved (the keyed table's tombstone).
pub(crate) const MAX_TAT: u64 = u64::MAX - 1;

/// `min(tat, now + bound)`: the clamp applied before every step, `bound = τ` or
/// [`Params::bound`] (τ plus the debt a charge may leave). `now + bound` saturates, which is
/// exact here: if it overflows, it exceeds every `tat`.
#[inline]
pub(crate) fn clamp(tat: u64, now: u64, bound: u64) -> u64 {
    tat.min(now.saturating_add(bound))
}

/// One GCRA step of weight `w ≤ τ` at `now` on an already clamped `tat`.
#[inline]
pub(crate) fn step(tat: u64, now: u64, w: u64, tau: u64) -> Outcome {
    let base = tat.max(now);
    // Overflow first: a denial's retry-after must be exact, and a check whose TAT cannot fit
    // will not fit later either.
    let tat = match base.checked_add(w) {
        Some(tat) if tat <= MAX_TAT => tat,
        _ => return Outcome::Overflow,
    };
    // base − now ≤ τ + debt ≤ 2^63 after the clamp, and w ≤ τ ≤ 2^62: the sum cannot overflow.
    let ahead = (base - now) + w;
    if ahead > tau {
        return Outcome::Deny {
            retry_after: ahead - tau,
        };
    }
    Outcome::Allow { tat, ahead }
}

/// The TAT that keeps a cell's fill level across a quota change at `now` from tolerance
/// `tau_old` to `tau_new`: `now + ⌈u·τ_new⌉` with `u = clamp((tat − now)/τ_old, 0, 1)`,
/// rounded toward "used" so that a change never grants. Empty stays empty (a TAT at or
/// before `now` is returned as it is), full stays full, and A→B→A hands out nothing.
/// Exact: the product is taken in u128 (both factors are below 2^63).
#[inline]
pub(crate) fn rescale(tat: u64, now: u64, tau_old: u64, tau_new: u64) -> u64 {
    if tat <= now {
        return tat;
    }
    let ahead = (tat - now).min(tau_old);
    let scaled = u128::from(ahead) * u128::from(tau_new);
    // ahead ≤ τ_old, so the quotient is at most τ_new ≤ MAX_TAU: it fits u64.
    let ahead = ceil_div(scaled, u128::from(tau_old.max(1)));
    now.saturating_add(ahead).min(MAX_TAT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rescale_keeps_the_fill_level() {
        // Empty stays empty (whatever the old TAT in the past), full stays full, half stays
        // half, and a share that does not divide evenly rounds toward "used".
        assert_eq!(rescale(40, 100, 50, 500), 40);
        assert_eq!(rescale(100, 100, 50, 500), 100);
        assert_eq!(rescale(150, 100, 50, 500), 600);
        assert_eq!(
            rescale(10_000, 100, 50, 500),
            600,
            "past full: clamped to full"
        );
        assert_eq!(rescale(125, 100, 50, 500), 350);
        assert_eq!(rescale(101, 100, 3, 10), 104, "1/3 of 10 rounds up to 4");
        // A toggle grants nothing: A -> B -> A never lowers the TAT.
        for tat in 100..=200 {
            let there = rescale(tat, 100, 100, 7);
            assert!(rescale(there, 100, 7, 100) >= tat, "{tat}");
        }
        // Exact at the largest tolerances.
        let big = MAX_TAU;
        assert_eq!(rescale(big / 2, 0, big, big - 1), big / 2);
        assert_eq!(rescale(u64::MAX - 1, u64::MAX - 2, big, big), MAX_TAT);
    }

    #[test]
    fn burst_then_exact_retry_after() {
        let (t, tau) = (10, 30);
        let mut tat = 0;
        for _ in 0..3 {
            match step(clamp(tat, 100, tau), 100, t, tau) {
                Outcome::Allow { tat: new, .. } => tat = new,
                other => panic!("expected allow, got {other:?}"),
            }
        }
        assert_eq!(
            step(clamp(tat, 100, tau), 100, t, tau),
            Outcome::Deny { retry_after: 10 }
        );
        assert!(matches!(
            step(tat, 109, t, tau),
            Outcome::Deny { retry_after: 1 }
        ));
        assert!(matches!(step(tat, 110, t, tau), Outcome::Allow { .. }));
    }

    #[test]
    fn overflow_is_a_denial() {
        assert_eq!(step(0, u64::MAX - 1, 5, 10), Outcome::Overflow);
        assert_eq!(clamp(7, u64::MAX, MAX_TAU), 7);
    }

    #[test]
    fn byte_weights_round_up() {
        let p = Params {
            per: Per::Byte { num: 1, den: 3 },
            tau: 100,
            burst: 300,
            debt: 0,
        };
        assert_eq!(p.weight(1), Some(1));
        assert_eq!(p.weight(3), Some(1));
        assert_eq!(p.weight(4), Some(2));
        assert_eq!(p.weight(301), None);
        assert_eq!(p.units_in(2), 6);
        assert_eq!(p.units_in(u64::MAX), 300);
    }
}

//! Asking every limit about one request, all or nothing, and queue mode's waiting.

use core::task::{Context, Poll, Waker};
use core::time::Duration;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use super::layer::{Counters, Entry, Shared};
use super::response::{Figures, PassedThrough};
use super::settle::Uncounted;
use super::source::{Judgement, PolicySource, SourceError, Subject};
use crate::engine::check::Check;
use crate::engine::verdict::{Denied, Verdict};

/// The figures of the matched limits: most requests have one, which needs no vector.
#[derive(Debug, Default)]
pub(crate) enum Figs {
    #[default]
    None,
    One(Figures),
    Many(Vec<Figures>),
}

impl Figs {
    pub(crate) fn as_slice(&self) -> &[Figures] {
        match self {
            Figs::None => &[],
            Figs::One(f) => core::slice::from_ref(f),
            Figs::Many(v) => v,
        }
    }

    fn push(&mut self, f: Figures) {
        *self = match core::mem::take(self) {
            Figs::None => Figs::One(f),
            Figs::One(a) => Figs::Many(vec![a, f]),
            Figs::Many(mut v) => {
                v.push(f);
                Figs::Many(v)
            }
        };
    }

    fn len(&self) -> usize {
        self.as_slice().len()
    }
}

/// What all limits together decided.
pub(crate) enum Outcome {
    Allowed {
        figures: Figs,
        passed: Option<PassedThrough>,
        /// The limits (by index) whose check did not count the request, for its settle.
        uncounted: Uncounted,
    },
    Denied {
        figures: Figs,
        /// The index in `figures` of the limit that denied.
        denying: usize,
        denied: Denied,
        /// Queue mode was on but its caps were reached.
        queue_full: bool,
    },
    TooBig {
        policy: Arc<str>,
        cost: u64,
        capacity: u64,
    },
    /// A limit cannot take a key this long ([`SourceError::KeyTooLong`]): the client's error,
    /// never a pass-through.
    KeyTooLong {
        policy: Arc<str>,
        len: usize,
        max: usize,
    },
}

impl Outcome {
    pub(crate) fn is_denied(&self) -> bool {
        matches!(self, Outcome::Denied { .. })
    }
}

type Judged = Result<Judgement, SourceError>;

/// All limits, all or nothing: with several, peek every one; if one would deny, check only
/// that one (a denial consumes nothing) and report it; else check them all, refunding the
/// earlier ones if a later one denies in a race. A judging that stops before its outcome (a
/// user's source panics, or the future is dropped) refunds what it charged: see [`Charges`].
pub(crate) async fn judge(shared: &Shared, subject: &Subject, check: Check) -> Outcome {
    let limits = &shared.limits;
    let mut charges = Charges::new(shared, subject, check.units());
    if let [only] = &limits[..] {
        let j = only.source.check(subject, check).resolve().await;
        let mut acc = Acc::default();
        acc.add(shared, 0, only, j);
        return acc.finish(charges).await;
    }
    let none = || {
        (0..limits.len())
            .map(|_| None)
            .collect::<Vec<Option<Judged>>>()
    };
    let (mut judged, mut peeked) = (none(), none());
    let mut short_circuit = false;
    for (i, e) in limits.iter().enumerate() {
        let p = e.source.peek(subject, check).resolve().await;
        let short = match &p {
            Err(SourceError::InsufficientCapacity(_) | SourceError::KeyTooLong { .. }) => true,
            Ok(j) => match j.verdict() {
                Verdict::Deny(_) => true,
                Verdict::Allow(a) => j.is_matched() && a.remaining() < check.units(),
                _ => false,
            },
            Err(_) => false,
        };
        peeked[i] = Some(p);
        if short {
            let j = e.source.check(subject, check).resolve().await;
            charges.note(e, &j);
            short_circuit = !is_permitted(&j);
            judged[i] = Some(j);
            if short_circuit {
                break;
            }
        }
    }
    if !short_circuit {
        for (i, e) in limits.iter().enumerate() {
            if judged[i].is_none() {
                let j = e.source.check(subject, check).resolve().await;
                charges.note(e, &j);
                let stop = !is_permitted(&j);
                judged[i] = Some(j);
                if stop {
                    break;
                }
            }
        }
    }
    let mut acc = Acc::default();
    for (i, ((e, j), p)) in limits.iter().zip(judged).zip(peeked).enumerate() {
        match (j, p) {
            (Some(j), _) => acc.add(shared, i, e, j),
            // Peeked but not checked: shown, not charged.
            (None, Some(Ok(p))) => acc.shown(e, &p),
            (None, _) => {}
        }
    }
    acc.finish(charges).await
}

fn is_permitted(j: &Judged) -> bool {
    match j {
        Ok(j) => j.verdict().is_permitted(),
        Err(SourceError::InsufficientCapacity(_) | SourceError::KeyTooLong { .. }) => false,
        Err(_) => true,
    }
}

/// What the limits said so far.
#[derive(Default)]
struct Acc {
    figures: Figs,
    passed: Option<PassedThrough>,
    denial: Option<(usize, Denied)>,
    too_big: Option<(Arc<str>, u64, u64)>,
    key_too_long: Option<(Arc<str>, usize, usize)>,
    uncounted: Uncounted,
}

impl Acc {
    /// Adds what the `i`th limit, `e`, said.
    fn add(&mut self, shared: &Shared, i: usize, e: &Entry, j: Judged) {
        let j = match j {
            Err(SourceError::InsufficientCapacity(ic)) => {
                self.too_big = Some((Arc::clone(&e.name), ic.cost(), ic.capacity()));
                return;
            }
            Err(SourceError::KeyTooLong { len, max }) => {
                self.key_too_long = Some((Arc::clone(&e.name), len, max));
                return;
            }
            Err(_) => {
                Counters::bump(&shared.counters.source_errors);
                let policy = Arc::clone(&e.name);
                self.passed = Some(PassedThrough {
                    policy,
                    reason: None,
                });
                return;
            }
            Ok(j) if !j.is_matched() => {
                // Charged nothing: a settle must neither refund nor charge it. Kept only for
                // a layer that settles, so that no other layer pays for it.
                if !shared.settle.is_none() {
                    self.uncounted.push(i);
                }
                return;
            }
            Ok(j) => j,
        };
        let policy = Arc::clone(j.policy_arc().unwrap_or(&e.name));
        let (remaining, reset_secs) = match j.verdict() {
            Verdict::Allow(a) => (a.remaining(), secs_up(a.reset_after())),
            Verdict::Deny(d) => {
                self.denial = Some((self.figures.len(), d));
                (0, d.retry_after_secs())
            }
            Verdict::PassThrough(p) => {
                self.passed = Some(PassedThrough {
                    policy,
                    reason: Some(p.reason()),
                });
                return;
            }
        };
        let quota = j.quota();
        self.figures.push(Figures {
            policy,
            quota,
            remaining,
            reset_secs,
        });
    }

    fn shown(&mut self, e: &Entry, p: &Judgement) {
        if let (true, Verdict::Allow(a)) = (p.is_matched(), p.verdict()) {
            self.figures.push(Figures {
                policy: Arc::clone(p.policy_arc().unwrap_or(&e.name)),
                quota: p.quota(),
                remaining: a.remaining(),
                reset_secs: secs_up(a.reset_after()),
            });
        }
    }

    /// The outcome: an allowed request keeps its charges, a rejected one gives them back.
    async fn finish(self, charges: Charges<'_>) -> Outcome {
        if let Some((policy, len, max)) = self.key_too_long {
            charges.refund().await;
            return Outcome::KeyTooLong { policy, len, max };
        }
        if let Some((policy, cost, capacity)) = self.too_big {
            charges.refund().await;
            return Outcome::TooBig {
                policy,
                cost,
                capacity,
            };
        }
        match self.denial {
            Some((denying, denied)) => {
                charges.refund().await;
                Outcome::Denied {
                    figures: self.figures,
                    denying,
                    denied,
                    queue_full: false,
                }
            }
            None => {
                charges.keep();
                Outcome::Allowed {
                    figures: self.figures,
                    passed: self.passed,
                    uncounted: self.uncounted,
                }
            }
        }
    }
}

/// The limits that have charged a request so far, until its outcome is known.
///
/// Between the first charge and the outcome, user code runs (a `PolicySource` of the user's
/// own: its check, its future, its refund) and the future can be dropped (the client hung
/// up). Dropped before [`keep`](Self::keep) or the end of [`refund`](Self::refund) — by a
/// panic unwinding through the judging or by the future's drop — the guard refunds every
/// charge left, at once: a request that is never served keeps no unit.
struct Charges<'a> {
    shared: &'a Shared,
    subject: &'a Subject,
    units: u64,
    /// In the order they charged (a `Vec` allocates only when a limit charges).
    sources: Vec<Arc<dyn PolicySource>>,
}

impl<'a> Charges<'a> {
    fn new(shared: &'a Shared, subject: &'a Subject, units: u64) -> Self {
        Self {
            shared,
            subject,
            units,
            sources: Vec::new(),
        }
    }

    /// Records `e`'s check if it consumed: a matched allowance.
    fn note(&mut self, e: &Entry, j: &Judged) {
        if let Ok(j) = j {
            if j.is_matched() && matches!(j.verdict(), Verdict::Allow(_)) {
                self.sources.push(Arc::clone(&e.source));
            }
        }
    }

    /// The request goes on to be served: its charges stand.
    fn keep(mut self) {
        self.sources.clear();
    }

    /// Gives back every charge of a rejected request, awaiting each source's refund. Each
    /// source leaves the guard before its refund starts, so none is refunded twice; if one
    /// panics or the future is dropped, the guard refunds the rest.
    async fn refund(mut self) {
        while !self.sources.is_empty() {
            let source = self.sources.remove(0);
            if !source.refund(self.subject, self.units).await {
                Counters::bump(&self.shared.counters.races);
            }
        }
    }
}

impl Drop for Charges<'_> {
    /// Refunds what is left, synchronously: a refund future is polled once, which completes
    /// the built-in sources' (they refund in memory). An async refund that is not done on
    /// its first poll cannot be awaited here and is dropped; it counts, with a refund that
    /// panics, as a charge not given back ([`LayerStats::races`](super::LayerStats::races)).
    /// A panic is caught: this may run while a panic unwinds, where a second one would
    /// abort the process.
    fn drop(&mut self) {
        for source in self.sources.drain(..) {
            let refunded = catch_unwind(AssertUnwindSafe(|| {
                let mut fut = source.refund(self.subject, self.units);
                let mut cx = Context::from_waker(Waker::noop());
                matches!(fut.as_mut().poll(&mut cx), Poll::Ready(true))
            }));
            if !matches!(refunded, Ok(true)) {
                Counters::bump(&self.shared.counters.races);
            }
        }
    }
}

pub(crate) fn secs_up(d: Duration) -> u64 {
    d.as_nanos()
        .div_ceil(1_000_000_000)
        .try_into()
        .unwrap_or(u64::MAX)
}

/// Queue mode: wait for capacity up to `max_wait`, holding a waiter slot.
pub(crate) async fn wait(
    shared: &Shared,
    subject: &Subject,
    check: Check,
    mut outcome: Outcome,
) -> Outcome {
    let Some(waiters) = shared.queue.as_ref() else {
        return outcome;
    };
    let max_wait = waiters.config.max_wait();
    let Outcome::Denied { denied, .. } = &outcome else {
        return outcome;
    };
    if denied.retry_after() > max_wait {
        return outcome;
    }
    let Some(_slot) = waiters.enter(subject.key()) else {
        Counters::bump(&shared.counters.queue_full);
        return match outcome {
            Outcome::Denied {
                figures,
                denying,
                denied,
                ..
            } => Outcome::Denied {
                figures,
                denying,
                denied,
                queue_full: true,
            },
            other => other,
        };
    };
    Counters::bump(&shared.counters.queued);
    let mut waited = Duration::ZERO;
    while let Outcome::Denied { denied, .. } = &outcome {
        let left = max_wait.saturating_sub(waited);
        if denied.retry_after() > left || left.is_zero() {
            break;
        }
        let nap = waiters.jittered(denied.retry_after()).min(left);
        waiters.sleep(nap).await;
        waited = waited.saturating_add(nap);
        outcome = judge(shared, subject, check).await;
    }
    outcome
}

//! `--clients none|retry-after|backoff|naive`: what clients do with a 429, closed loop.
//!
//! Under a client model the log's own retries (rows with `attempt > 0`) are dropped and each
//! side's denials of the log's requests make retries of their own, checked when they come
//! due, in time order with the log's rows: a side that denies more also carries more load.
//! `none` (the default) is the open loop: the log's rows, retries included, exactly as
//! written — the question "what would NEW deny of this traffic" answered exactly.
//!
//! | model | retry `a` of a denied request comes after |
//! |---|---|
//! | `retry-after` | the denial's `Retry-After` |
//! | `backoff` | `Backoff::next_delay`: the `Retry-After` plus full jitter, exponential (seeded) |
//! | `naive` | [`NAIVE_RTT`]: at once, one round trip later |
//!
//! Every model stops after `--max-retries` retries, and gives up on a wait longer than
//! [`MAX_WAIT`] (a client's own timeout). Memory: at most [`MAX_PENDING`] retries wait at
//! once; past that a retry is dropped and counted.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Duration;

use clap::ValueEnum;
use serde::Serialize;
use tollgate::shaping::Backoff;
use tollgate::Verdict;

use super::record::Record;

/// The gap between a naive client's attempts: one round trip.
pub(super) const NAIVE_RTT: Duration = Duration::from_millis(50);
/// The longest wait a client accepts before a retry; past it, it gives up.
pub(super) const MAX_WAIT: Duration = Duration::from_secs(300);
/// Retries waiting at once, over both sides.
pub(super) const MAX_PENDING: usize = 1 << 20;

/// What clients do with a 429.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Clients {
    /// No model: the log as written, its retries included (the open loop).
    #[default]
    None,
    /// Retry once the `Retry-After` has passed.
    RetryAfter,
    /// Exponential backoff with full jitter, honouring `Retry-After` (the library's Backoff).
    Backoff,
    /// Retry at once (one 50 ms round trip later), up to the retry cap.
    Naive,
}

/// A client model with its retry cap.
pub(super) struct Model {
    pub(super) kind: Clients,
    pub(super) max_retries: u32,
    backoff: Option<Backoff>,
}

impl Model {
    pub(super) fn new(kind: Clients, max_retries: u32, seed: u64) -> Model {
        let backoff = (kind == Clients::Backoff)
            .then(|| {
                Backoff::builder()
                    .seed(seed)
                    .max_retries(max_retries)
                    .build()
                    .ok()
            })
            .flatten();
        Model {
            kind,
            max_retries,
            backoff,
        }
    }

    /// `true` when the model makes its own retries (the log's are dropped).
    pub(super) fn closed(&self) -> bool {
        self.kind != Clients::None
    }

    /// The wait before retry `attempt` (1-based) after `verdict` denied the attempt before
    /// it, or `None` when the client gives up.
    pub(super) fn next(&self, attempt: u32, verdict: &Verdict) -> Option<Duration> {
        let denied = verdict.denied()?;
        if attempt > self.max_retries {
            return None;
        }
        let wait = match (self.kind, &self.backoff) {
            (Clients::None, _) => return None,
            (Clients::RetryAfter, _) => denied.retry_after(),
            (Clients::Backoff, Some(b)) => b.next_delay(attempt, Some(verdict)),
            (Clients::Backoff, None) => denied.retry_after(),
            (Clients::Naive, _) => NAIVE_RTT,
        };
        (wait <= MAX_WAIT).then_some(wait.max(Duration::from_millis(1)))
    }
}

/// What clients got, per side.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub(super) struct Outcomes {
    /// Original requests (the log's rows, less its retries under a model).
    pub(super) originals: u64,
    /// Retries the model made.
    pub(super) retries: u64,
    /// Originals that got through, at once or on a retry.
    pub(super) succeeded: u64,
    /// Originals given up (the retry cap, a wait too long, or a cost past the burst).
    pub(super) gave_up: u64,
    /// Retries dropped because too many were waiting ([`MAX_PENDING`]).
    pub(super) dropped: u64,
    /// Rows the log says were answered 429 (its `status` column).
    pub(super) log_429: u64,
    /// Of those, the rows this side's replay denies too (on their first attempt).
    pub(super) log_429_denied: u64,
}

impl Outcomes {
    /// Retries over all attempts.
    pub(super) fn retry_share(&self) -> f64 {
        let all = self.originals + self.retries;
        if all == 0 {
            0.0
        } else {
            self.retries as f64 / all as f64
        }
    }

    /// Originals that got through.
    pub(super) fn success(&self) -> f64 {
        if self.originals == 0 {
            0.0
        } else {
            self.succeeded as f64 / self.originals as f64
        }
    }
}

/// A retry waiting for its time, ordered by `(at_ms, seq)`.
#[derive(Debug)]
pub(super) struct Pending {
    pub(super) at_ms: i64,
    /// Ties in time keep the order they were made in.
    pub(super) seq: u64,
    pub(super) side: usize,
    pub(super) rec: Box<Record>,
}

impl PartialEq for Pending {
    fn eq(&self, other: &Pending) -> bool {
        (self.at_ms, self.seq) == (other.at_ms, other.seq)
    }
}

impl Eq for Pending {}

impl PartialOrd for Pending {
    fn partial_cmp(&self, other: &Pending) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Pending {
    fn cmp(&self, other: &Pending) -> std::cmp::Ordering {
        (self.at_ms, self.seq).cmp(&(other.at_ms, other.seq))
    }
}

/// The retries of every side, earliest first.
#[derive(Debug, Default)]
pub(super) struct Queue {
    heap: BinaryHeap<Reverse<Pending>>,
    seq: u64,
}

impl Queue {
    /// Schedules `rec` (its `attempt` already the retry's) on `side` at `at_ms`; `false` if
    /// too many are waiting.
    pub(super) fn push(&mut self, side: usize, at_ms: i64, rec: Record) -> bool {
        if self.heap.len() >= MAX_PENDING {
            return false;
        }
        self.seq += 1;
        self.heap.push(Reverse(Pending {
            at_ms,
            seq: self.seq,
            side,
            rec: Box::new(rec),
        }));
        true
    }

    /// The earliest retry due at or before `t_ms`.
    pub(super) fn pop_due(&mut self, t_ms: i64) -> Option<Pending> {
        if self.heap.peek()?.0.at_ms <= t_ms {
            self.heap.pop().map(|r| r.0)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate::{ManualClock, RateLimiter};

    fn denial() -> Verdict {
        let lim = RateLimiter::builder("1/s".parse().unwrap_or_else(|e| panic!("{e}")))
            .clock(ManualClock::new())
            .build();
        assert!(lim.check().is_permitted());
        lim.check()
    }

    #[test]
    fn each_model_waits_as_its_client_would() {
        let deny = denial();
        let after = deny.denied().map(|d| d.retry_after()).unwrap_or_default();
        assert_eq!(
            Model::new(Clients::RetryAfter, 3, 1).next(1, &deny),
            Some(after)
        );
        assert_eq!(
            Model::new(Clients::Naive, 3, 1).next(1, &deny),
            Some(NAIVE_RTT)
        );
        let b = Model::new(Clients::Backoff, 3, 1).next(2, &deny);
        assert!(b.is_some_and(|d| d >= after), "{b:?}");
        assert_eq!(Model::new(Clients::None, 3, 1).next(1, &deny), None);
        assert_eq!(
            Model::new(Clients::Naive, 3, 1).next(4, &deny),
            None,
            "the cap"
        );
    }

    #[test]
    fn the_queue_gives_retries_in_time_order() {
        let rec = |k: &str| Record {
            t_ms: 0,
            key: k.into(),
            tier: String::new(),
            category: String::new(),
            route: String::new(),
            status: None,
            bytes: None,
            attempt: 1,
        };
        let mut q = Queue::default();
        assert!(q.push(0, 30, rec("c")));
        assert!(q.push(1, 10, rec("a")));
        assert!(q.push(0, 10, rec("b")));
        assert!(q.pop_due(5).is_none());
        let order: Vec<String> = std::iter::from_fn(|| q.pop_due(30))
            .map(|p| p.rec.key)
            .collect();
        assert_eq!(order, ["a", "b", "c"]);
    }
}

//! The simulation core the incident models share: a seeded generator, clients that retry,
//! and a recorder that cuts a run into one-minute buckets.
//!
//! Time is simulated: milliseconds since the start of a run, mirrored into `ManualClock`s
//! that the library's limiters read. Nothing here decides a verdict; the library does.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Duration;

use serde::Serialize;
use tollgate::shaping::Backoff;

/// splitmix64: a small, seeded, deterministic generator (no dependency, same on every
/// platform).
#[derive(Clone, Debug)]
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x9e37_79b9_7f4a_7c15)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`; 0 for `n == 0`).
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            return 0;
        }
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// `true` with probability `p`.
    pub(crate) fn chance(&mut self, p: f64) -> bool {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }
}

/// One minute of one run, as the charts and tables read it.
#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct Bucket {
    /// Customer requests that finished (served or given up on) in this minute.
    pub(crate) requests: u64,
    /// Of those, the ones that failed: never served, or served after the client gave up.
    pub(crate) failed: u64,
    /// Attempts sent (originals and retries).
    pub(crate) attempts: u64,
    /// Of those, retries.
    pub(crate) retries: u64,
    /// Original attempts of requests within their contract.
    pub(crate) originals: u64,
    /// Of those, denied or lost: wrongful denials.
    pub(crate) wrongful: u64,
    /// Keys that sent anything this minute.
    pub(crate) active_keys: u64,
    /// Of those, the ones with more denied than permitted attempts.
    pub(crate) denied_keys: u64,
    /// Heartbeats sent and delivered on time (incident 003).
    pub(crate) heartbeats: u64,
    pub(crate) heartbeats_ok: u64,
}

impl Bucket {
    /// The customers' success rate in this minute, if anything finished.
    pub(crate) fn success_rate(&self) -> Option<f64> {
        (self.requests > 0).then(|| 1.0 - self.failed as f64 / self.requests as f64)
    }

    /// The share of active keys mostly denied.
    pub(crate) fn breadth(&self) -> f64 {
        if self.active_keys == 0 {
            0.0
        } else {
            self.denied_keys as f64 / self.active_keys as f64
        }
    }

    /// The share of in-contract originals wrongly denied.
    pub(crate) fn wrongful_share(&self) -> f64 {
        if self.originals == 0 {
            0.0
        } else {
            self.wrongful as f64 / self.originals as f64
        }
    }
}

/// Per-minute tallies of a run.
#[derive(Debug)]
pub(crate) struct Recorder {
    pub(crate) buckets: Vec<Bucket>,
    keys: Vec<(u32, u32)>,
    touched: Vec<u32>,
}

/// One minute, in ms.
pub(crate) const MINUTE: u64 = 60_000;

impl Recorder {
    pub(crate) fn new(keys: usize) -> Recorder {
        Recorder {
            buckets: vec![Bucket::default()],
            keys: vec![(0, 0); keys],
            touched: Vec::new(),
        }
    }

    fn at(&mut self, t: u64) -> &mut Bucket {
        let i = (t / MINUTE) as usize;
        while self.buckets.len() <= i {
            self.close_breadth();
            self.buckets.push(Bucket::default());
        }
        let last = self.buckets.len() - 1;
        &mut self.buckets[i.min(last)]
    }

    /// Closes the breadth tally of the last bucket.
    fn close_breadth(&mut self) {
        let Some(b) = self.buckets.last_mut() else {
            return;
        };
        for &k in &self.touched {
            let (ok, denied) = self.keys[k as usize];
            b.active_keys += 1;
            if denied > ok {
                b.denied_keys += 1;
            }
            self.keys[k as usize] = (0, 0);
        }
        self.touched.clear();
    }

    /// An attempt by `key` (a customer; `None` for traffic that is not a customer's).
    pub(crate) fn attempt(&mut self, t: u64, key: Option<u32>, attempt: u32, permitted: bool) {
        let b = self.at(t);
        b.attempts += 1;
        if attempt > 0 {
            b.retries += 1;
        } else {
            b.originals += 1;
            if !permitted {
                b.wrongful += 1;
            }
        }
        if let Some(k) = key {
            let slot = &mut self.keys[k as usize];
            if *slot == (0, 0) {
                self.touched.push(k);
            }
            if permitted {
                slot.0 += 1;
            } else {
                slot.1 += 1;
            }
        }
    }

    /// `n` customer requests finished at `t`, `failed` of them failed (traffic that is
    /// counted, not simulated one by one: it gets no attempt of its own).
    pub(crate) fn finished(&mut self, t: u64, n: u64, failed: u64) {
        let b = self.at(t);
        b.requests += n;
        b.failed += failed;
    }

    pub(crate) fn heartbeat(&mut self, t: u64, delivered: bool) {
        let b = self.at(t);
        b.heartbeats += 1;
        b.heartbeats_ok += u64::from(delivered);
    }

    /// The buckets, the last one closed.
    pub(crate) fn finish(mut self) -> Vec<Bucket> {
        self.close_breadth();
        self.buckets
    }
}

/// How a client retries a failed request.
#[derive(Debug)]
pub(crate) enum RetryPolicy {
    /// At once (after `gap_ms`, one tick), up to `max` times: incident clients.
    Immediate { max: u32, gap_ms: u64 },
    /// Honours `Retry-After` exactly, up to `max` times.
    RetryAfter { max: u32, gap_ms: u64 },
    /// tollgate's [`Backoff`] (bounded, jittered, after a denial `retry_after` plus jitter).
    Backoff(Backoff),
}

/// What an attempt got.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Answer {
    /// Served.
    Served,
    /// Denied, with the limiter's retry-after if it gave one.
    Denied(Option<Duration>),
    /// Lost: a timeout, a drop, a 5xx.
    Lost,
}

impl Answer {
    pub(crate) fn permitted(self) -> bool {
        matches!(self, Answer::Served)
    }
}

/// A customer request in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Op {
    pub(crate) key: u32,
    pub(crate) born: u64,
    pub(crate) attempt: u32,
}

/// Requests waiting to be retried, by due time.
#[derive(Debug)]
pub(crate) struct Clients {
    policy: RetryPolicy,
    /// A request served later than this after it was born has failed (the client gave up).
    deadline_ms: u64,
    /// Retries are never scheduled further than this ahead (so a `Duration::MAX` retry-after
    /// from a clock overflow gives up instead of waiting forever).
    horizon_ms: u64,
    queue: BinaryHeap<Reverse<(u64, u64, Op)>>,
    seq: u64,
}

impl Clients {
    pub(crate) fn new(policy: RetryPolicy, deadline_ms: u64) -> Clients {
        Clients {
            policy,
            deadline_ms,
            horizon_ms: 10 * MINUTE,
            queue: BinaryHeap::new(),
            seq: 0,
        }
    }

    /// The requests due at or before `now`, in order.
    pub(crate) fn due(&mut self, now: u64, out: &mut Vec<Op>) {
        out.clear();
        while let Some(Reverse((t, _, _))) = self.queue.peek() {
            if *t > now {
                break;
            }
            if let Some(Reverse((_, _, op))) = self.queue.pop() {
                out.push(op);
            }
        }
    }

    /// Records what `op` got at `now` and schedules its retry, or finishes it.
    pub(crate) fn answer(&mut self, rec: &mut Recorder, now: u64, op: Op, answer: Answer) {
        rec.attempt(now, Some(op.key), op.attempt, answer.permitted());
        let age = now.saturating_sub(op.born);
        if answer.permitted() {
            rec.finished(now, 1, u64::from(age > self.deadline_ms));
            return;
        }
        let next = op.attempt + 1;
        let delay = match (&self.policy, answer) {
            (RetryPolicy::Immediate { max, gap_ms }, _) => (next <= *max).then_some(*gap_ms),
            (RetryPolicy::RetryAfter { max, gap_ms }, Answer::Denied(Some(ra))) => {
                (next <= *max).then(|| (ra.as_millis() as u64).max(*gap_ms))
            }
            (RetryPolicy::RetryAfter { max, gap_ms }, _) => (next <= *max).then_some(*gap_ms),
            (RetryPolicy::Backoff(b), Answer::Denied(Some(ra))) => {
                (next <= b.max_retries()).then(|| b.after_deny(next, ra).as_millis() as u64)
            }
            (RetryPolicy::Backoff(b), _) => {
                (next <= b.max_retries()).then(|| b.delay(next).as_millis() as u64)
            }
        };
        match delay {
            Some(d) if d <= self.horizon_ms && age + d <= self.deadline_ms => {
                self.seq += 1;
                let op = Op {
                    attempt: next,
                    ..op
                };
                self.queue.push(Reverse((now + d.max(1), self.seq, op)));
            }
            _ => rec.finished(now, 1, 1),
        }
    }
}

/// Something that happened in a run, for the charts and the tables.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Mark {
    /// Seconds since the start of the run.
    pub(crate) at_secs: f64,
    /// What happened.
    pub(crate) text: String,
}

impl Mark {
    pub(crate) fn new(at_ms: u64, text: impl Into<String>) -> Mark {
        Mark {
            at_secs: at_ms as f64 / 1000.0,
            text: text.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_generator_is_seeded_and_uniform_enough() {
        let (mut a, mut b) = (Rng::new(7), Rng::new(7));
        let xs: Vec<u64> = (0..100).map(|_| a.below(10)).collect();
        let ys: Vec<u64> = (0..100).map(|_| b.below(10)).collect();
        assert_eq!(xs, ys);
        assert!(xs.iter().all(|&x| x < 10));
        let mut c = Rng::new(8);
        let hits = (0..10_000).filter(|_| c.chance(0.25)).count();
        assert!((2_300..2_700).contains(&hits), "{hits}");
    }

    #[test]
    fn breadth_counts_keys_mostly_denied_per_minute() {
        let mut rec = Recorder::new(3);
        rec.attempt(0, Some(0), 0, false);
        rec.attempt(1, Some(0), 1, false);
        rec.attempt(2, Some(0), 2, true);
        rec.attempt(3, Some(1), 0, true);
        rec.attempt(MINUTE, Some(2), 0, false);
        let b = rec.finish();
        assert_eq!(b.len(), 2);
        assert_eq!((b[0].active_keys, b[0].denied_keys), (2, 1));
        assert_eq!((b[0].originals, b[0].wrongful, b[0].retries), (2, 1, 2));
        assert_eq!((b[1].active_keys, b[1].denied_keys), (1, 1));
    }

    #[test]
    fn immediate_clients_give_up_after_their_retries() {
        let mut rec = Recorder::new(1);
        let mut clients = Clients::new(RetryPolicy::Immediate { max: 2, gap_ms: 1 }, 60_000);
        let op = Op {
            key: 0,
            born: 0,
            attempt: 0,
        };
        clients.answer(&mut rec, 0, op, Answer::Lost);
        let mut due = Vec::new();
        clients.due(1, &mut due);
        assert_eq!(due.len(), 1);
        clients.answer(&mut rec, 1, due[0], Answer::Lost);
        clients.due(2, &mut due);
        clients.answer(&mut rec, 2, due[0], Answer::Lost);
        clients.due(3, &mut due);
        assert!(due.is_empty());
        let b = rec.finish();
        assert_eq!((b[0].requests, b[0].failed, b[0].attempts), (1, 1, 3));
    }
}

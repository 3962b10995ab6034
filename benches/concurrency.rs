//! Concurrency limits: `ConcurrencyLimiter::try_acquire` + drop against
//! `tokio::sync::Semaphore::try_acquire` + drop, and the keyed limiter's
//! `try_acquire_key` + drop at 10k keys against the keyed rate check
//! (`KeyedRateLimiter::check_key`) at 10k keys, in paired rounds (see `benches/README.md`).
//!
//! ```text
//! cargo bench --bench concurrency
//! TOLLGATE_BENCH_QUICK=1 cargo bench --bench concurrency
//! ```

#[allow(dead_code)] // The threaded timer is for the other benches.
#[path = "common/harness.rs"]
mod harness;
#[path = "common/load.rs"]
mod load;

use std::convert::Infallible;
use std::future::Future;
use std::num::NonZeroU32;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use harness::{arm, ratio, sink, timed, Case, Report, Settings, Target};
use load::Load;
use tollgate::concurrency::{ConcurrencyLimiter, KeyedConcurrencyLimiter, Permit};
use tollgate::{KeyedRateLimiter, Quota};

const KEYS: u64 = 10_000;

fn nz(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).expect("non-zero")
}

/// Cycles through `0..n`.
struct RoundRobin {
    i: u64,
    n: u64,
}

impl RoundRobin {
    #[inline]
    fn next_key(&mut self) -> u64 {
        let k = self.i;
        self.i += 1;
        if self.i == self.n {
            self.i = 0;
        }
        k
    }
}

fn direct(s: &Settings, c: &mut criterion::Criterion, report: &mut Report) {
    let name = "concurrency/direct";
    if !s.wants(name, &["tollgate", "tokio-semaphore"]) {
        return;
    }
    let tg = ConcurrencyLimiter::new(nz(1_000));
    let sem = tokio::sync::Semaphore::new(1_000);
    report.run(
        s,
        c,
        Case {
            name: name.into(),
            iters: s.iters(2_000_000),
            arms: vec![
                arm("tollgate", |n| timed(n, || sink(tg.try_acquire()))),
                arm("tokio-semaphore", |n| timed(n, || sink(sem.try_acquire()))),
            ],
            ratios: vec![ratio(
                "tollgate",
                "tokio-semaphore",
                Some(Target::AtMost(1.5)),
            )],
            criterion: true,
        },
    );
}

/// One request through a service: ready, called, its response future polled to completion.
#[inline]
fn serve<S: tower::Service<u64>>(svc: &mut S, cx: &mut Context<'_>, i: u64) {
    match svc.poll_ready(cx) {
        Poll::Ready(Ok(())) => {}
        _ => panic!("the service is always ready"),
    }
    let mut fut = pin!(svc.call(i));
    while fut.as_mut().poll(cx).is_pending() {}
}

/// The same trivial service behind tower's `ConcurrencyLimit` (its semaphore permit taken in
/// `poll_ready`, held by the response future), and behind a `try_acquire` whose permit is held
/// across the call: what a layer on the concurrency limiter adds at the least.
fn layer(s: &Settings, c: &mut criterion::Criterion, report: &mut Report) {
    let name = "concurrency/layer";
    if !s.wants(name, &["tollgate", "tower-limit"]) {
        return;
    }
    let inner = || tower::service_fn(|x: u64| std::future::ready(Ok::<_, Infallible>(x)));
    let mut tower_svc = tower::limit::ConcurrencyLimit::new(inner(), 1_000);
    let mut plain = inner();
    let lim = ConcurrencyLimiter::new(nz(1_000));
    report.run(
        s,
        c,
        Case {
            name: name.into(),
            iters: s.iters(1_000_000),
            arms: vec![
                arm("tollgate", |n| {
                    let mut cx = Context::from_waker(Waker::noop());
                    let mut i = 0;
                    timed(n, || {
                        let permit = lim.try_acquire();
                        serve(&mut plain, &mut cx, i);
                        drop(permit);
                        i += 1;
                    })
                }),
                arm("tower-limit", |n| {
                    let mut cx = Context::from_waker(Waker::noop());
                    let mut i = 0;
                    timed(n, || {
                        serve(&mut tower_svc, &mut cx, i);
                        i += 1;
                    })
                }),
            ],
            ratios: vec![ratio("tollgate", "tower-limit", Some(Target::AtMost(1.0)))],
            criterion: true,
        },
    );
}

/// `held`: each key has one permit out throughout (its entry stays); otherwise every key is
/// idle, so each acquire inserts its key and each drop forgets it.
fn keyed(s: &Settings, c: &mut criterion::Criterion, report: &mut Report, held: bool) {
    let name = if held {
        "concurrency/keyed-10k-held"
    } else {
        "concurrency/keyed-10k-idle"
    };
    if !s.wants(name, &["tollgate", "keyed-rate-check"]) {
        return;
    }
    let tg = KeyedConcurrencyLimiter::<u64>::new(nz(1_000));
    let _kept: Vec<Permit> = if held {
        (0..KEYS)
            .map(|k| tg.try_acquire_key(&k).expect("room"))
            .collect()
    } else {
        Vec::new()
    };
    let quota: Quota = "1/s;burst=1000000000".parse().expect("quota");
    let rate = KeyedRateLimiter::<u64>::new(quota);
    for k in 0..KEYS {
        sink(rate.check_key(&k));
    }
    let (mut a, mut b) = (RoundRobin { i: 0, n: KEYS }, RoundRobin { i: 0, n: KEYS });
    report.run(
        s,
        c,
        Case {
            name: name.into(),
            iters: s.iters(1_000_000),
            arms: vec![
                arm("tollgate", |n| {
                    timed(n, || sink(tg.try_acquire_key(&a.next_key())))
                }),
                arm("keyed-rate-check", |n| {
                    timed(n, || sink(rate.check_key(&b.next_key())))
                }),
            ],
            ratios: vec![ratio(
                "tollgate",
                "keyed-rate-check",
                Some(Target::AtMost(2.0)),
            )],
            criterion: true,
        },
    );
}

fn main() {
    let s = Settings::from_env_and_args();
    let mut c = s.criterion();
    let load = Load::start();
    let mut report = Report::default();
    report.note(
        "direct: try_acquire + drop of one permit on an uncontended limiter of 1,000, against \
         tokio's Semaphore::try_acquire + drop of the SemaphorePermit. keyed: u64 keys 0..10k \
         round-robin, try_acquire_key + drop, against KeyedRateLimiter::check_key on 10k live \
         keys (1/s, burst 10^9). layer: a trivial tower service_fn behind tower's \
         ConcurrencyLimit (1,000) against the same service called while holding a \
         try_acquire permit (1,000): poll_ready, call, the ready response polled, per check.",
    );
    direct(&s, &mut c, &mut report);
    layer(&s, &mut c, &mut report);
    keyed(&s, &mut c, &mut report, true);
    keyed(&s, &mut c, &mut report, false);
    println!("{}", report.render("concurrency", &load));
}

//! A measuring tool, not an example to copy: runs `n` checks of one case in a loop, for
//! counting instructions per check with callgrind (see `benches/callgrind.sh`).
//!
//! ```text
//! cargo bench --no-run --bench ir_per_check   # prints the executable's path
//! valgrind --tool=callgrind --toggle-collect='*ir_per_check::measured*' \
//!     target/release/deps/ir_per_check-HASH tollgate-direct-allowed 100000
//! ```
//!
//! Only `measured` (the loop and everything it calls) is collected, so setup, warm-up and the
//! clock's calibration are left out; `benches/callgrind.sh` runs two loop lengths and divides
//! the difference, which also drops the loop's constant entry cost.

#[allow(dead_code)] // Only the floors' check methods are used here.
#[path = "common/floor.rs"]
mod floor;
#[cfg(feature = "config")]
#[path = "common/rollout.rs"]
mod rollout;
#[path = "common/settle.rs"]
mod settle;

use std::hint::black_box;
use std::num::NonZeroU32;
use std::process::ExitCode;
use std::time::Duration;

use governor::{Quota as GQuota, RateLimiter as GovernorLimiter};
use tollgate::safety::FaultDetector;
use tollgate::shaping::{Priorities, RetryBudget};
use tollgate::{Check, KeyedRateLimiter, ManualClock, Quota, RateLimiter};

use floor::{Floor, KeyedFloor};
use settle::settle;

const CASES: &[&str] = &[
    "tollgate-direct-allowed",
    "tollgate-direct-denied",
    "tollgate-direct-manual-allowed",
    "tollgate-direct-manual-denied",
    "tollgate-direct-check-n5",
    "tollgate-keyed-10k",
    "tollgate-detector-direct-allowed",
    "tollgate-detector-direct-denied",
    "tollgate-detector-keyed-10k",
    "tollgate-detector-ticked-keyed-10k",
    "tollgate-direct-check-with",
    "tollgate-priority-direct-class1",
    "tollgate-priority-direct-class0",
    "tollgate-budget-direct-original",
    "tollgate-budget-direct-retry",
    "governor-direct-allowed",
    "governor-direct-denied",
    "governor-direct-check-n5",
    "governor-keyed-10k",
    "floor-direct-allowed",
    "floor-direct-denied",
    "floor-direct-check-n5",
    "floor-direct-check-n1",
    "floor-keyed-10k",
    "loop-overhead",
    "loop-verdict",
];

/// Cases that need the `config` feature (`FEATURES=config benches/callgrind.sh …`): a staged
/// rollout's check of a cohort key and of a control key, and the same check through a
/// `LimitsHandle` (`common/rollout.rs`; 10k keys of each kind).
#[cfg(feature = "config")]
const CONFIG_CASES: &[&str] = &[
    "tollgate-rollout-cohort",
    "tollgate-rollout-control",
    "tollgate-handle-10k",
];
#[cfg(not(feature = "config"))]
const CONFIG_CASES: &[&str] = &[];

const NS_PER_S: u64 = 1_000_000_000;
const NS_PER_H: u64 = 3_600 * NS_PER_S;
const HUGE: u32 = 1_000_000_000;
const KEYS: u64 = 10_000;

fn nz(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).expect("non-zero")
}

/// The collected region: `n` calls of `check`, each result kept alive through `black_box`.
/// The direct cases call through `black_box(&lim)`, so that nothing of the limiter can be
/// read once and kept across the loop: each call loads what a user's call loads.
#[inline(never)]
fn measured<T>(n: u64, mut check: impl FnMut(u64) -> T) {
    let mut key = 0;
    for _ in 0..n {
        black_box(check(key));
        key += 1;
        if key == KEYS {
            key = 0;
        }
    }
}

/// Inserts all keys (one check each) before the collected loop.
fn warm<T>(mut check: impl FnMut(u64) -> T) {
    for k in 0..KEYS {
        black_box(check(k));
    }
}

fn run(case: &str, n: u64) -> bool {
    let live = (
        Quota::per_second(nz(1)).with_burst(nz(HUGE)),
        GQuota::per_second(nz(1)).allow_burst(nz(HUGE)),
    );
    match case {
        "tollgate-direct-allowed" | "tollgate-direct-check-n5" => {
            let lim = RateLimiter::new(Quota::per_second(nz(HUGE)));
            warm(|_| lim.check());
            if case.ends_with("n5") {
                measured(n, |_| black_box(&lim).check_n(black_box(5)));
            } else {
                measured(n, |_| black_box(&lim).check());
            }
        }
        "tollgate-direct-denied" => {
            let lim = RateLimiter::new("1/h".parse().expect("valid quota"));
            warm(|_| lim.check());
            measured(n, |_| black_box(&lim).check());
        }
        "tollgate-direct-manual-allowed" | "tollgate-direct-manual-denied" => {
            // A test's setup: a `ManualClock`, never advanced (a burst of 10^9 admits every
            // check; "1/h" denies every check after the first).
            let q = if case.ends_with("allowed") {
                Quota::per_second(nz(HUGE))
            } else {
                "1/h".parse().expect("valid quota")
            };
            let lim = RateLimiter::builder(q).clock(ManualClock::new()).build();
            warm(|_| lim.check());
            measured(n, |_| black_box(&lim).check());
        }
        "tollgate-keyed-10k" => {
            let lim = KeyedRateLimiter::<u64>::new(live.0);
            warm(|k| lim.check_key(&k));
            measured(n, |k| lim.check_key(&k));
        }
        "tollgate-detector-direct-allowed" | "tollgate-detector-direct-denied" => {
            // As benches/direct.rs: `FaultDetector::new()` (no baseline: it can only alert).
            // Its first evaluation is due 10 s after it is built, after this loop.
            let q = if case.ends_with("allowed") {
                Quota::per_second(nz(HUGE))
            } else {
                "1/h".parse().expect("valid quota")
            };
            let lim = RateLimiter::builder(q)
                .detector(FaultDetector::new())
                .build();
            warm(|_| lim.check());
            measured(n, |_| lim.check());
        }
        "tollgate-detector-keyed-10k" => {
            // As benches/keyed.rs: default settings but a 6 s window (a sub-bucket close every
            // second, not every 10 s), on the default clock, as the limiter's: passes over the
            // keys until two closes have rebalanced the breadth panel to its steady state. A
            // close may fall inside the loop (one a second, under valgrind's slowdown), which
            // the slope between the two runs averages over: about ±1 Ir a check.
            let detector = FaultDetector::builder()
                .window(Duration::from_secs(6))
                .build();
            let lim = KeyedRateLimiter::<u64>::builder(live.0)
                .detector(detector.clone())
                .build();
            settle(&detector, || warm(|k| lim.check_key(&k)));
            measured(n, |k| lim.check_key(&k));
        }
        "tollgate-detector-ticked-keyed-10k" => {
            // The detector on a manual clock (a test's setup): the limiter cannot hand it its
            // own reading, so every 32nd check of a thread reads the detector's clock. Advanced
            // through 8 evaluations during warm-up, then still (no evaluation inside the loop).
            let clock = ManualClock::new();
            let detector = FaultDetector::builder().clock(&clock).build();
            let lim = KeyedRateLimiter::<u64>::builder(live.0)
                .detector(detector.clone())
                .build();
            for _ in 0..8 {
                clock.advance(Duration::from_secs(10));
                warm(|k| lim.check_key(&k));
                detector.tick();
            }
            measured(n, |k| lim.check_key(&k));
        }
        "tollgate-direct-check-with" => {
            // As benches/direct.rs (priority-class, retry-budget): the bare `check_with` on a
            // limiter with nothing attached, the `Check` through `black_box`.
            let lim = RateLimiter::new(Quota::per_second(nz(HUGE)));
            warm(|_| lim.check_with(black_box(Check::cost(1))));
            measured(n, |_| lim.check_with(black_box(Check::cost(1))));
        }
        "tollgate-priority-direct-class1" | "tollgate-priority-direct-class0" => {
            // As benches/direct.rs: classes 0 / 1 / 2 reserving 0 / 20 / 50 % of the burst.
            let class = if case.ends_with("class1") { 1 } else { 0 };
            let classes = Priorities::new([(0, 0.0), (1, 0.2), (2, 0.5)]).expect("valid");
            let lim = RateLimiter::builder(Quota::per_second(nz(HUGE)))
                .priorities(classes)
                .build();
            let check = Check::cost(1).class(class);
            warm(|_| lim.check_with(black_box(check)));
            measured(n, |_| lim.check_with(black_box(check)));
        }
        "tollgate-budget-direct-original" | "tollgate-budget-direct-retry" => {
            // As benches/direct.rs: the default budget with its floor raised so that every
            // retry is within it.
            let attempt = u32::from(case.ends_with("retry"));
            let lim = RateLimiter::builder(Quota::per_second(nz(HUGE)))
                .retry_budget(RetryBudget::new().with_floor(u32::MAX))
                .build();
            let check = Check::cost(1).attempt(attempt);
            warm(|_| lim.check_with(black_box(check)));
            measured(n, |_| lim.check_with(black_box(check)));
        }
        "governor-direct-allowed" | "governor-direct-check-n5" => {
            let lim = GovernorLimiter::direct(GQuota::per_second(nz(HUGE)));
            warm(|_| lim.check());
            if case.ends_with("n5") {
                measured(n, |_| black_box(&lim).check_n(black_box(nz(5))));
            } else {
                measured(n, |_| black_box(&lim).check());
            }
        }
        "governor-direct-denied" => {
            let lim = GovernorLimiter::direct(GQuota::per_hour(nz(1)));
            warm(|_| lim.check());
            measured(n, |_| black_box(&lim).check());
        }
        "governor-keyed-10k" => {
            let lim = GovernorLimiter::keyed(live.1);
            warm(|k| lim.check_key(&k));
            measured(n, |k| lim.check_key(&k));
        }
        "floor-direct-allowed" | "floor-direct-check-n5" => {
            let lim = Floor::new(HUGE.into(), NS_PER_S, HUGE.into());
            warm(|_| lim.check());
            if case.ends_with("n5") {
                measured(n, |_| black_box(&lim).check_n(black_box(5)));
            } else {
                measured(n, |_| black_box(&lim).check());
            }
        }
        "floor-direct-check-n1" => {
            let lim = Floor::new(HUGE.into(), NS_PER_S, HUGE.into());
            warm(|_| lim.check_n(black_box(1)));
            measured(n, |_| black_box(&lim).check_n(black_box(1)));
        }
        "floor-direct-denied" => {
            let lim = Floor::new(1, NS_PER_H, 1);
            warm(|_| lim.check());
            measured(n, |_| black_box(&lim).check());
        }
        "floor-keyed-10k" => {
            let lim = KeyedFloor::new(KEYS as usize, 1, NS_PER_S, HUGE.into());
            warm(|k| lim.check_key(k));
            measured(n, |k| lim.check_key(k));
        }
        "loop-overhead" => measured(n, |k| k),
        // The loop around a check without the check: a verdict (an allowance, the largest)
        // read through `black_box` and handed on as a check's is. The `tollgate-direct-*`
        // rows less this one are what the calls themselves cost.
        "loop-verdict" => {
            let v = RateLimiter::builder(Quota::per_second(nz(HUGE)))
                .clock(ManualClock::new())
                .build()
                .check();
            measured(n, |_| *black_box(&v));
        }
        #[cfg(feature = "config")]
        "tollgate-rollout-cohort" | "tollgate-rollout-control" | "tollgate-handle-10k" => {
            let f = rollout::Fixture::new(KEYS as usize);
            let (tier, category, route) = rollout::REQUEST;
            let one = Check::cost(1);
            let keys = if case.ends_with("control") {
                &f.control
            } else {
                &f.cohort
            };
            let key = |k: u64| keys[k as usize].as_str();
            if case.ends_with("10k") {
                measured(n, |k| f.handle.check(tier, category, route, key(k), one));
            } else {
                measured(n, |k| f.rollout.check(tier, category, route, key(k), one));
            }
        }
        _ => return false,
    }
    true
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let n = args.get(1).and_then(|n| n.parse().ok());
    match (args.first(), n) {
        (Some(case), Some(n)) if run(case, n) => ExitCode::SUCCESS,
        // `cargo bench` runs every bench target with `--bench`: this one measures only when
        // `benches/callgrind.sh` names a case.
        (Some(flag), None) if flag == "--bench" => ExitCode::SUCCESS,
        _ => {
            let cases: Vec<&str> = CASES.iter().chain(CONFIG_CASES).copied().collect();
            eprintln!("usage: ir_per_check <case> <n>\ncases: {}", cases.join(" "));
            ExitCode::FAILURE
        }
    }
}

//! Direct limiters: tollgate's `RateLimiter` against governor's `RateLimiter::direct` and the
//! hand-written floor, in paired rounds. See `benches/README.md` for the method and results.
//!
//! ```text
//! cargo bench --bench direct                       # everything (~2 min)
//! cargo bench --bench direct -- denied             # one case (substring filter)
//! TOLLGATE_BENCH_QUICK=1 cargo bench --bench direct
//! TOLLGATE_BENCH_PAIRED_ONLY=1 cargo bench --bench direct -- priority   # priority classes
//! TOLLGATE_BENCH_PAIRED_ONLY=1 cargo bench --bench direct -- retry      # retry budget
//! ```

#[allow(dead_code)] // The keyed floor is used by benches/keyed.rs.
#[path = "common/floor.rs"]
mod floor;
#[path = "common/harness.rs"]
mod harness;
#[path = "common/load.rs"]
mod load;

use std::hint::black_box;
use std::num::NonZeroU32;
use std::time::Duration;

use governor::{Quota as GQuota, RateLimiter as GovernorLimiter};
use harness::{arm, ratio, sink, timed, timed_threads, Case, Report, Settings, Target};
use load::Load;
use tollgate::safety::FaultDetector;
use tollgate::shaping::{Priorities, RetryBudget};
use tollgate::{Check, Quota, RateLimiter};

use floor::Floor;

const NS_PER_S: u64 = 1_000_000_000;
const NS_PER_H: u64 = 3_600 * NS_PER_S;
/// 10^9 per second (T = 1 ns), burst 10^9: every check is allowed.
const HUGE: u32 = 1_000_000_000;

fn nz(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).expect("non-zero")
}

const ARMS: &[&str] = &["tollgate", "governor", "floor"];

fn ratios(vs_floor: f64) -> Vec<harness::Ratio> {
    vec![
        ratio("tollgate", "floor", Some(Target::AtMost(vs_floor))),
        ratio("tollgate", "governor", Some(Target::AtMost(1.0))),
        ratio("governor", "floor", None),
    ]
}

fn allowed(s: &Settings, c: &mut criterion::Criterion, report: &mut Report) {
    let name = "direct/allowed";
    if !s.wants(name, ARMS) {
        return;
    }
    let tg = RateLimiter::new(Quota::per_second(nz(HUGE)));
    let gov = GovernorLimiter::direct(GQuota::per_second(nz(HUGE)));
    let fl = Floor::new(HUGE.into(), NS_PER_S, HUGE.into());
    assert!(tg.check().is_permitted() && gov.check().is_ok() && fl.check().is_ok());
    report.run(
        s,
        c,
        Case {
            name: name.into(),
            iters: s.iters(500_000),
            arms: vec![
                arm("tollgate", |n| timed(n, || sink(tg.check()))),
                arm("governor", |n| timed(n, || sink(gov.check()))),
                arm("floor", |n| timed(n, || sink(fl.check()))),
            ],
            ratios: ratios(1.10),
            criterion: true,
        },
    );
}

fn denied(s: &Settings, c: &mut criterion::Criterion, report: &mut Report) {
    let name = "direct/denied";
    if !s.wants(name, ARMS) {
        return;
    }
    // One per hour, burst 1, used up: every later check in the run is denied.
    let tg = RateLimiter::new("1/h".parse().expect("valid quota"));
    let gov = GovernorLimiter::direct(GQuota::per_hour(nz(1)));
    let fl = Floor::new(1, NS_PER_H, 1);
    assert!(tg.check().is_permitted() && gov.check().is_ok() && fl.check().is_ok());
    assert!(!tg.check().is_permitted() && gov.check().is_err() && fl.check().is_err());
    report.run(
        s,
        c,
        Case {
            name: name.into(),
            iters: s.iters(500_000),
            arms: vec![
                arm("tollgate", |n| timed(n, || sink(tg.check()))),
                arm("governor", |n| timed(n, || sink(gov.check()))),
                arm("floor", |n| timed(n, || sink(fl.check()))),
            ],
            ratios: ratios(1.10),
            criterion: true,
        },
    );
}

fn check_n5(s: &Settings, c: &mut criterion::Criterion, report: &mut Report) {
    let name = "direct/check_n5";
    if !s.wants(name, ARMS) {
        return;
    }
    let tg = RateLimiter::new(Quota::per_second(nz(HUGE)));
    let gov = GovernorLimiter::direct(GQuota::per_second(nz(HUGE)));
    let fl = Floor::new(HUGE.into(), NS_PER_S, HUGE.into());
    let five = nz(5);
    report.run(
        s,
        c,
        Case {
            name: name.into(),
            iters: s.iters(500_000),
            arms: vec![
                arm("tollgate", |n| timed(n, || sink(tg.check_n(black_box(5))))),
                arm("governor", |n| {
                    timed(n, || sink(gov.check_n(black_box(five))))
                }),
                arm("floor", |n| timed(n, || sink(fl.check_n(black_box(5))))),
            ],
            ratios: ratios(1.10),
            criterion: true,
        },
    );
}

/// Two threads on one shared direct limiter: time per check per thread (lower is more
/// throughput), tollgate ÷ governor.
fn two_threads(s: &Settings, c: &mut criterion::Criterion, report: &mut Report) {
    let name = "direct/2-threads-shared";
    if !s.wants(name, ARMS) {
        return;
    }
    let tg = RateLimiter::new(Quota::per_second(nz(HUGE)));
    let gov = GovernorLimiter::direct(GQuota::per_second(nz(HUGE)));
    let fl = Floor::new(HUGE.into(), NS_PER_S, HUGE.into());
    report.run(
        s,
        c,
        Case {
            name: name.into(),
            iters: s.iters(300_000),
            arms: vec![
                arm("tollgate", |n| on_2_threads(n, || sink(tg.check()))),
                arm("governor", |n| on_2_threads(n, || sink(gov.check()))),
                arm("floor", |n| on_2_threads(n, || sink(fl.check()))),
            ],
            ratios: vec![
                ratio("tollgate", "governor", Some(Target::AtMost(1.0))),
                ratio("tollgate", "floor", None),
                ratio("governor", "floor", None),
            ],
            criterion: false,
        },
    );
}

/// `n` calls of `f` on each of 2 threads; the wall time.
fn on_2_threads(n: u64, f: impl Fn() + Sync) -> Duration {
    on_threads(2, n, f)
}

/// `n` calls of `f` on each of `threads` threads (fresh threads per block); the wall time.
fn on_threads(threads: usize, n: u64, f: impl Fn() + Sync) -> Duration {
    timed_threads(threads, n, |_, n| {
        timed(n, &f);
    })
}

/// The arms of the fault-detector cases.
const DETECTOR_ARMS: &[&str] = &["tollgate-detector", "tollgate", "floor"];

/// The target: direct `check` with the detector attached ≤ 1.25× the floor.
const DETECTOR_VS_FLOOR: f64 = 1.25;

/// A bare limiter and one with `FaultDetector::new()` attached (defaults: monotonic clock,
/// no baseline, so it can only alert, never pass traffic through), on the same quota.
fn with_and_without_detector(q: Quota) -> (RateLimiter, RateLimiter, FaultDetector) {
    let detector = FaultDetector::new();
    let det = RateLimiter::builder(q).detector(detector.clone()).build();
    (det, RateLimiter::new(q), detector)
}

fn detector_ratios() -> Vec<harness::Ratio> {
    vec![
        ratio(
            "tollgate-detector",
            "floor",
            Some(Target::AtMost(DETECTOR_VS_FLOOR)),
        ),
        ratio("tollgate-detector", "tollgate", None),
        ratio("tollgate", "floor", None),
    ]
}

/// After a detector case: what the detector saw (it must still be enforcing, and every check
/// must have been counted).
fn detector_note(report: &mut Report, name: &str, d: &FaultDetector) {
    let (state, stats) = (d.state(), d.stats());
    report.note(format!(
        "{name}: detector mode {:?}; it counted {} checks ({} allowed, {} denied, {} passed \
         through).",
        state.mode,
        stats.total(),
        stats.allowed,
        stats.denied(),
        stats.passed()
    ));
}

/// Direct `check` with a fault detector attached, one thread: allowed (`allowed == true`) or
/// denied.
fn detector_single(s: &Settings, c: &mut criterion::Criterion, report: &mut Report, allowed: bool) {
    let name = if allowed {
        "direct/detector-allowed"
    } else {
        "direct/detector-denied"
    };
    if !s.wants(name, DETECTOR_ARMS) {
        return;
    }
    let (q, fl) = if allowed {
        (
            Quota::per_second(nz(HUGE)),
            Floor::new(HUGE.into(), NS_PER_S, HUGE.into()),
        )
    } else {
        (
            "1/h".parse().expect("valid quota"),
            Floor::new(1, NS_PER_H, 1),
        )
    };
    let (det, tg, detector) = with_and_without_detector(q);
    // The first check is allowed either way (a full burst); denied: that used up the burst.
    assert!(det.check().is_permitted() && tg.check().is_permitted() && fl.check().is_ok());
    assert_eq!(det.check().is_permitted(), allowed);
    assert_eq!(tg.check().is_permitted(), allowed);
    assert_eq!(fl.check().is_ok(), allowed);
    report.run(
        s,
        c,
        Case {
            name: name.into(),
            iters: s.iters(500_000),
            arms: vec![
                arm("tollgate-detector", |n| timed(n, || sink(det.check()))),
                arm("tollgate", |n| timed(n, || sink(tg.check()))),
                arm("floor", |n| timed(n, || sink(fl.check()))),
            ],
            ratios: detector_ratios(),
            criterion: true,
        },
    );
    detector_note(report, name, &detector);
}

/// Two threads on one shared limiter with a detector attached, every check allowed (both
/// threads CAS the one TAT): time per check per thread.
fn detector_two_threads(s: &Settings, c: &mut criterion::Criterion, report: &mut Report) {
    let name = "direct/detector-2-threads-shared";
    if !s.wants(name, DETECTOR_ARMS) {
        return;
    }
    let (det, tg, detector) = with_and_without_detector(Quota::per_second(nz(HUGE)));
    let fl = Floor::new(HUGE.into(), NS_PER_S, HUGE.into());
    report.run(
        s,
        c,
        Case {
            name: name.into(),
            iters: s.iters(300_000),
            arms: vec![
                arm("tollgate-detector", |n| {
                    on_2_threads(n, || sink(det.check()))
                }),
                arm("tollgate", |n| on_2_threads(n, || sink(tg.check()))),
                arm("floor", |n| on_2_threads(n, || sink(fl.check()))),
            ],
            ratios: detector_ratios(),
            criterion: false,
        },
    );
    detector_note(report, name, &detector);
}

/// Two threads on one shared *denied* limiter: a denial writes nothing shared to the TAT, so
/// without a detector the threads only read shared lines, and with one the only per-check
/// writes are the detector's (its striped counter and a thread-local tick). The 2-thread ÷
/// 1-thread slowdown with the detector against without it is the cross-thread cost the
/// detector adds.
fn detector_two_threads_denied(s: &Settings, c: &mut criterion::Criterion, report: &mut Report) {
    let name = "direct/detector-2-threads-shared-denied";
    let arms = [
        "tollgate-detector-1t",
        "tollgate-detector-2t",
        "tollgate-1t",
        "tollgate-2t",
        "floor-1t",
        "floor-2t",
    ];
    if !s.wants(name, &arms) {
        return;
    }
    let (det, tg, detector) = with_and_without_detector("1/h".parse().expect("valid quota"));
    let fl = Floor::new(1, NS_PER_H, 1);
    assert!(det.check().is_permitted() && tg.check().is_permitted() && fl.check().is_ok());
    assert!(!det.check().is_permitted() && !tg.check().is_permitted() && fl.check().is_err());
    let (d, t, f) = (
        || sink(det.check()),
        || sink(tg.check()),
        || sink(fl.check()),
    );
    report.run(
        s,
        c,
        Case {
            name: name.into(),
            iters: s.iters(300_000),
            arms: vec![
                arm(arms[0], |n| on_threads(1, n, d)),
                arm(arms[1], |n| on_threads(2, n, d)),
                arm(arms[2], |n| on_threads(1, n, t)),
                arm(arms[3], |n| on_threads(2, n, t)),
                arm(arms[4], |n| on_threads(1, n, f)),
                arm(arms[5], |n| on_threads(2, n, f)),
            ],
            ratios: vec![
                ratio(arms[1], arms[5], Some(Target::AtMost(DETECTOR_VS_FLOOR))),
                ratio(arms[1], arms[3], None),
                ratio(arms[1], arms[0], None),
                ratio(arms[3], arms[2], None),
                ratio(arms[5], arms[4], None),
            ],
            criterion: false,
        },
    );
    detector_note(report, name, &detector);
}

/// The arms of the priority-class case.
const PRIORITY_ARMS: &[&str] = &["tollgate-class1", "tollgate-class0", "tollgate", "floor"];

/// The classes of `Priorities`' own example: class 1 keeps 20 % of the burst for class 0, class 2
/// keeps 50 %.
fn priorities() -> Priorities {
    Priorities::new([(0, 0.0), (1, 0.2), (2, 0.5)]).expect("valid priorities")
}

/// `check_with` of one unit in priority class 1 (and class 0) on a limiter with
/// [`priorities`] attached, against the bare `check_with(Check::cost(1))` on a limiter
/// without them, and the floor's `check_n(1)`. 10^9/s, burst 10^9: every check is allowed
/// (class 1 may fill 80 % of a 1 s burst; each check moves the TAT 1 ns). The `Check` goes
/// through `black_box` in every arm (and the floor's cost too), so no arm folds the cost or
/// the class into its code: they are per-request values.
fn priority_class(s: &Settings, c: &mut criterion::Criterion, report: &mut Report) {
    let name = "direct/priority-class";
    if !s.wants(name, PRIORITY_ARMS) {
        return;
    }
    let q = Quota::per_second(nz(HUGE));
    let prio = RateLimiter::builder(q).priorities(priorities()).build();
    let tg = RateLimiter::new(q);
    let fl = Floor::new(HUGE.into(), NS_PER_S, HUGE.into());
    let (c1, c0, bare) = (
        Check::cost(1).class(1),
        Check::cost(1).class(0),
        Check::cost(1),
    );
    let ok = |v: Result<tollgate::Verdict, _>| v.expect("within capacity").is_permitted();
    assert!(ok(prio.check_with(c1)) && ok(prio.check_with(c0)) && ok(tg.check_with(bare)));
    assert!(fl.check_n(1).is_ok());
    report.run(
        s,
        c,
        Case {
            name: name.into(),
            iters: s.iters(500_000),
            arms: vec![
                arm(PRIORITY_ARMS[0], |n| {
                    timed(n, || sink(prio.check_with(black_box(c1))))
                }),
                arm(PRIORITY_ARMS[1], |n| {
                    timed(n, || sink(prio.check_with(black_box(c0))))
                }),
                arm(PRIORITY_ARMS[2], |n| {
                    timed(n, || sink(tg.check_with(black_box(bare))))
                }),
                arm(PRIORITY_ARMS[3], |n| {
                    timed(n, || sink(fl.check_n(black_box(1))))
                }),
            ],
            ratios: vec![
                ratio(PRIORITY_ARMS[0], PRIORITY_ARMS[2], None),
                ratio(PRIORITY_ARMS[0], PRIORITY_ARMS[3], None),
                ratio(PRIORITY_ARMS[1], PRIORITY_ARMS[2], None),
                ratio(PRIORITY_ARMS[2], PRIORITY_ARMS[3], None),
            ],
            criterion: true,
        },
    );
    // Still allowed in class 1 after the run: no arm was measuring denials.
    assert!(ok(prio.check_with(c1)), "class 1 was denied during the run");
}

/// The arms of the retry-budget case.
const RETRY_ARMS: &[&str] = &[
    "tollgate-budget-original",
    "tollgate-budget-retry",
    "tollgate",
    "floor",
];

/// `check_with` of one unit on a limiter with a [`RetryBudget`] attached: originals
/// (`attempt(0)`: the budget's deposit, one CAS on a sub-bucket counter) and retries
/// (`attempt(1)`: the peek over the 10 sub-buckets, the quota step, the debit), against the
/// bare `check_with(Check::cost(1))` on a limiter without a budget, and the floor's
/// `check_n(1)`. Both budget arms check the one limiter. The budget is `RetryBudget::new()`
/// (10 % over 10 s) with its floor raised to `u32::MAX` retries per second so that no retry
/// in the run is over budget (4.3·10^10 per 10 s, against < 10^9 checks in 10 s here): the
/// peek does the same loads and arithmetic whatever the ratio and floor, so this measures
/// a retry within budget, not a denial. Quota 10^9/s, burst 10^9: every check is allowed.
fn retry_budget(s: &Settings, c: &mut criterion::Criterion, report: &mut Report) {
    let name = "direct/retry-budget";
    if !s.wants(name, RETRY_ARMS) {
        return;
    }
    let q = Quota::per_second(nz(HUGE));
    let budget = RetryBudget::new().with_floor(u32::MAX);
    let lim = RateLimiter::builder(q).retry_budget(budget).build();
    let tg = RateLimiter::new(q);
    let fl = Floor::new(HUGE.into(), NS_PER_S, HUGE.into());
    let (original, retry, bare) = (Check::cost(1), Check::cost(1).attempt(1), Check::cost(1));
    let ok = |v: Result<tollgate::Verdict, _>| v.expect("within capacity").is_permitted();
    assert!(ok(lim.check_with(original)) && ok(lim.check_with(retry)));
    assert!(ok(tg.check_with(bare)) && fl.check_n(1).is_ok());
    report.run(
        s,
        c,
        Case {
            name: name.into(),
            iters: s.iters(500_000),
            arms: vec![
                arm(RETRY_ARMS[0], |n| {
                    timed(n, || sink(lim.check_with(black_box(original))))
                }),
                arm(RETRY_ARMS[1], |n| {
                    timed(n, || sink(lim.check_with(black_box(retry))))
                }),
                arm(RETRY_ARMS[2], |n| {
                    timed(n, || sink(tg.check_with(black_box(bare))))
                }),
                arm(RETRY_ARMS[3], |n| {
                    timed(n, || sink(fl.check_n(black_box(1))))
                }),
            ],
            ratios: vec![
                ratio(RETRY_ARMS[0], RETRY_ARMS[2], None),
                ratio(RETRY_ARMS[1], RETRY_ARMS[2], None),
                ratio(RETRY_ARMS[0], RETRY_ARMS[3], None),
                ratio(RETRY_ARMS[1], RETRY_ARMS[3], None),
                ratio(RETRY_ARMS[2], RETRY_ARMS[3], None),
            ],
            criterion: true,
        },
    );
    // Still within budget after the run: no arm was measuring budget denials.
    assert!(ok(lim.check_with(retry)), "a retry was over budget");
}

fn main() {
    let s = Settings::from_env_and_args();
    let mut c = s.criterion();
    let load = Load::start();
    let mut report = Report::default();
    report.note(
        "Quotas: allowed and check_n5 use 10^9/s with burst 10^9 (T = 1 ns: every check is \
         allowed); denied uses 1/h with burst 1, used up before timing (every check is \
         denied; neither tollgate nor the floor writes on a denial). priority-class and \
         retry-budget use 10^9/s (every check allowed) and `check_with(black_box(Check))`; \
         their floor is `check_n(black_box(1))`.",
    );
    allowed(&s, &mut c, &mut report);
    denied(&s, &mut c, &mut report);
    check_n5(&s, &mut c, &mut report);
    two_threads(&s, &mut c, &mut report);
    detector_single(&s, &mut c, &mut report, true);
    detector_single(&s, &mut c, &mut report, false);
    detector_two_threads(&s, &mut c, &mut report);
    detector_two_threads_denied(&s, &mut c, &mut report);
    priority_class(&s, &mut c, &mut report);
    retry_budget(&s, &mut c, &mut report);
    c.final_summary();
    println!("{}", report.render("direct", &load));
}

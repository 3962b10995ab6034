//! Direct limiters: tollgate's `RateLimiter` against governor's `RateLimiter::direct` and the
//! hand-written floor, in paired rounds. See `benches/README.md` for the method and results.
//!
//! ```text
//! cargo bench --bench direct                       # everything (~1 min)
//! cargo bench --bench direct -- denied             # one case (substring filter)
//! TOLLGATE_BENCH_QUICK=1 cargo bench --bench direct
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
use tollgate::{Quota, RateLimiter};

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
    timed_threads(2, n, |_, n| {
        timed(n, &f);
    })
}

fn main() {
    let s = Settings::from_env_and_args();
    let mut c = s.criterion();
    let load = Load::start();
    let mut report = Report::default();
    report.note(
        "Quotas: allowed and check_n5 use 10^9/s with burst 10^9 (T = 1 ns: every check is \
         allowed); denied uses 1/h with burst 1, used up before timing (every check is \
         denied; neither tollgate nor the floor writes on a denial).",
    );
    allowed(&s, &mut c, &mut report);
    denied(&s, &mut c, &mut report);
    check_n5(&s, &mut c, &mut report);
    two_threads(&s, &mut c, &mut report);
    c.final_summary();
    println!("{}", report.render("direct", &load));
}

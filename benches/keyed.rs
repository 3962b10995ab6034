//! Keyed limiters: tollgate's `KeyedRateLimiter<u64>` against governor's
//! `RateLimiter::keyed` (its default DashMap store) and the hand-written keyed floor, in
//! paired rounds; then bytes per key. See `benches/README.md` for the method and results.
//!
//! ```text
//! cargo bench --bench keyed                        # everything (~5 min)
//! cargo bench --bench keyed -- 10k                 # one case (substring filter)
//! TOLLGATE_BENCH_QUICK=1 cargo bench --bench keyed
//! ```

#[allow(dead_code)] // The direct floor is used by benches/direct.rs.
#[path = "common/floor.rs"]
mod floor;
#[path = "common/harness.rs"]
mod harness;
#[path = "common/load.rs"]
mod load;
#[path = "common/memory.rs"]
mod memory;
#[cfg(feature = "config")]
#[path = "common/rollout.rs"]
mod rollout;
#[path = "common/settle.rs"]
mod settle;

use std::num::NonZeroU32;
use std::time::Duration;

use governor::{DefaultKeyedRateLimiter, Quota as GQuota, RateLimiter as GovernorLimiter};
use harness::{arm, ratio, sink, timed, timed_threads, Case, Report, Settings, Target};
use load::Load;
use tollgate::safety::FaultDetector;
use tollgate::{KeyedRateLimiter, Quota};

use floor::KeyedFloor;

const NS_PER_S: u64 = 1_000_000_000;
/// The per-key burst of [`Live`] quotas.
const BURST: u32 = 1_000_000_000;

fn nz(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).expect("non-zero")
}

/// How busy each key is kept.
#[derive(Debug, Clone, Copy)]
enum Keys {
    /// 1/s with burst 10^9: each check moves the key's TAT 1 s ahead, so a key stays live
    /// (its TAT ahead of now) for the whole run and is never denied — the steady state of a
    /// key that is being limited.
    Live,
    /// 10^9/s with burst 10^9 (T = 1 ns): a key is idle again 1 ns after each check, so the
    /// table may sweep it and must then re-insert it.
    Idle,
}

/// The three contestants, holding the same keys.
struct Keyed {
    tg: KeyedRateLimiter<u64>,
    gov: DefaultKeyedRateLimiter<u64>,
    fl: KeyedFloor,
}

impl Keyed {
    /// Built and warmed: every key in `0..keys` checked once by each contestant.
    fn new(keys: u64, max_keys: Option<usize>, mode: Keys) -> Self {
        let (tq, gq, fl) = match mode {
            Keys::Live => (
                Quota::per_second(nz(1)).with_burst(nz(BURST)),
                GQuota::per_second(nz(1)).allow_burst(nz(BURST)),
                KeyedFloor::new(keys as usize, 1, NS_PER_S, BURST.into()),
            ),
            Keys::Idle => (
                Quota::per_second(nz(BURST)),
                GQuota::per_second(nz(BURST)),
                KeyedFloor::new(keys as usize, BURST.into(), NS_PER_S, BURST.into()),
            ),
        };
        let builder = KeyedRateLimiter::<u64>::builder(tq);
        let tg = match max_keys {
            Some(m) => builder.max_keys(m).build(),
            None => builder.build(),
        };
        let gov = GovernorLimiter::keyed(gq);
        for k in 0..keys {
            assert!(tg.check_key(&k).is_permitted());
            assert!(gov.check_key(&k).is_ok());
            assert!(fl.check_key(k).is_ok());
        }
        Self { tg, gov, fl }
    }
}

const ARMS: &[&str] = &["tollgate", "governor", "floor"];

/// A key count: as asked, except under `cargo test --benches`, where it is cut 1000-fold so
/// the check that everything runs stays quick.
fn key_count(s: &Settings, n: u64) -> u64 {
    if s.test_mode {
        (n / 1000).max(1)
    } else {
        n
    }
}

/// Cycles through `n` consecutive keys starting at `base`.
#[derive(Debug, Clone, Copy)]
struct RoundRobin {
    base: u64,
    i: u64,
    n: u64,
}

impl RoundRobin {
    fn new(base: u64, n: u64) -> Self {
        Self { base, i: 0, n }
    }

    #[inline]
    fn next_key(&mut self) -> u64 {
        let k = self.base + self.i;
        self.i += 1;
        if self.i == self.n {
            self.i = 0;
        }
        k
    }
}

/// One thread, round-robin over `keys` keys.
#[allow(clippy::too_many_arguments)]
fn single(
    s: &Settings,
    c: &mut criterion::Criterion,
    report: &mut Report,
    name: &str,
    keys: u64,
    max_keys: Option<usize>,
    mode: Keys,
    iters: u64,
    targets: (Option<f64>, Option<f64>),
) {
    if !s.wants(name, ARMS) {
        return;
    }
    let keys = key_count(s, keys);
    eprintln!("warming {keys} keys for {name}");
    let f = Keyed::new(keys, max_keys, mode);
    let (mut a, mut b, mut d) = (
        RoundRobin::new(0, keys),
        RoundRobin::new(0, keys),
        RoundRobin::new(0, keys),
    );
    report.run(
        s,
        c,
        Case {
            name: name.into(),
            iters: s.iters(iters),
            arms: vec![
                arm("tollgate", |n| {
                    timed(n, || sink(f.tg.check_key(&a.next_key())))
                }),
                arm("governor", |n| {
                    timed(n, || sink(f.gov.check_key(&b.next_key())))
                }),
                arm("floor", |n| timed(n, || sink(f.fl.check_key(d.next_key())))),
            ],
            ratios: vec![
                ratio("tollgate", "floor", targets.1.map(Target::AtMost)),
                ratio("tollgate", "governor", targets.0.map(Target::AtMost)),
                ratio("governor", "floor", None),
            ],
            criterion: true,
        },
    );
    report.note(format!(
        "{name}: tollgate holds {} keys in a table of {} bytes.",
        f.tg.len(),
        f.tg.table_bytes()
    ));
}

/// `n` checks on each of `threads` threads, thread `i` round-robin over its own `per` keys
/// (`per == 0`: all threads on key 0).
fn on_threads(threads: usize, n: u64, per: u64, check: impl Fn(u64) + Sync) -> Duration {
    timed_threads(threads, n, |i, n| {
        let mut keys = RoundRobin::new(i as u64 * per, per.max(1));
        timed(n, || check(keys.next_key()));
    })
}

/// Keys inserted while the table grows: each block builds a fresh limiter with the default
/// builder (tollgate: `KeyedRateLimiter::new`, a cap of 2^20 keys; governor:
/// `RateLimiter::keyed`) and checks `n` new keys `0..n` once each, in order; time per check.
/// Building and dropping the limiters is outside the timed span.
fn growth(s: &Settings, c: &mut criterion::Criterion, report: &mut Report) {
    let name = "keyed/growth-1M";
    let arms = ["tollgate", "governor"];
    if !s.wants(name, &arms) {
        return;
    }
    let q = Quota::per_second(nz(1)).with_burst(nz(BURST));
    let gq = GQuota::per_second(nz(1)).allow_burst(nz(BURST));
    let mut last_bytes = 0;
    {
        let last_bytes = &mut last_bytes;
        report.run(
            s,
            c,
            Case {
                name: name.into(),
                iters: s.iters(1_000_000),
                arms: vec![
                    arm("tollgate", |n| {
                        let lim = KeyedRateLimiter::<u64>::new(q);
                        let mut k = 0;
                        let t = timed(n, || {
                            sink(lim.check_key(&k));
                            k += 1;
                        });
                        *last_bytes = lim.table_bytes();
                        t
                    }),
                    arm("governor", |n| {
                        let lim = GovernorLimiter::keyed(gq);
                        let mut k = 0;
                        timed(n, || {
                            sink(lim.check_key(&k));
                            k += 1;
                        })
                    }),
                ],
                ratios: vec![ratio("tollgate", "governor", None)],
                criterion: false,
            },
        );
    }
    report.note(format!(
        "{name}: after its last block tollgate's table held {} keys in {last_bytes} bytes.",
        s.iters(1_000_000)
    ));
}

/// Two threads on one shared key: time per check per thread, tollgate ÷ governor.
fn two_threads_one_key(s: &Settings, c: &mut criterion::Criterion, report: &mut Report) {
    let name = "keyed/2-threads-one-key";
    if !s.wants(name, ARMS) {
        return;
    }
    let f = Keyed::new(1, None, Keys::Live);
    report.run(
        s,
        c,
        Case {
            name: name.into(),
            iters: s.iters(300_000),
            arms: vec![
                arm("tollgate", |n| {
                    on_threads(2, n, 0, |k| sink(f.tg.check_key(&k)))
                }),
                arm("governor", |n| {
                    on_threads(2, n, 0, |k| sink(f.gov.check_key(&k)))
                }),
                arm("floor", |n| {
                    on_threads(2, n, 0, |k| sink(f.fl.check_key(k)))
                }),
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

/// Two threads on distinct keys (10k each): per-thread slowdown, 2 threads ÷ 1 thread.
/// Each contestant's keys are warmed first.
fn two_threads_distinct(
    s: &Settings,
    c: &mut criterion::Criterion,
    report: &mut Report,
    name: &str,
    max_keys: Option<usize>,
) {
    let arms = [
        "tollgate-1t",
        "tollgate-2t",
        "governor-1t",
        "governor-2t",
        "floor-1t",
        "floor-2t",
    ];
    if !s.wants(name, &arms) {
        return;
    }
    let per = key_count(s, 10_000);
    let f = Keyed::new(2 * per, max_keys, Keys::Live);
    drop(f.fl);
    let tg = |k: u64| sink(f.tg.check_key(&k));
    let gov = |k: u64| sink(f.gov.check_key(&k));
    // The floor here has one cell array per thread: a dense array shared by both threads
    // puts both threads' keys on every cache line, and its slowdown then measures false
    // sharing (2.4× in a trial run), not the machine.
    let floors = [0, 1].map(|_| KeyedFloor::new(per as usize, 1, NS_PER_S, BURST.into()));
    let fl = |k: u64| sink(floors[usize::from(k >= per)].check_key(k));
    report.run(
        s,
        c,
        Case {
            name: name.into(),
            iters: s.iters(300_000),
            arms: vec![
                arm(arms[0], |n| on_threads(1, n, per, tg)),
                arm(arms[1], |n| on_threads(2, n, per, tg)),
                arm(arms[2], |n| on_threads(1, n, per, gov)),
                arm(arms[3], |n| on_threads(2, n, per, gov)),
                arm(arms[4], |n| on_threads(1, n, per, fl)),
                arm(arms[5], |n| on_threads(2, n, per, fl)),
            ],
            ratios: vec![
                ratio(arms[1], arms[0], Some(Target::AtMost(1.15))),
                ratio(arms[3], arms[2], None),
                ratio(arms[5], arms[4], None),
                ratio(arms[1], arms[3], None),
            ],
            criterion: false,
        },
    );
}

/// The target: keyed `check_key` with the detector attached ≤ 1.15× the same limiter without.
const DETECTOR_VS_BARE: f64 = 1.15;

/// The same keyed limiter (live keys) twice, one with a fault detector attached, every key
/// warmed in both.
///
/// The detector is `FaultDetector::new()`'s but for a 6 s window (a sub-bucket close every
/// second rather than every 10 s), on the default clock as in production: the limiter hands
/// it each check's own clock reading. Warm-up keeps checking until two closes have brought
/// the breadth panel to its steady state (about k = 1024 of the keys sampled); during timing
/// a close still runs every second, ten times as often as with the default window.
struct WithDetector {
    det: KeyedRateLimiter<u64>,
    bare: KeyedRateLimiter<u64>,
    detector: FaultDetector,
}

impl WithDetector {
    fn new(keys: u64, max_keys: Option<usize>) -> Self {
        let q = Quota::per_second(nz(1)).with_burst(nz(BURST));
        let detector = FaultDetector::builder()
            .window(Duration::from_secs(6))
            .build();
        let build = |d: Option<FaultDetector>| {
            let mut b = KeyedRateLimiter::<u64>::builder(q);
            if let Some(m) = max_keys {
                b = b.max_keys(m);
            }
            if let Some(d) = d {
                b = b.detector(d);
            }
            b.build()
        };
        let (det, bare) = (build(Some(detector.clone())), build(None));
        for k in 0..keys {
            assert!(bare.check_key(&k).is_permitted());
        }
        settle::settle(&detector, || {
            for k in 0..keys {
                assert!(det.check_key(&k).is_permitted());
            }
        });
        Self {
            det,
            bare,
            detector,
        }
    }

    fn note(&self, report: &mut Report, name: &str) {
        let (state, stats) = (self.detector.state(), self.detector.stats());
        report.note(format!(
            "{name}: detector mode {:?}; last evaluation: {} eligible panel keys; it counted {} \
             checks ({} allowed, {} denied, {} passed through). Tables: {} bytes each.",
            state.mode,
            state.last.samples,
            stats.total(),
            stats.allowed,
            stats.denied(),
            stats.passed(),
            self.det.table_bytes()
        ));
    }
}

/// One thread, 10k live keys, with and without a detector (and the floor, for scale).
fn detector_single(
    s: &Settings,
    c: &mut criterion::Criterion,
    report: &mut Report,
    name: &str,
    max_keys: Option<usize>,
) {
    let arms = ["tollgate-detector", "tollgate", "floor"];
    if !s.wants(name, &arms) {
        return;
    }
    let keys = key_count(s, 10_000);
    eprintln!("warming {keys} keys for {name}");
    let f = WithDetector::new(keys, max_keys);
    let fl = KeyedFloor::new(keys as usize, 1, NS_PER_S, BURST.into());
    for k in 0..keys {
        assert!(fl.check_key(k).is_ok());
    }
    let (mut a, mut b, mut d) = (
        RoundRobin::new(0, keys),
        RoundRobin::new(0, keys),
        RoundRobin::new(0, keys),
    );
    report.run(
        s,
        c,
        Case {
            name: name.into(),
            iters: s.iters(500_000),
            arms: vec![
                arm(arms[0], |n| {
                    timed(n, || sink(f.det.check_key(&a.next_key())))
                }),
                arm(arms[1], |n| {
                    timed(n, || sink(f.bare.check_key(&b.next_key())))
                }),
                arm(arms[2], |n| timed(n, || sink(fl.check_key(d.next_key())))),
            ],
            ratios: vec![
                ratio(arms[0], arms[1], Some(Target::AtMost(DETECTOR_VS_BARE))),
                ratio(arms[0], arms[2], None),
                ratio(arms[1], arms[2], None),
            ],
            criterion: true,
        },
    );
    f.note(report, name);
}

/// Two threads on distinct keys (10k each, disjoint), with and without a detector: the
/// detector's cost at 2 threads, and its share of the 2-thread slowdown.
fn detector_two_threads(
    s: &Settings,
    c: &mut criterion::Criterion,
    report: &mut Report,
    name: &str,
    max_keys: Option<usize>,
) {
    let arms = [
        "tollgate-detector-1t",
        "tollgate-detector-2t",
        "tollgate-1t",
        "tollgate-2t",
    ];
    if !s.wants(name, &arms) {
        return;
    }
    let per = key_count(s, 10_000);
    let f = WithDetector::new(2 * per, max_keys);
    let det = |k: u64| sink(f.det.check_key(&k));
    let bare = |k: u64| sink(f.bare.check_key(&k));
    report.run(
        s,
        c,
        Case {
            name: name.into(),
            iters: s.iters(300_000),
            arms: vec![
                arm(arms[0], |n| on_threads(1, n, per, det)),
                arm(arms[1], |n| on_threads(2, n, per, det)),
                arm(arms[2], |n| on_threads(1, n, per, bare)),
                arm(arms[3], |n| on_threads(2, n, per, bare)),
            ],
            ratios: vec![
                ratio(arms[1], arms[3], Some(Target::AtMost(DETECTOR_VS_BARE))),
                ratio(arms[0], arms[2], Some(Target::AtMost(DETECTOR_VS_BARE))),
                ratio(arms[1], arms[0], None),
                ratio(arms[3], arms[2], None),
            ],
            criterion: false,
        },
    );
    f.note(report, name);
}

/// The target: a cohort key's check during a staged rollout ≤ 1.2× a control key's.
#[cfg(feature = "config")]
const COHORT_VS_CONTROL: f64 = 1.2;

/// A staged rollout at 50 % (`common/rollout.rs`), 10k keys of each kind, one thread: a
/// cohort key's `Rollout::check` (judged by the new document, carrying its state from the
/// old one's limiter if it has none in the new one), a control key's (the old document) and
/// the same check through a `LimitsHandle` on the new document (no rollout). Needs the
/// `config` feature (`cargo bench --features config --bench keyed -- rollout`).
#[cfg(feature = "config")]
fn rollout_cohort(s: &Settings, c: &mut criterion::Criterion, report: &mut Report) {
    let name = "keyed/rollout-10k-keys";
    let arms = ["rollout-cohort", "rollout-control", "handle"];
    if !s.wants(name, &arms) {
        return;
    }
    let keys = key_count(s, 10_000) as usize;
    eprintln!("warming {keys} cohort and {keys} control keys for {name}");
    let f = rollout::Fixture::new(keys);
    let (tier, category, route) = rollout::REQUEST;
    let one = tollgate::Check::cost(1);
    let (mut a, mut b, mut d) = (
        RoundRobin::new(0, keys as u64),
        RoundRobin::new(0, keys as u64),
        RoundRobin::new(0, keys as u64),
    );
    let (cohort, control) = (&f.cohort, &f.control);
    report.run(
        s,
        c,
        Case {
            name: name.into(),
            iters: s.iters(300_000),
            arms: vec![
                arm(arms[0], |n| {
                    timed(n, || {
                        let k = &cohort[a.next_key() as usize];
                        sink(f.rollout.check(tier, category, route, k, one))
                    })
                }),
                arm(arms[1], |n| {
                    timed(n, || {
                        let k = &control[b.next_key() as usize];
                        sink(f.rollout.check(tier, category, route, k, one))
                    })
                }),
                arm(arms[2], |n| {
                    timed(n, || {
                        let k = &cohort[d.next_key() as usize];
                        sink(f.handle.check(tier, category, route, k, one))
                    })
                }),
            ],
            ratios: vec![
                ratio(arms[0], arms[1], Some(Target::AtMost(COHORT_VS_CONTROL))),
                ratio(arms[0], arms[2], None),
                ratio(arms[1], arms[2], None),
            ],
            criterion: true,
        },
    );
    report.note(format!(
        "{name}: rollout at {} bp; the cohort keys are live in both documents' limiters.",
        f.rollout.basis_points()
    ));
}

fn main() {
    if let Ok(probe) = std::env::var(memory::PROBE_VAR) {
        memory::probe(&probe);
        return;
    }
    let s = Settings::from_env_and_args();
    let mut c = s.criterion();
    let load = Load::start();
    let mut report = Report::default();
    report.note(
        "Keys are u64 0..n checked round-robin, all warmed (inserted) before timing. Live \
         keys: 1/s with burst 10^9 (each key's TAT stays ahead of now, never denied). Idle \
         keys: 10^9/s (T = 1 ns), so every key is idle again by its next check. tollgate uses \
         KeyedRateLimiter::new (max_keys 2^20) except for 1M keys (max_keys(1_000_000)); \
         governor uses RateLimiter::keyed (DashMap); the keyed floor is a seeded multiply hash \
         into a dense Box<[AtomicU64]> of one cell per key, then the direct floor (for 2 threads on \
         distinct keys: one such array per thread, so nothing is shared).",
    );
    let (live, idle) = (Keys::Live, Keys::Idle);
    single(
        &s,
        &mut c,
        &mut report,
        "keyed/1-key",
        1,
        None,
        live,
        500_000,
        (None, None),
    );
    let t10k = (Some(0.6), Some(2.5));
    single(
        &s,
        &mut c,
        &mut report,
        "keyed/10k-keys",
        10_000,
        None,
        live,
        500_000,
        t10k,
    );
    let m10k = Some(10_000);
    let name = "keyed/10k-keys-max_keys-10k";
    single(
        &s,
        &mut c,
        &mut report,
        name,
        10_000,
        m10k,
        live,
        500_000,
        t10k,
    );
    let name = "keyed/100k-keys";
    single(
        &s,
        &mut c,
        &mut report,
        name,
        100_000,
        None,
        live,
        500_000,
        (Some(0.6), None),
    );
    let t1m = (Some(0.6), None);
    let m = Some(1_000_000);
    single(
        &s,
        &mut c,
        &mut report,
        "keyed/1M-keys",
        1_000_000,
        m,
        live,
        1_000_000,
        t1m,
    );
    single(
        &s,
        &mut c,
        &mut report,
        "keyed/10k-keys-idle",
        10_000,
        None,
        idle,
        500_000,
        t10k,
    );
    single(
        &s,
        &mut c,
        &mut report,
        "keyed/1M-keys-idle",
        1_000_000,
        m,
        idle,
        1_000_000,
        t1m,
    );
    growth(&s, &mut c, &mut report);
    two_threads_one_key(&s, &mut c, &mut report);
    let name = "keyed/2-threads-distinct-keys";
    two_threads_distinct(&s, &mut c, &mut report, name, None);
    let name = "keyed/2-threads-distinct-keys-max_keys-20k";
    two_threads_distinct(&s, &mut c, &mut report, name, Some(20_000));
    let name = "keyed/detector-10k-keys";
    detector_single(&s, &mut c, &mut report, name, None);
    let name = "keyed/detector-10k-keys-max_keys-10k";
    detector_single(&s, &mut c, &mut report, name, m10k);
    let name = "keyed/detector-2-threads-distinct-keys";
    detector_two_threads(&s, &mut c, &mut report, name, None);
    let name = "keyed/detector-2-threads-distinct-keys-max_keys-20k";
    detector_two_threads(&s, &mut c, &mut report, name, Some(20_000));
    #[cfg(feature = "config")]
    rollout_cohort(&s, &mut c, &mut report);
    c.final_summary();
    let memory = if s.paired && s.wants("keyed/memory", memory::PROBES) {
        memory::run_all(key_count(&s, 1_000_000))
    } else {
        String::new()
    };
    println!("{}{memory}", report.render("keyed", &load));
}

//! Frequency-aware admission: a flood of one-off keys against a table at its cap
//! must not take recurring customers' slots while their cells are idle between checks.
//!
//! The scenario of the issue, on a `ManualClock`: `max_keys` 10,000; 2,000 recurring customers
//! at `6/min` checking every 10–11 s (a little late, as real clients are); then for 2 minutes
//! a flood of 50,000 one-off keys a second. With the filter (the default) at least 99 % of the
//! customers' checks during the flood are allowed, and customers first seen during the flood
//! are allowed on at least 95 % of their checks from their third; the same run without it
//! ([`Admission::Off`]) is far worse, so the figures can fail. A tracked key over its limit
//! stays exactly as denied as its own GCRA says through all of it.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::time::{Duration, Instant};

use proptest::prelude::*;
use tollgate::limiter::Admission;
use tollgate::{DenyReason, KeyedRateLimiter, ManualClock, Verdict};

const NS: u64 = 1_000_000_000;
const MAX_KEYS: usize = 10_000;
const RECURRING: u64 = 2_000;
/// Customers whose first check falls in the flood's first minute.
const FIRST_SEEN: u64 = 500;
const FLOOD_PER_S: u64 = 50_000;
const FLOOD_START: u64 = 60 * NS;
const FLOOD_END: u64 = FLOOD_START + 120 * NS;
/// Customers check every 10 s plus up to this much (uniform): "a little late".
const LATE: u64 = NS;
/// The over-limit key checks this often.
const ABUSER_EVERY: u64 = NS / 10;

/// Key spaces: customers, first-seen customers, the flood, the over-limit key.
const FIRST_SEEN_BASE: u64 = 1 << 20;
const FLOOD_BASE: u64 = 1 << 40;
const ABUSER: u64 = u64::MAX - 1;

/// SplitMix64: a deterministic schedule.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let z = (self.0 ^ (self.0 >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        let z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Checks allowed of checks made.
#[derive(Clone, Copy, Debug, Default)]
struct Tally {
    allowed: u64,
    checks: u64,
}

impl Tally {
    fn add(&mut self, v: &Verdict) {
        self.checks += 1;
        self.allowed += u64::from(v.is_permitted());
    }

    fn percent(&self) -> f64 {
        100.0 * self.allowed as f64 / self.checks.max(1) as f64
    }
}

/// What one run of the scenario measured (checks made during the flood).
#[derive(Debug, Default)]
struct Figures {
    recurring: Tally,
    /// First-seen customers: their first, second, and third and later checks.
    first_seen: [Tally; 3],
    /// The over-limit key's checks whose verdict was not its own GCRA's.
    abuser_wrong: u64,
    abuser: Tally,
    admissions_refused: u64,
    filter_bytes: usize,
}

/// The over-limit key's own GCRA at 6/min (T = 10 s, τ = 60 s): the exact reference.
struct Gcra {
    tat: u64,
}

impl Gcra {
    fn check(&mut self, now: u64) -> bool {
        let (t, tau) = (10 * NS, 60 * NS);
        let start = self.tat.max(now);
        let ok = start + t - now <= tau;
        if ok {
            self.tat = start + t;
        }
        ok
    }
}

/// The scenario in progress: customers from t = 0, the flood from 60 s to 180 s.
struct Run {
    clock: ManualClock,
    lim: KeyedRateLimiter<u64>,
    rng: Rng,
    /// Checks to come: (instant, key, checks the key made before).
    due: BinaryHeap<Reverse<(u64, u64, u32)>>,
    abuser: Gcra,
    fig: Figures,
}

impl Run {
    fn new(admission: Admission) -> Run {
        let clock = ManualClock::new();
        let lim = KeyedRateLimiter::<u64>::builder("6/min".parse().expect("a valid quota"))
            .clock(clock.clone())
            .max_keys(MAX_KEYS)
            .admission(admission)
            .build();
        let mut rng = Rng(20);
        let mut due = BinaryHeap::new();
        for c in 0..RECURRING {
            due.push(Reverse((rng.below(10 * NS), c, 0)));
        }
        for c in 0..FIRST_SEEN {
            let first = FLOOD_START + rng.below(60 * NS);
            due.push(Reverse((first, FIRST_SEEN_BASE + c, 0)));
        }
        due.push(Reverse((FLOOD_START - 30 * NS, ABUSER, 0)));
        let abuser = Gcra { tat: 0 };
        let fig = Figures::default();
        Run {
            clock,
            lim,
            rng,
            due,
            abuser,
            fig,
        }
    }

    /// Runs the checks in time order, the flood's and the customers', to the flood's end.
    fn run(mut self) -> Figures {
        let gap = NS / FLOOD_PER_S;
        let mut flood = (FLOOD_START..FLOOD_END)
            .step_by(gap as usize)
            .zip(FLOOD_BASE..);
        let mut next = flood.next();
        while let Some(&Reverse((at, key, n))) = self.due.peek() {
            match next {
                Some((t, flood_key)) if t <= at => {
                    self.clock.set(Duration::from_nanos(t));
                    let _ = self.lim.check_key(&flood_key);
                    next = flood.next();
                }
                _ if at >= FLOOD_END => break,
                _ => {
                    self.due.pop();
                    self.check(at, key, n);
                }
            }
        }
        let stats = self.lim.stats();
        self.fig.admissions_refused = stats.admissions_refused;
        self.fig.filter_bytes = self.lim.filter_bytes();
        self.fig
    }

    /// A customer's check (or the over-limit key's), tallied, and its next one scheduled.
    fn check(&mut self, at: u64, key: u64, n: u32) {
        self.clock.set(Duration::from_nanos(at));
        let v = self.lim.check_key(&key);
        let in_flood = at >= FLOOD_START;
        let next = if key == ABUSER {
            if self.abuser.check(at) != v.is_permitted() {
                self.fig.abuser_wrong += 1;
            }
            if in_flood {
                self.fig.abuser.add(&v);
            }
            at + ABUSER_EVERY
        } else {
            if key >= FIRST_SEEN_BASE {
                self.fig.first_seen[(n as usize).min(2)].add(&v);
            } else if in_flood {
                self.fig.recurring.add(&v);
            }
            at + 10 * NS + self.rng.below(LATE)
        };
        self.due.push(Reverse((next, key, n + 1)));
    }
}

/// Runs the scenario with `admission`.
fn run(admission: Admission) -> Figures {
    Run::new(admission).run()
}

fn report(name: &str, f: &Figures, took: Duration) {
    let [first, second, later] = f.first_seen;
    println!(
        "{name}: recurring {:.2} % of {} checks allowed; first seen in the flood: 1st {:.1} %, \
         2nd {:.1} %, 3rd on {:.2} % of {}; over-limit key {} of {} allowed, {} verdicts off \
         its GCRA; {} admissions refused; filter {} bytes; {:.1} s",
        f.recurring.percent(),
        f.recurring.checks,
        first.percent(),
        second.percent(),
        later.percent(),
        later.checks,
        f.abuser.allowed,
        f.abuser.checks,
        f.abuser_wrong,
        f.admissions_refused,
        f.filter_bytes,
        took.as_secs_f64()
    );
}

/// The figures, with the filter and without (the same schedule, the same flood).
#[test]
fn recurring_customers_keep_their_slots_through_a_flood_of_one_off_keys() {
    let start = Instant::now();
    let on = run(Admission::default());
    report("filter (default)", &on, start.elapsed());
    let start = Instant::now();
    let off = run(Admission::Off);
    report("Admission::Off", &off, start.elapsed());

    assert!(on.recurring.checks > 20_000, "{:?}", on.recurring);
    assert!(
        on.recurring.percent() >= 99.0,
        "recurring customers: {:.2} % allowed",
        on.recurring.percent()
    );
    let later = on.first_seen[2];
    assert!(later.checks > 1_500, "{later:?}");
    assert!(
        later.percent() >= 95.0,
        "first seen in the flood, from the third check: {:.2} % allowed",
        later.percent()
    );
    assert!(
        on.admissions_refused > 5_000_000,
        "{}",
        on.admissions_refused
    );
    assert_eq!(on.filter_bytes, 1 << 20);

    // Without the filter the flood takes the customers' slots: the test can fail.
    assert!(
        off.recurring.percent() < 50.0 && off.first_seen[2].percent() < 50.0,
        "Admission::Off: {:.2} %, {:.2} %",
        off.recurring.percent(),
        off.first_seen[2].percent()
    );
    assert_eq!((off.admissions_refused, off.filter_bytes), (0, 0));

    // The over-limit key checks ten times a second: its own GCRA's verdicts exactly, one
    // allow every 10 s, with the filter or without, however hard the flood.
    for f in [&on, &off] {
        assert_eq!(f.abuser_wrong, 0, "{f:?}");
        assert!((11..=12).contains(&f.abuser.allowed), "{:?}", f.abuser);
    }
}

// ---------------------------------------------------------------------------------------
// Never forget debt: an adversary choosing keys, repeats, costs and times against a table of
// a few keys never gets an allow that an exact per-key GCRA would deny.
// ---------------------------------------------------------------------------------------

/// Quotas of the property: the text, `T` and the burst (τ = burst·T).
const QUOTAS: [(&str, u64, u64); 3] = [
    ("1/s", NS, 1),
    ("2/s;burst=3", NS / 2, 3),
    ("10/min;burst=4", 6 * NS, 4),
];

/// The adversary's keys: more than any table of the property holds.
const KEYS: u64 = 24;

/// The reference: one exact GCRA per key, a `HashMap` of TATs, advanced only by what the
/// limiter grants (a check the limiter denies costs the key nothing).
struct Exact {
    t: u64,
    tau: u64,
    tats: HashMap<u64, u64>,
}

impl Exact {
    /// Whether `key`'s own cell allows `cost` at `now`, and the TAT it would leave.
    fn step(&self, key: u64, now: u64, cost: u64) -> (bool, u64) {
        let start = self.tats.get(&key).copied().unwrap_or(0).max(now);
        let tat = start + cost * self.t;
        (tat - now <= self.tau, tat)
    }
}

/// One adversarial step: a time step (an index into a few telling ones), a key, a cost, a
/// number of repeats.
fn op() -> impl Strategy<Value = (usize, u64, u64, u32)> {
    (0usize..7, 0..KEYS, 1u64..=4, 1u32..=3)
}

/// Runs `ops` on a table of `max_keys` and checks every verdict against [`Exact`].
fn never_forgets_debt(
    quota: usize,
    max_keys: usize,
    admission: Admission,
    ops: &[(usize, u64, u64, u32)],
) -> Result<(), TestCaseError> {
    let (text, t, burst) = QUOTAS[quota];
    let clock = ManualClock::at(Duration::from_secs(1_000));
    let lim = KeyedRateLimiter::<u64>::builder(text.parse().expect("a valid quota"))
        .clock(clock.clone())
        .max_keys(max_keys)
        // One allow a day, spent below: every allow of the run comes from a key's own cell.
        .overflow_quota("1/d".parse().expect("a valid quota"))
        .admission(admission)
        .build();
    let mut exact = Exact {
        t,
        tau: burst * t,
        tats: HashMap::new(),
    };
    // Fill the table with keys of the adversary's, then spend the overflow cell.
    let now = clock.nanos();
    for key in 0..max_keys as u64 {
        prop_assert!(lim.check_key(&key).is_permitted());
        exact.tats.insert(key, exact.step(key, now, 1).1);
    }
    prop_assert!(
        lim.check_key(&u64::MAX).is_permitted(),
        "the overflow cell's one"
    );
    let steps = [0, 1, t / 3, t, burst * t / 2, burst * t, 3 * burst * t];
    for &(dt, key, cost, repeats) in ops {
        clock.advance(Duration::from_nanos(steps[dt]));
        let now = clock.nanos();
        let cost = cost.min(burst);
        for _ in 0..repeats {
            let v = lim.check_key_n(&key, cost).expect("cost ≤ burst");
            let (ok, tat) = exact.step(key, now, cost);
            let reason = v.denied().map(|d| d.reason());
            if v.is_permitted() {
                prop_assert!(ok, "key {key} allowed {cost} at {now}: its own GCRA denies");
                exact.tats.insert(key, tat);
            } else if reason == Some(DenyReason::Quota) {
                prop_assert!(!ok, "key {key} denied {cost} at {now}: its own GCRA allows");
            }
            prop_assert!(lim.len() <= max_keys);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn admission_never_grants_what_a_key_own_gcra_denies(
        quota in 0..QUOTAS.len(),
        max_keys in 4usize..=8,
        filter in prop::sample::select(vec![
            Admission::default(),
            Admission::Filter { bytes: 4 << 10 },
            Admission::Off,
        ]),
        ops in prop::collection::vec(op(), 1..200),
    ) {
        never_forgets_debt(quota, max_keys, filter, &ops)?;
    }
}

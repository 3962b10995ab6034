//! Property tests against the u128 reference GCRA in `common` (the GCRA rules, exactly): random
//! quotas, costs, live quota changes and clock schedules must give the same verdict kind, the
//! same `retry_after` to the nanosecond and the same `remaining`.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::{any_spec, byte_spec, request_spec, Model, Obs, Spec};
use proptest::prelude::*;
use tollgate::{
    Check, InsufficientCapacity, KeyedRateLimiter, ManualClock, Quota, RateLimiter, Verdict,
};

// ---------------------------------------------------------------------------------------------
// Generators

/// How far to move the clock, resolved against the quota in force.
#[derive(Clone, Debug)]
enum Wait {
    Zero,
    Small(u64),
    /// `k·T + d` ns.
    NearT(u8, i8),
    /// `τ·k/4` ns.
    Tau(u8),
    Raw(u64),
}

#[derive(Clone, Debug)]
enum Cost {
    Zero,
    /// `x mod (burst + 1)`.
    Upto(u64),
    Burst,
    Over(u64),
    Max,
}

#[derive(Clone, Debug)]
enum Op {
    Wait(Wait),
    Check(u64),
    CheckN(u64, Cost),
    CheckWith(u64, Cost),
    Peek(u64),
    SetQuota(usize),
}

fn wait() -> impl Strategy<Value = Wait> {
    prop_oneof![
        2 => Just(Wait::Zero),
        2 => (1u64..1_000).prop_map(Wait::Small),
        4 => (0u8..4, -1i8..=1).prop_map(|(k, d)| Wait::NearT(k, d)),
        1 => (1u8..8).prop_map(Wait::Tau),
        1 => (0u64..1 << 40).prop_map(Wait::Raw),
    ]
}

fn cost() -> impl Strategy<Value = Cost> {
    prop_oneof![
        1 => Just(Cost::Zero),
        4 => any::<u64>().prop_map(Cost::Upto),
        1 => Just(Cost::Burst),
        1 => (1u64..3).prop_map(Cost::Over),
        1 => Just(Cost::Max),
    ]
}

fn ops(keys: u64) -> impl Strategy<Value = Vec<Op>> {
    let op = prop_oneof![
        3 => wait().prop_map(Op::Wait),
        4 => (0..keys).prop_map(Op::Check),
        3 => (0..keys, cost()).prop_map(|(k, c)| Op::CheckN(k, c)),
        1 => (0..keys, cost()).prop_map(|(k, c)| Op::CheckWith(k, c)),
        1 => (0..keys).prop_map(Op::Peek),
        1 => any::<usize>().prop_map(Op::SetQuota),
    ];
    prop::collection::vec(op, 1..120)
}

fn resolve_wait(w: &Wait, spec: &Spec) -> u64 {
    let t = spec.unit_weight();
    let ns = match *w {
        Wait::Zero => 0,
        Wait::Small(n) => u128::from(n),
        Wait::NearT(k, d) => (u128::from(k) * t).saturating_add_signed(i128::from(d)),
        Wait::Tau(k) => spec.tau * u128::from(k) / 4,
        Wait::Raw(n) => u128::from(n),
    };
    u64::try_from(ns).unwrap_or(u64::MAX)
}

fn resolve_cost(c: &Cost, spec: &Spec) -> u64 {
    let burst = u64::try_from(spec.burst).unwrap();
    match *c {
        Cost::Zero => 0,
        Cost::Upto(x) => x % burst.saturating_add(1).max(1),
        Cost::Burst => burst,
        Cost::Over(d) => burst.saturating_add(d),
        Cost::Max => u64::MAX,
    }
}

// ---------------------------------------------------------------------------------------------
// One driver for both limiters

trait Subject {
    /// The model's key for `key`: a direct limiter has one cell.
    fn cell(&self, key: u64) -> u64 {
        key
    }
    fn check(&self, key: u64) -> Verdict;
    fn check_n(&self, key: u64, n: u64) -> Result<Verdict, InsufficientCapacity>;
    fn check_with(&self, key: u64, n: u64) -> Result<Verdict, InsufficientCapacity>;
    fn peek(&self, key: u64) -> Verdict;
    fn set_quota(&self, q: Quota);
}

impl Subject for RateLimiter {
    fn cell(&self, _: u64) -> u64 {
        0
    }
    fn check(&self, _: u64) -> Verdict {
        self.check()
    }
    fn check_n(&self, _: u64, n: u64) -> Result<Verdict, InsufficientCapacity> {
        self.check_n(n)
    }
    fn check_with(&self, _: u64, n: u64) -> Result<Verdict, InsufficientCapacity> {
        self.check_with(Check::cost(n).attempt(1).class(3))
    }
    fn peek(&self, _: u64) -> Verdict {
        self.peek()
    }
    fn set_quota(&self, q: Quota) {
        self.set_quota(q);
    }
}

impl Subject for KeyedRateLimiter<u64> {
    fn check(&self, key: u64) -> Verdict {
        self.check_key(&key)
    }
    fn check_n(&self, key: u64, n: u64) -> Result<Verdict, InsufficientCapacity> {
        self.check_key_n(&key, n)
    }
    fn check_with(&self, key: u64, n: u64) -> Result<Verdict, InsufficientCapacity> {
        self.check_key_with(&key, Check::cost(n).attempt(2))
    }
    fn peek(&self, key: u64) -> Verdict {
        self.peek_key(&key)
    }
    fn set_quota(&self, q: Quota) {
        self.set_quota(q);
    }
}

/// Runs `ops` on `lim` and on one model per key, comparing every verdict exactly.
fn run(
    lim: &dyn Subject,
    clock: &ManualClock,
    specs: &[Spec],
    ops: &[Op],
) -> Result<(), TestCaseError> {
    let mut spec = specs[0].clone();
    prop_assert_eq!(
        spec.quota().burst(),
        u64::try_from(spec.burst).unwrap(),
        "{}",
        spec.text
    );
    let mut models: HashMap<u64, Model> = HashMap::new();
    for (i, op) in ops.iter().enumerate() {
        let now = u128::from(clock.nanos());
        let model = |key: u64, models: &mut HashMap<u64, Model>, spec: &Spec| {
            models
                .entry(lim.cell(key))
                .or_insert_with(|| Model::new(spec.clone()))
                .clone()
        };
        let (got, want) = match op {
            Op::Wait(w) => {
                clock.advance(Duration::from_nanos(resolve_wait(w, &spec)));
                continue;
            }
            Op::SetQuota(i) => {
                spec = specs[i % specs.len()].clone();
                let quota = spec.quota();
                prop_assert_eq!(
                    quota.burst(),
                    u64::try_from(spec.burst).unwrap(),
                    "{}",
                    spec.text
                );
                lim.set_quota(quota);
                for m in models.values_mut() {
                    m.set_spec(spec.clone(), now);
                }
                continue;
            }
            Op::Check(k) => {
                let got = Obs::of(lim.check(*k));
                let mut m = model(*k, &mut models, &spec);
                let want = m.check(now, 1);
                models.insert(lim.cell(*k), m);
                (got, want)
            }
            Op::CheckN(k, c) | Op::CheckWith(k, c) => {
                let n = resolve_cost(c, &spec);
                let got = match op {
                    Op::CheckN(..) => Obs::of_n(lim.check_n(*k, n)),
                    _ => Obs::of_n(lim.check_with(*k, n)),
                };
                let mut m = model(*k, &mut models, &spec);
                let want = m.check(now, n);
                models.insert(lim.cell(*k), m);
                (got, want)
            }
            Op::Peek(k) => {
                let got = Obs::of(lim.peek(*k));
                (got, model(*k, &mut models, &spec).peek(now))
            }
        };
        prop_assert_eq!(
            got,
            want,
            "op #{} {:?} at {} ns under {}",
            i,
            op,
            now,
            spec.text
        );
    }
    Ok(())
}

fn direct(specs: &[Spec], ops: &[Op], start: u64) -> Result<(), TestCaseError> {
    let clock = ManualClock::at(Duration::from_nanos(start));
    let lim = RateLimiter::builder(specs[0].quota())
        .clock(clock.clone())
        .build();
    run(&lim, &clock, specs, ops)
}

fn keyed(specs: &[Spec], ops: &[Op], start: u64) -> Result<(), TestCaseError> {
    let clock = ManualClock::at(Duration::from_nanos(start));
    let lim = KeyedRateLimiter::<u64>::builder(specs[0].quota())
        .clock(clock.clone())
        .max_keys(64)
        .build();
    run(&lim, &clock, specs, ops)
}

fn start() -> impl Strategy<Value = u64> {
    prop_oneof![Just(0u64), 0u64..1 << 50]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(if cfg!(debug_assertions) { 256 } else { 1024 }))]

    #[test]
    fn direct_requests_match_the_oracle(
        specs in prop::collection::vec(request_spec(), 1..4), ops in ops(1), start in start(),
    ) {
        direct(&specs, &ops, start)?;
    }

    #[test]
    fn keyed_one_key_requests_match_the_oracle(
        specs in prop::collection::vec(request_spec(), 1..4), ops in ops(1), start in start(),
    ) {
        keyed(&specs, &ops, start)?;
    }

    #[test]
    fn keyed_several_keys_requests_match_the_oracle(
        specs in prop::collection::vec(request_spec(), 1..4), ops in ops(5), start in start(),
    ) {
        keyed(&specs, &ops, start)?;
    }

    #[test]
    fn direct_byte_budgets_match_the_oracle(
        specs in prop::collection::vec(byte_spec(), 1..4), ops in ops(1), start in start(),
    ) {
        direct(&specs, &ops, start)?;
    }

    #[test]
    fn keyed_byte_budgets_match_the_oracle(
        specs in prop::collection::vec(byte_spec(), 1..4), ops in ops(4), start in start(),
    ) {
        keyed(&specs, &ops, start)?;
    }

    /// Switching between request quotas and byte budgets live carries the TAT over too.
    #[test]
    fn mixed_quota_changes_match_the_oracle(
        specs in prop::collection::vec(any_spec(), 2..5), ops in ops(3), start in start(),
    ) {
        direct(&specs, &ops, start)?;
        keyed(&specs, &ops, start)?;
    }

    #[test]
    fn retry_after_is_exact_direct(spec in request_spec(), split in 1u64..6, start in start()) {
        retry_after_direct(&spec, split, start)?;
    }

    #[test]
    fn retry_after_is_exact_keyed(spec in request_spec(), split in 1u64..6, start in start(), key in any::<u64>()) {
        retry_after_keyed(&spec, split, start, key)?;
    }

    #[test]
    fn retry_after_is_exact_byte_budgets(spec in byte_spec(), split in 1u64..6, start in start(), key in any::<u64>()) {
        retry_after_direct(&spec, split, start)?;
        retry_after_keyed(&spec, split, start, key)?;
    }
}

fn retry_after_direct(spec: &Spec, split: u64, start: u64) -> Result<(), TestCaseError> {
    let clock = ManualClock::at(Duration::from_nanos(start));
    let lim = RateLimiter::builder(spec.quota())
        .clock(clock.clone())
        .build();
    retry_after_is_exact(&lim, 0, &clock, spec, split)
}

fn retry_after_keyed(spec: &Spec, split: u64, start: u64, key: u64) -> Result<(), TestCaseError> {
    let clock = ManualClock::at(Duration::from_nanos(start));
    let lim = KeyedRateLimiter::<u64>::builder(spec.quota())
        .clock(clock.clone())
        .max_keys(8)
        .build();
    retry_after_is_exact(&lim, key, &clock, spec, split)
}

/// Checks `burst / split` units until denied; then one ns before `retry_after` the check is
/// still denied (by exactly 1 ns), and at `retry_after` it is allowed.
fn retry_after_is_exact(
    lim: &dyn Subject,
    key: u64,
    clock: &ManualClock,
    spec: &Spec,
    split: u64,
) -> Result<(), TestCaseError> {
    let n = (u64::try_from(spec.burst).unwrap() / split).max(1);
    let mut tries = 0;
    let r = loop {
        match lim.check_n(key, n).unwrap() {
            Verdict::Allow(_) => tries += 1,
            Verdict::Deny(d) => break d.retry_after(),
            other => panic!("{other:?}"),
        }
        prop_assert!(
            tries <= 2 * split,
            "{}: cost {} allowed {} times",
            spec.text,
            n,
            tries
        );
    };
    let now = clock.now();
    prop_assert!(r > Duration::ZERO && r <= Duration::from_nanos(u64::try_from(spec.tau).unwrap()));
    let one = Duration::from_nanos(1);
    clock.set(now + r - one);
    let v = lim.check_n(key, n).unwrap();
    prop_assert_eq!(
        v.denied().map(|d| d.retry_after()),
        Some(one),
        "{}: cost {}",
        spec.text,
        n
    );
    clock.set(now + r);
    prop_assert!(
        lim.check_n(key, n).unwrap().is_permitted(),
        "{}: cost {} at retry_after",
        spec.text,
        n
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Live quota changes: specific scenarios, on both limiters

fn q(s: &str) -> Quota {
    s.parse().unwrap()
}

/// Each scenario runs on a direct limiter and on key 7 of a keyed one.
fn both(quota: &str, scenario: impl Fn(&dyn Subject, &ManualClock)) {
    let clock = ManualClock::at(Duration::from_secs(1_000));
    scenario(
        &RateLimiter::builder(q(quota)).clock(clock.clone()).build(),
        &clock,
    );
    let clock = ManualClock::at(Duration::from_secs(1_000));
    let keyed = KeyedRateLimiter::<u64>::builder(q(quota))
        .clock(clock.clone())
        .build();
    scenario(&keyed, &clock);
}

fn allowed_now(lim: &dyn Subject, n: u64) -> u64 {
    (0..n).filter(|_| lim.check(7).is_permitted()).count() as u64
}

fn retry(lim: &dyn Subject) -> Duration {
    lim.check(7).denied().expect("a denial").retry_after()
}

#[test]
fn tightening_keeps_the_share_used_and_never_locks_out() {
    both("10/s;burst=100", |lim, clock| {
        assert_eq!(allowed_now(lim, 200), 100); // all of the burst used
        lim.set_quota(q("1/s;burst=2"));
        // All of the new burst is used: the wait is one new interval, not the 10 s left over.
        assert_eq!(retry(lim), Duration::from_secs(1));
        clock.advance(Duration::from_secs(1));
        assert_eq!(allowed_now(lim, 5), 1);
        assert_eq!(retry(lim), Duration::from_secs(1));
    });
}

#[test]
fn changing_the_rate_keeps_an_empty_cell_empty() {
    both("10/s", |lim, clock| {
        assert_eq!(allowed_now(lim, 20), 10); // empty
        lim.set_quota(q("100/s"));
        assert_eq!(retry(lim), Duration::from_millis(10), "one new interval");
        clock.advance(Duration::from_millis(10));
        assert_eq!(allowed_now(lim, 5), 1);
        lim.set_quota(q("1/s;burst=10"));
        assert_eq!(allowed_now(lim, 5), 0, "a slower rate does not refill it");
    });
}

#[test]
fn a_full_bucket_stays_full_and_gets_no_free_burst() {
    both("100/s", |lim, _| {
        lim.set_quota(q("1/s;burst=5"));
        assert_eq!(allowed_now(lim, 50), 5);
        // Loosening again: the cell is empty and stays empty.
        lim.set_quota(q("100/s"));
        assert_eq!(allowed_now(lim, 50), 0);
    });
}

#[test]
fn loosening_keeps_the_share_used() {
    both("1/s;burst=2", |lim, clock| {
        assert_eq!(allowed_now(lim, 5), 2); // all used
        lim.set_quota(q("1/s;burst=10"));
        assert_eq!(
            allowed_now(lim, 20),
            0,
            "the fill level carried over, not time"
        );
        assert_eq!(retry(lim), Duration::from_secs(1));
        clock.advance(Duration::from_secs(3));
        assert_eq!(allowed_now(lim, 20), 3);
    });
    both("1/s;burst=2", |lim, _| {
        assert_eq!(allowed_now(lim, 1), 1); // half used
        lim.set_quota(q("1/s;burst=10"));
        assert_eq!(allowed_now(lim, 20), 5, "half used stays half used");
    });
    both("1/s;burst=2", |lim, _| {
        lim.set_quota(q("1/s;burst=10"));
        assert_eq!(
            allowed_now(lim, 20),
            10,
            "a full bucket is full under the new burst too"
        );
    });
}

#[test]
fn tightening_and_loosening_back_grants_nothing() {
    both("1/s;burst=100", |lim, _| {
        assert_eq!(allowed_now(lim, 100), 100); // all used
        lim.set_quota(q("1/s;burst=3"));
        assert_eq!(retry(lim), Duration::from_secs(1));
        lim.set_quota(q("1/s;burst=100"));
        // The old rule stored the clamp and freed 97 requests here.
        assert_eq!(allowed_now(lim, 200), 0);
    });
    both("1/s;burst=100", |lim, _| {
        assert_eq!(allowed_now(lim, 40), 40);
        lim.set_quota(q("1/s;burst=3"));
        lim.set_quota(q("1/s;burst=100"));
        // 40 % used stays 40 % used (1.2 s of 3 s, exact in ns), both ways.
        assert_eq!(allowed_now(lim, 200), 60);
    });
}

#[test]
fn a_peek_or_zero_cost_check_during_a_change_stores_nothing() {
    both("1/s;burst=100", |lim, _| {
        assert_eq!(allowed_now(lim, 100), 100);
        lim.set_quota(q("1/s;burst=3"));
        assert!(!lim.peek(7).is_permitted());
        let zero = lim
            .check_n(7, 0)
            .unwrap()
            .allowed()
            .expect("cost 0 is allowed");
        assert_eq!(zero.remaining(), 0);
        assert_eq!(zero.reset_after(), Duration::from_secs(3));
        lim.set_quota(q("1/s;burst=100"));
        assert_eq!(allowed_now(lim, 10), 0, "still all used");
    });
}

#[test]
fn remaining_and_reset_after_are_reported() {
    both("4/s;burst=3", |lim, clock| {
        let a = lim.check(7).allowed().unwrap();
        assert_eq!(
            (a.remaining(), a.reset_after()),
            (2, Duration::from_millis(250))
        );
        let a = lim.check_n(7, 2).unwrap().allowed().unwrap();
        assert_eq!(
            (a.remaining(), a.reset_after()),
            (0, Duration::from_millis(750))
        );
        clock.advance(Duration::from_millis(260));
        let a = lim.check_n(7, 0).unwrap().allowed().unwrap();
        assert_eq!(
            (a.remaining(), a.reset_after()),
            (1, Duration::from_millis(490))
        );
        assert_eq!(
            lim.check_n(7, 4).unwrap_err(),
            lim.check_n(7, 4).unwrap_err(),
            "cost > burst is an error, every time"
        );
        assert_eq!(lim.check_n(7, 4).unwrap_err().capacity(), 3);
    });
}

#[test]
fn byte_budgets_charge_chunks_with_exact_units() {
    // 2 Gbit/s = 250 MB/s: 4 ns per byte; the burst is 64 MiB.
    both("2Gbit/s;burst=64MiB", |lim, clock| {
        let burst = 64 << 20;
        let a = lim.check_n(7, 1_000).unwrap().allowed().unwrap();
        assert_eq!(a.reset_after(), Duration::from_nanos(4_000));
        assert_eq!(a.remaining(), burst - 1_000);
        assert!(lim.check_n(7, burst - 1_000).unwrap().is_permitted());
        assert_eq!(retry(lim), Duration::from_nanos(4));
        clock.advance(Duration::from_micros(1));
        assert_eq!(
            lim.check_n(7, 0).unwrap().allowed().unwrap().remaining(),
            250
        );
        assert_eq!(lim.check_n(7, burst + 1).unwrap_err().capacity(), burst);
    });
    // 3 B/s: 333 333 333.3… ns per byte; chunks round up once, not per byte.
    both("3B/s", |lim, _| {
        let a = lim.check_n(7, 2).unwrap().allowed().unwrap();
        assert_eq!(a.reset_after(), Duration::from_nanos(666_666_667));
        // 333 333 333 ns of slack hold no whole byte (one byte weighs 333 333 334 ns)…
        assert_eq!(a.remaining(), 0);
        // …and one byte more overshoots τ = 1 s by exactly 1 ns.
        assert_eq!(retry(lim), Duration::from_nanos(1));
    });
}

//! The keyed table: bounded by `max_keys` whatever arrives, the
//! first `max_keys` live keys always tracked and never reset, newcomers past the cap on the
//! overflow cell (`DenyReason::KeyTableFull`), idle keys swept so new keys are tracked again.

mod common;

use std::time::Duration;

use common::{Model, Obs, Spec};
use tollgate::{DenyReason, KeyedRateLimiter, ManualClock, Quota, Verdict};

fn q(s: &str) -> Quota {
    s.parse().unwrap()
}

/// `(keys, max_keys)`: 2 000 000 through 100 000 in release, a tenth in debug.
fn scale() -> (u64, usize) {
    if cfg!(debug_assertions) {
        (200_000, 10_000)
    } else {
        (2_000_000, 100_000)
    }
}

fn reason(v: Verdict) -> Option<DenyReason> {
    v.denied().map(|d| d.reason())
}

/// Per-key models sharing one spec: the TATs in a vector.
struct Models {
    model: Model,
    tats: Vec<u128>,
}

impl Models {
    fn new(spec: Spec, keys: usize) -> Models {
        Models {
            model: Model::new(spec),
            tats: vec![0; keys],
        }
    }

    fn check(&mut self, key: usize, now: u128, n: u64) -> Obs {
        self.model.tat = self.tats[key];
        let obs = self.model.check(now, n);
        self.tats[key] = self.model.tat;
        obs
    }

    fn peek(&mut self, key: usize, now: u128) -> Obs {
        self.model.tat = self.tats[key];
        self.model.peek(now)
    }
}

#[test]
fn two_million_keys_through_a_table_of_100k() {
    let (keys, max_keys) = scale();
    let spec = Spec::requests(1, 1, Some(2)); // "1/s;burst=2"
    let clock = ManualClock::at(Duration::from_secs(100));
    let lim = KeyedRateLimiter::<u64>::builder(spec.quota())
        .clock(clock.clone())
        .max_keys(max_keys)
        .overflow_quota(q("1/d"))
        .build();
    let mut models = Models::new(spec, max_keys);
    let now = u128::from(clock.nanos());

    // A frozen instant: the first max_keys keys are tracked, every later one shares the
    // overflow cell (one per day: the first newcomer is allowed, the rest denied as such).
    let mut newcomers_allowed = 0;
    for k in 0..keys {
        let v = lim.check_key(&k);
        if k < max_keys as u64 {
            assert_eq!(
                Obs::of(v),
                models.check(k as usize, now, 1),
                "tracked key {k}"
            );
        } else if v.is_permitted() {
            newcomers_allowed += 1;
        } else {
            assert_eq!(reason(v), Some(DenyReason::KeyTableFull), "newcomer {k}");
        }
        if k % 65_536 == 0 {
            assert!(lim.len() <= max_keys, "len {} after {k} keys", lim.len());
        }
    }
    assert_eq!(newcomers_allowed, 1);
    assert_eq!(lim.len(), max_keys);
    let overflow = lim
        .peek_key(&u64::MAX)
        .denied()
        .expect("the overflow cell is used up");
    assert_eq!(overflow.reason(), DenyReason::KeyTableFull);
    assert_eq!(overflow.retry_after(), Duration::from_secs(86_400));

    // The tracked keys kept their state: the same verdicts as the model, now and later.
    for advance_ms in [0, 0, 500, 600, 0] {
        clock.advance(Duration::from_millis(advance_ms));
        let now = u128::from(clock.nanos());
        for k in 0..max_keys {
            let key = k as u64;
            assert_eq!(Obs::of(lim.peek_key(&key)), models.peek(k, now), "peek {k}");
            assert_eq!(
                Obs::of(lim.check_key(&key)),
                models.check(k, now, 1),
                "key {k}"
            );
        }
    }

    // Every tracked key goes idle: new keys are tracked again (swept in), within the cap.
    clock.advance(Duration::from_secs(10));
    let mut untracked = Vec::new();
    for k in keys..keys + max_keys as u64 {
        match lim.check_key(&k) {
            // Its own fresh cell (burst 2): one more left.
            Verdict::Allow(a) => assert_eq!(a.remaining(), 1, "key {k}"),
            v => untracked.push((k - keys, reason(v))),
        }
        if k % 4_096 == 0 {
            assert!(lim.len() <= max_keys);
        }
    }
    assert!(lim.len() <= max_keys);
    assert!(
        untracked.is_empty(),
        "{} of {max_keys} new keys met the overflow cell while idle keys filled the table \
         (first: #{:?})",
        untracked.len(),
        untracked.first()
    );
    assert_eq!(lim.len(), max_keys);
    // Key 0 was swept out to make room: it is a new key now, and meets the overflow cell.
    assert_eq!(reason(lim.check_key(&0)), Some(DenyReason::KeyTableFull));
}

#[test]
fn newcomers_share_the_overflow_cell_with_its_own_quota() {
    let clock = ManualClock::new();
    let lim = KeyedRateLimiter::<u64>::builder(q("1/h"))
        .clock(clock.clone())
        .max_keys(100)
        .overflow_quota(q("3/min"))
        .build();
    for k in 0..100 {
        assert!(lim.check_key(&k).is_permitted());
    }
    let mut model = Model::new(Spec::requests(3, 2, None));
    model.reason = DenyReason::KeyTableFull;
    for at in [0, 0, 0, 0, 19, 1, 0, 5] {
        clock.advance(Duration::from_secs(at));
        let now = u128::from(clock.nanos());
        for newcomer in 1_000..1_004 {
            assert_eq!(Obs::of(lim.peek_key(&newcomer)), model.peek(now));
            assert_eq!(
                Obs::of(lim.check_key(&newcomer)),
                model.check(now, 1),
                "at {now}"
            );
        }
        assert_eq!(lim.len(), 100);
    }
    // Tracked keys are untouched by all that: still denied by their own hour-long cell.
    let d = lim.check_key(&7).denied().unwrap();
    assert_eq!(d.reason(), DenyReason::Quota);
    assert_eq!(d.retry_after(), Duration::from_secs(3_600 - 25));
}

#[test]
fn without_an_overflow_quota_the_overflow_cell_follows_set_quota() {
    let clock = ManualClock::new();
    let lim = KeyedRateLimiter::<u64>::builder(q("2/h"))
        .clock(clock.clone())
        .max_keys(10)
        .build();
    for k in 0..10 {
        assert!(lim.check_key(&k).is_permitted());
    }
    let mut model = Model::new(Spec::requests(2, 3, None));
    model.reason = DenyReason::KeyTableFull;
    let now = u128::from(clock.nanos());
    for newcomer in 100..104 {
        assert_eq!(Obs::of(lim.check_key(&newcomer)), model.check(now, 1));
    }
    // The new per-key quota applies to the overflow cell too, keeping its fill level.
    let looser = Spec::requests(5, 3, Some(10)); // τ: 1 h → 2 h
    lim.set_quota(looser.quota());
    model.set_spec(looser, now);
    for newcomer in 200..207 {
        assert_eq!(Obs::of(lim.check_key(&newcomer)), model.check(now, 1));
    }
    assert_eq!(reason(lim.check_key(&300)), Some(DenyReason::KeyTableFull));
    assert_eq!(lim.len(), 10);
}

/// The first `max_keys` live keys are always tracked, and idle entries are swept
/// "before giving up on a full table". Once every tracked key is idle (here for τ: with
/// admission on, a newcomer seen once displaces no key idle for less, see
/// `tests/admission.rs`), the very next new key is the only live key: it must get its own
/// cell, not the (used-up) overflow cell.
#[test]
fn the_first_newcomer_after_every_key_went_idle_is_tracked() {
    let mut sent_to_overflow = Vec::new();
    for trial in 0..64 {
        let clock = ManualClock::new();
        let lim = KeyedRateLimiter::<u64>::builder(q("1/s"))
            .clock(clock.clone())
            .max_keys(64)
            .overflow_quota(q("1/d"))
            .build();
        for k in 0..64 {
            assert!(lim.check_key(&k).is_permitted());
        }
        // One newcomer while all 64 are live: it takes the overflow cell's one per day.
        assert!(lim.check_key(&1_000).is_permitted());
        clock.advance(Duration::from_secs(2));
        // Every tracked key is idle now.
        let v = lim.check_key(&2_000);
        if !v.is_permitted() {
            sent_to_overflow.push((trial, reason(v)));
        }
        assert!(lim.len() <= 64);
    }
    assert!(
        sent_to_overflow.is_empty(),
        "{} of 64 trials sent the only live key to the overflow cell: {sent_to_overflow:?}",
        sent_to_overflow.len()
    );
}

#[test]
fn tracked_live_keys_are_never_reset_by_a_flood() {
    let (flood, _) = scale();
    let flood = flood / 10;
    let spec = Spec::requests(1, 2, Some(2)); // "1/min;burst=2"
    let clock = ManualClock::new();
    let lim = KeyedRateLimiter::<u64>::builder(spec.quota())
        .clock(clock.clone())
        .max_keys(1_000)
        .build();
    let mut models = Models::new(spec, 1_000);
    let now = u128::from(clock.nanos());
    for k in 0..1_000 {
        for _ in 0..3 {
            assert_eq!(Obs::of(lim.check_key(&(k as u64))), models.check(k, now, 1));
        }
    }
    // Every tracked key is denied for a minute. Floods of new keys, while time passes but less
    // than τ: the denials persist with the exact retry-after, and the table stays capped.
    for (round, advance) in [0u64, 10, 19].into_iter().enumerate() {
        clock.advance(Duration::from_secs(advance));
        let start = 1_000_000 * (round as u64 + 1);
        for k in start..start + flood {
            let v = lim.check_key(&k);
            assert!(v.is_permitted() || reason(v) == Some(DenyReason::KeyTableFull));
        }
        assert_eq!(lim.len(), 1_000);
        let now = u128::from(clock.nanos());
        for k in 0..1_000 {
            let got = Obs::of(lim.check_key(&(k as u64)));
            assert_eq!(got, models.check(k, now, 1), "key {k} after flood {round}");
            assert!(!got.is_allow());
        }
    }
}

#[test]
fn string_keys_are_looked_up_by_str() {
    let clock = ManualClock::new();
    let lim = KeyedRateLimiter::<String>::builder(q("1/s;burst=2"))
        .clock(clock.clone())
        .max_keys(1_000)
        .build();
    let bytes = lim.table_bytes();
    assert!(lim.check_key("alice").is_permitted());
    assert!(lim.check_key(&String::from("alice")).is_permitted());
    let d = lim.check_key("alice").denied().expect("the same cell");
    assert_eq!(d.retry_after(), Duration::from_secs(1));
    assert!(lim.check_key_n("bob", 2).unwrap().is_permitted());
    assert!(!lim.peek_key("bob").is_permitted());
    assert_eq!(lim.len(), 2);
    // Long attacker-chosen keys cost no more than short ones.
    let long = "x".repeat(1 << 20);
    for i in 0..100 {
        assert!(lim.check_key(format!("{i}{long}").as_str()).is_permitted());
    }
    assert_eq!(lim.len(), 102);
    assert_eq!(lim.table_bytes(), bytes);
    assert!(
        lim.table_bytes() / lim.max_keys() <= 32,
        "{} bytes per key",
        lim.table_bytes() / 1_000
    );
}

#[test]
fn zero_cost_checks_and_peeks_write_nothing() {
    let spec = Spec::requests(10, 1, Some(3)); // "10/s;burst=3"
    let clock = ManualClock::at(Duration::from_secs(1));
    let lim = KeyedRateLimiter::<u64>::builder(spec.quota())
        .clock(clock.clone())
        .max_keys(4)
        .overflow_quota(q("1/min"))
        .build();
    // A new key: reported as a full cell, not inserted.
    for _ in 0..10 {
        let zero = lim.check_key_n(&1, 0).unwrap().allowed().unwrap();
        assert_eq!((zero.remaining(), zero.reset_after()), (3, Duration::ZERO));
        let peek = lim.peek_key(&1).allowed().unwrap();
        assert_eq!(peek.remaining(), 2);
    }
    assert_eq!(lim.len(), 0);
    // A tracked key: its state is unchanged by any number of peeks and zero-cost checks.
    let mut model = Model::new(spec);
    let now = u128::from(clock.nanos());
    for _ in 0..2 {
        assert_eq!(Obs::of(lim.check_key(&1)), model.check(now, 1));
    }
    for _ in 0..10 {
        assert_eq!(Obs::of_n(lim.check_key_n(&1, 0)), model.eval(now, 0).0);
        assert_eq!(Obs::of(lim.peek_key(&1)), model.peek(now));
    }
    assert_eq!(Obs::of(lim.check_key(&1)), model.check(now, 1));
    assert_eq!(Obs::of(lim.check_key(&1)), model.check(now, 1));
    assert_eq!(lim.len(), 1);
    // A full table: peeks at newcomers show the overflow cell without using it.
    for k in 2..5 {
        assert!(lim.check_key(&k).is_permitted());
    }
    for _ in 0..10 {
        let peek = lim
            .peek_key(&99)
            .allowed()
            .expect("the overflow cell is full");
        assert_eq!(peek.remaining(), 0); // its burst is 1: the peek's one unit would use it
        assert!(lim.check_key_n(&99, 0).unwrap().is_permitted());
    }
    assert!(lim.check_key(&99).is_permitted());
    let d = lim.peek_key(&98).denied().unwrap();
    assert_eq!(
        (d.reason(), d.retry_after()),
        (DenyReason::KeyTableFull, Duration::from_secs(60))
    );
    assert_eq!(lim.len(), 4);
}

//! Model checks of charges under loom: `charge`'s compare-and-swap loop racing
//! checks, a quota change and a key's move in the table. Each invariant fails if a charge and
//! a check can lose each other's write (a plain store in place of the swap).
//!
//! Run: `RUSTFLAGS="--cfg loom" cargo test --release --test loom_charge -- --nocapture`.
#![cfg(loom)]

use std::time::Duration;

use loom::thread;
use tollgate::{RateLimiter, Verdict};

mod loom_support;
use loom_support::*;

/// A charge of 2 racing two checks of a direct cell of burst 3 with one unit of debt allowed.
/// Whatever the order, the units taken — allowed checks plus the charge's paid part — are what
/// the cell shows afterwards: with `u` used, the next check waits `(u − 2) · 100 ms` if `u ≥ 3`.
#[test]
fn charge_races_checks() {
    explore("charge_races_checks", 2, || {
        let clock = clock();
        let lim = loom::sync::Arc::new(
            RateLimiter::builder(quota("10/s;burst=3"))
                .clock(clock.clone())
                .max_debt(Duration::from_millis(100))
                .build(),
        );
        let (l2, l3) = (lim.clone(), lim.clone());
        let t2 = thread::spawn(move || u64::from(l2.check().is_permitted()));
        let t3 = thread::spawn(move || u64::from(l3.check().is_permitted()));
        let c = lim.charge(2);
        let allowed = t2.join().unwrap() + t3.join().unwrap();
        let used = allowed + (2 - c.unpaid());
        assert!(used <= 4, "{used} taken of 3 and one of debt");
        assert!(allowed >= 1, "one check always had room");
        match lim.check() {
            Verdict::Deny(d) => {
                assert_eq!(d.retry_after(), Duration::from_millis((used - 2) * 100));
            }
            other => panic!("{used} used of 3: expected a denial, got {other:?}"),
        }
    });
}

/// `charge` racing a quota change of a direct cell (3 → 6 burst, `T` halved), no debt. 2 of 3
/// used, 1 charged: charge first fills 3 of 3, then 6 of 6 (0 left); the change first leaves 4
/// of 6, and one new unit more 5 of 6 (1 left). Nothing else.
#[test]
fn charge_races_a_quota_change() {
    explore("charge_races_a_quota_change", 2, || {
        let clock = clock();
        let lim = loom::sync::Arc::new(
            RateLimiter::builder(quota("10/s;burst=3"))
                .clock(clock.clone())
                .build(),
        );
        assert!(lim.check_n(2).expect("2 fits a burst of 3").is_permitted());
        let l = lim.clone();
        let change = thread::spawn(move || l.set_quota(quota("20/s;burst=6")));
        assert!(lim.charge(1).is_paid());
        change.join().unwrap();
        let left = drain(|| lim.check(), 8);
        assert!(left <= 1, "{left} left");
    });
}

/// `charge_key` racing the split that moves the key. `A` has used 1 of 3 and is charged 1
/// more: whatever the order, it has exactly 1 left — a charge lost would leave 2, one applied
/// to the dead copy too would leave 0 or make the move carry a stale TAT.
#[test]
fn charge_key_races_a_split() {
    explore("charge_key_races_a_split", 2, || {
        let clock = clock();
        let lim = loom::sync::Arc::new(keyed_at_the_split("10/s;burst=3", &clock));
        let d = key(7);
        let l = lim.clone();
        let insert = thread::spawn(move || l.check_key(&d).is_permitted());
        assert!(lim.charge_key(&A, 1).is_paid());
        assert!(insert.join().unwrap());
        assert_eq!(drain(|| lim.check_key(&A), 8), 1, "A after a charge of 1");
    });
}

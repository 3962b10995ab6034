//! The lease table and the spending of cells, without Redis (the script's side is in
//! `tests/redis_lease.rs`).

use super::*;

impl Leases {
    /// A check of a quota slow enough that hotness is `2·max_cells` checks.
    fn spend_w(&self, key: &[u8], t: u64) -> Spend {
        self.spend(key, t, self.horizon)
    }
}

fn lease(now: u64, tat0: u64, cells: u64) -> Lease {
    // w = 1 ms, τ = 200 ms, client clock.
    Lease::new(now, tat0, cells, 1000, 200_000, now, now)
}

#[test]
fn cells_are_spent_on_schedule_never_early() {
    let l = Leases::new(2, 1_000_000);
    // Bucket full at now = 0: every cell conforms at once.
    let (first, _) = l.grant(b"k", lease(0, 0, 2), 0);
    assert!(matches!(first, Spend::Allow { .. }));
    assert!(matches!(l.spend_w(b"k", 0), Spend::Allow { .. }));
    assert!(matches!(l.spend_w(b"k", 0), Spend::Call { lapsed: 0, .. }));
    // TAT 300 ms ahead of now = 0: cell 0 conforms at 101 ms, cell 1 at 102 ms.
    let (first, _) = l.grant(b"k", lease(0, 300_000, 2), 0);
    assert_eq!(
        first,
        Spend::Deny {
            retry: 101_000,
            lapsed: 0
        }
    );
    assert_eq!(
        l.spend_w(b"k", 100_999),
        Spend::Deny {
            retry: 1,
            lapsed: 0
        }
    );
    assert!(matches!(l.spend_w(b"k", 101_000), Spend::Allow { .. }));
    assert_eq!(
        l.spend_w(b"k", 101_500),
        Spend::Deny {
            retry: 500,
            lapsed: 0
        }
    );
}

#[test]
fn a_cell_lapses_after_its_tat() {
    let l = Leases::new(3, 1_000_000);
    let (first, _) = l.grant(b"k", lease(0, 0, 3), 0);
    assert!(matches!(first, Spend::Allow { .. }));
    // θ_1 = 2 ms, θ_2 = 3 ms: at 2.5 ms cell 1 has lapsed, cell 2 is spent.
    assert_eq!(
        l.spend_w(b"k", 2_500),
        Spend::Allow {
            ahead: 1000,
            lapsed: 1
        }
    );
}

#[test]
fn concurrent_leases_queue_in_the_order_of_their_cells() {
    let l = Leases::new(2, 1_000_000);
    // Two calls raced: the one with the later cells (from TAT 2 ms) answered first.
    let (later, _) = l.grant(b"k", lease(0, 2_000, 2), 0);
    let (earlier, _) = l.grant(b"k", lease(0, 0, 2), 0);
    assert!(matches!(
        (later, earlier),
        (Spend::Allow { .. }, Spend::Allow { .. })
    ));
    // Left: cell 1 of each, θ 2 ms then 4 ms.
    assert_eq!(
        l.spend_w(b"k", 0),
        Spend::Allow {
            ahead: 2_000,
            lapsed: 0
        }
    );
    assert_eq!(
        l.spend_w(b"k", 0),
        Spend::Allow {
            ahead: 4_000,
            lapsed: 0
        }
    );
    assert!(matches!(l.spend_w(b"k", 0), Spend::Call { lapsed: 0, .. }));
}

#[test]
fn a_quota_change_ends_leases() {
    let l = Leases::new(3, 1_000_000);
    l.grant(b"k", lease(0, 0, 3), 0);
    l.end_all();
    assert!(matches!(l.spend_w(b"k", 0), Spend::Call { lapsed: 2, .. }));
}

#[test]
fn hotness_takes_two_leases_worth_of_checks_in_one_horizon() {
    let l = Leases::new(5, 1_000_000);
    for i in 0..9 {
        assert_eq!(
            l.spend_w(b"k", i),
            Spend::Call {
                hot: false,
                lapsed: 0
            }
        );
    }
    assert_eq!(
        l.spend_w(b"k", 9),
        Spend::Call {
            hot: true,
            lapsed: 0
        }
    );
    // Still hot in the next window; cold after a quiet one.
    assert_eq!(
        l.spend_w(b"k", 1_000_009),
        Spend::Call {
            hot: true,
            lapsed: 0
        }
    );
    assert_eq!(
        l.spend_w(b"k", 3_000_000),
        Spend::Call {
            hot: false,
            lapsed: 0
        }
    );
}

#[test]
fn hotness_needs_the_customers_rate_on_this_instance() {
    // w = 1 ms, horizon 1 s: 1000 checks in one second, not 2·max_cells = 10.
    let l = Leases::new(5, 1_000_000);
    for i in 0..999 {
        assert_eq!(
            l.spend(b"k", i, 1000),
            Spend::Call {
                hot: false,
                lapsed: 0
            }
        );
    }
    assert_eq!(
        l.spend(b"k", 999, 1000),
        Spend::Call {
            hot: true,
            lapsed: 0
        }
    );
}

#[test]
fn the_table_is_bounded_and_keeps_hot_keys() {
    let l = Leases::new(1, 1_000_000);
    l.spend_w(b"hot", 0);
    assert_eq!(
        l.spend_w(b"hot", 1),
        Spend::Call {
            hot: true,
            lapsed: 0
        }
    );
    l.settle(b"hot");
    for i in 0..100_000u64 {
        l.spend_w(&i.to_le_bytes(), 2);
    }
    let slots: usize = l
        .sets
        .iter()
        .map(|s| s.lock().iter().flatten().count())
        .sum();
    assert_eq!(slots, SETS * WAYS);
    assert_eq!(
        l.spend_w(b"hot", 3),
        Spend::Call {
            hot: true,
            lapsed: 0
        }
    );
}

#[test]
fn one_lease_call_per_customer_at_a_time() {
    let l = Leases::new(1, 1_000_000);
    l.spend_w(b"k", 0);
    assert!(matches!(l.spend_w(b"k", 1), Spend::Call { hot: true, .. }));
    // Sent, not answered: the next check makes a plain call.
    assert!(matches!(l.spend_w(b"k", 2), Spend::Call { hot: false, .. }));
    l.settle(b"k");
    assert!(matches!(l.spend_w(b"k", 3), Spend::Call { hot: true, .. }));
    // A call never settled stops counting after one horizon.
    assert!(matches!(
        l.spend_w(b"k", 1_000_002),
        Spend::Call { hot: false, .. }
    ));
    assert!(matches!(
        l.spend_w(b"k", 1_000_003),
        Spend::Call { hot: true, .. }
    ));
}

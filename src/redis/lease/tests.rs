//! The lease table and the spending of cells, without Redis (the script's side is in
//! `tests/redis_lease.rs`).

use super::*;

impl Leases {
    /// A check of a quota slow enough that hotness is `2·max_cells` checks.
    fn spend_w(&self, key: &[u8], t: u64) -> Spend {
        self.spend(key, t, self.horizon)
    }

    /// A lease call sent now that begins a run.
    fn ask(&self, sent: u64) -> Ask {
        Ask {
            cells: self.max_cells,
            after: None,
            generation: self.generation.load(Ordering::Relaxed),
            sent,
        }
    }
}

/// For a check that found no cell: whether it asks for a lease.
fn asks(s: Spend) -> Option<bool> {
    match s {
        Spend::Call { ask, .. } => Some(ask.is_some()),
        _ => None,
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
    let (first, _) = l.grant(b"k", lease(0, 0, 2), 0, &l.ask(0));
    assert!(matches!(first, Spend::Allow { .. }));
    assert!(matches!(l.spend_w(b"k", 0), Spend::Allow { .. }));
    assert!(matches!(l.spend_w(b"k", 0), Spend::Call { lapsed: 0, .. }));
    // TAT 300 ms ahead of now = 0: cell 0 conforms at 101 ms, cell 1 at 102 ms.
    let (first, _) = l.grant(b"k", lease(0, 300_000, 2), 0, &l.ask(0));
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
    let (first, _) = l.grant(b"k", lease(0, 0, 3), 0, &l.ask(0));
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
    let (later, _) = l.grant(b"k", lease(0, 2_000, 2), 0, &l.ask(0));
    let (earlier, _) = l.grant(b"k", lease(0, 0, 2), 0, &l.ask(0));
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
    l.grant(b"k", lease(0, 0, 3), 0, &l.ask(0));
    l.end_all();
    assert!(matches!(l.spend_w(b"k", 0), Spend::Call { lapsed: 2, .. }));
}

#[test]
fn hotness_takes_two_leases_worth_of_checks_in_one_horizon() {
    let l = Leases::new(5, 1_000_000);
    for i in 0..9 {
        assert_eq!(asks(l.spend_w(b"k", i)), Some(false));
    }
    assert_eq!(asks(l.spend_w(b"k", 9)), Some(true));
    // Still hot in the next window; cold after a quiet one.
    assert_eq!(asks(l.spend_w(b"k", 1_000_009)), Some(true));
    assert_eq!(asks(l.spend_w(b"k", 3_000_000)), Some(false));
}

#[test]
fn hotness_needs_the_customers_rate_on_this_instance() {
    // w = 1 ms, horizon 1 s: 1000 checks in one second, not 2·max_cells = 10.
    let l = Leases::new(5, 1_000_000);
    for i in 0..999 {
        assert_eq!(asks(l.spend(b"k", i, 1000)), Some(false));
    }
    assert_eq!(asks(l.spend(b"k", 999, 1000)), Some(true));
}

#[test]
fn the_table_is_bounded_and_keeps_hot_keys() {
    let l = Leases::new(1, 1_000_000);
    l.spend_w(b"hot", 0);
    assert_eq!(asks(l.spend_w(b"hot", 1)), Some(true));
    l.settle(b"hot", false);
    for i in 0..100_000u64 {
        l.spend_w(&i.to_le_bytes(), 2);
    }
    let slots: usize = l
        .sets
        .iter()
        .map(|s| s.lock().iter().flatten().count())
        .sum();
    assert_eq!(slots, SETS * WAYS);
    assert_eq!(asks(l.spend_w(b"hot", 3)), Some(true));
}

#[test]
fn one_lease_call_per_customer_at_a_time() {
    let l = Leases::new(1, 1_000_000);
    l.spend_w(b"k", 0);
    assert!(asks(l.spend_w(b"k", 1)) == Some(true));
    // Sent, not answered: the next check makes a plain call.
    assert!(asks(l.spend_w(b"k", 2)) == Some(false));
    l.settle(b"k", false);
    assert!(asks(l.spend_w(b"k", 3)) == Some(true));
    // A call never settled stops counting after one horizon.
    assert!(asks(l.spend_w(b"k", 1_000_002)) == Some(false));
    assert!(asks(l.spend_w(b"k", 1_000_003)) == Some(true));
}

/// Checks "k" until the next check makes it hot (2·max_cells in one horizon).
fn warm(l: &Leases) {
    for _ in 1..2 * l.max_cells {
        l.spend_w(b"k", 0);
    }
}

/// The ask of a check of "k" that found no cell.
fn ask_of(l: &Leases, t: u64) -> Option<Ask> {
    match l.spend_w(b"k", t) {
        Spend::Call { ask, .. } => ask,
        other => panic!("a call expected, got {other:?}"), // a test: a panic is its failure
    }
}

#[test]
fn a_run_goes_on_back_to_back_and_a_new_one_waits_a_horizon() {
    let l = Leases::new(1, 1_000_000);
    warm(&l);
    let first = ask_of(&l, 0).expect("hot: a lease call"); // a test: a panic is its failure
    assert_eq!(first.after, None, "a new run");
    // One cell, TAT 0 → 1 ms: the run's next lease must start from TAT 1 ms.
    l.grant(b"k", lease(0, 0, 1), 0, &first);
    l.settle(b"k", false);
    let next = ask_of(&l, 10).expect("the run goes on"); // a test: a panic is its failure
    assert_eq!(next.after, Some(1_000));
    // The script found a gap (or no room): a plain answer ends the run, and a new one waits
    // until one horizon after the last began.
    l.refused(b"k", &next);
    l.settle(b"k", false);
    assert_eq!(asks(l.spend_w(b"k", 999_999)), Some(false));
    let again = ask_of(&l, 1_000_000).expect("a horizon later"); // a test: a panic is its failure
    assert_eq!(again.after, None);
}

#[test]
fn a_lapse_ends_the_run() {
    let l = Leases::new(3, 1_000_000);
    warm(&l);
    let first = ask_of(&l, 0).expect("hot"); // a test: a panic is its failure
    l.grant(b"k", lease(0, 0, 3), 0, &first);
    l.settle(b"k", false);
    // At 5 ms cells 1 and 2 (TATs 2 and 3 ms) have lapsed: no lease before 1 s.
    assert!(matches!(
        l.spend_w(b"k", 5_000),
        Spend::Call {
            ask: None,
            lapsed: 2
        }
    ));
    assert!(ask_of(&l, 999_999).is_none());
    assert!(ask_of(&l, 1_000_000).is_some_and(|a| a.after.is_none()));
}

#[test]
fn a_grant_asked_under_an_old_quota_keeps_no_cell() {
    let l = Leases::new(3, 1_000_000);
    warm(&l);
    let asked = ask_of(&l, 0).expect("hot"); // a test: a panic is its failure
    l.end_all();
    // The check that asked gets its own cell, as a plain call sent before the change would.
    let (first, lapsed) = l.grant(b"k", lease(0, 0, 3), 0, &asked);
    assert!(matches!(first, Spend::Allow { .. }));
    assert_eq!(lapsed, 2);
    l.settle(b"k", false);
    assert!(matches!(l.spend_w(b"k", 0), Spend::Call { lapsed: 0, .. }));
}

#[test]
fn a_lease_call_without_a_reply_ends_the_run() {
    let l = Leases::new(1, 1_000_000);
    warm(&l);
    let first = ask_of(&l, 0).expect("hot"); // a test: a panic is its failure
    l.grant(b"k", lease(0, 0, 1), 0, &first);
    l.settle(b"k", false);
    assert!(ask_of(&l, 10).is_some_and(|a| a.after == Some(1_000)));
    // That call timed out: Redis may hold cells reserved for it. No lease before 1 s.
    l.settle(b"k", true);
    assert_eq!(asks(l.spend_w(b"k", 20)), Some(false));
    assert!(ask_of(&l, 1_000_000).is_some_and(|a| a.after.is_none()));
}

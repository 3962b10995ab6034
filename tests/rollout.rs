//! Staged rollout: incident 001 caught at 1 % and reverted by itself; a harmless change
//! promoted on schedule; manual control; stable cohorts.
#![cfg(feature = "config")]

use std::collections::HashSet;
use std::time::Duration;

use tollgate::limits::{Limits, Rollout, RolloutStage, RolloutState};
use tollgate::{Check, ManualClock};

const TICK: Duration = Duration::from_millis(100);
const KEYS: usize = 1_000;

fn doc(revision: u64, quota: &str, extra: &str) -> Limits {
    Limits::from_toml(&format!(
        "schema = 1\nrevision = {revision}\ntiers = [\"paid\"]\n\n[[policies]]\nname = \"paid\"\n\
         match = {{ tier = \"paid\" }}\nquota = \"{quota}\"\n{extra}"
    ))
    .expect("a valid test document")
}

fn key(i: usize) -> String {
    format!("customer-{i:04}")
}

/// What a simulation saw.
struct Run {
    ever_denied: HashSet<usize>,
    checks: u64,
}

/// 1,000 conforming keys, 2 requests/s each (key `i` sends on the ticks where
/// `(tick + i) % 5 == 0`), on 100 ms ticks, for `ticks` ticks or until `stop` says so.
fn simulate(
    rollout: &Rollout,
    clock: &ManualClock,
    ticks: u64,
    stop: impl Fn(&Rollout) -> bool,
) -> Run {
    let keys: Vec<String> = (0..KEYS).map(key).collect();
    let mut run = Run {
        ever_denied: HashSet::new(),
        checks: 0,
    };
    for tick in 0..ticks {
        for (i, k) in keys.iter().enumerate() {
            if (tick as usize + i) % 5 != 0 {
                continue;
            }
            let d = rollout
                .check("paid", "checkout", "/v1/checkout/pay", k, Check::cost(1))
                .expect("cost 1 fits");
            run.checks += 1;
            if !d.is_permitted() {
                run.ever_denied.insert(i);
            }
        }
        if stop(rollout) {
            break;
        }
        clock.advance(TICK);
    }
    run
}

/// Incident 001 (d): `10/s → 10/min` on paid traffic, acknowledged (so the guard lets it
/// through), rolled out to 1,000 conforming customers.
#[test]
fn incident_001_halts_at_one_percent_and_reverts() {
    let ack = "[[acknowledge]]\npolicy = \"paid\"\nfrom = \"10/s\"\nto = \"10/min\"\n";
    let clock = ManualClock::at(Duration::from_secs(3_600));
    let start = clock.now();
    let rollout = Rollout::new(doc(41, "10/s", ""), doc(42, "10/min", ack), clock.clone())
        .expect("acknowledged");
    // The default seed derives from revision 42: it puts 10 of these 1,000 keys in the 1 %
    // cohort, exactly the fewest a window needs to be compared (with 9 the halt would come
    // at the 10 % stage instead).
    let cohort = (0..KEYS).filter(|&i| rollout.is_in_cohort(&key(i))).count();
    assert_eq!(cohort, 10);

    let halted = |r: &Rollout| matches!(r.state(), RolloutState::Halted { .. });
    let run = simulate(&rollout, &clock, 11 * 60 * 10, halted);
    let RolloutState::Halted {
        reason,
        cohort_breadth,
        control_breadth,
        stage,
        basis_points,
        at,
        reverted,
    } = rollout.state()
    else {
        panic!("not halted: {:?}", rollout.state());
    };
    let to_halt = at - start;
    println!(
        "incident 001: {cohort} cohort keys at 1 %; halted after {to_halt:?} at stage {stage} \
         ({basis_points} bp): cohort breadth {:.1} %, control {:.1} %; {} of {KEYS} keys ever \
         denied ({:.1} %) over {} checks\n  reason: {reason}",
        cohort_breadth * 100.0,
        control_breadth * 100.0,
        run.ever_denied.len(),
        run.ever_denied.len() as f64 * 100.0 / KEYS as f64,
        run.checks,
    );
    assert_eq!((stage, basis_points), (0, 100), "halted at the 1 % stage");
    assert!(reverted, "an automatic halt reverts");
    assert!(
        to_halt <= Duration::from_secs(60) + TICK,
        "within one comparison window"
    );
    assert!(cohort_breadth > 0.9 && control_breadth == 0.0);
    assert!(
        run.ever_denied.len() * 50 < KEYS,
        "fewer than 2 % of keys ever denied"
    );
    assert!(run
        .ever_denied
        .iter()
        .all(|&i| rollout.bucket(&key(i)) < 100));

    // Every key is back on the old document, and stays there.
    assert_eq!(rollout.basis_points(), 0);
    let after = simulate(&rollout, &clock, 20 * 10, |_| false);
    assert!(after.ever_denied.is_empty());
    assert!((0..KEYS).all(|i| !rollout.is_in_cohort(&key(i))));
    assert!(!rollout.promote(), "a reverted rollout does not resume");
    let events = rollout.events();
    assert!(matches!(events[0], RolloutState::Staged { stage: 0, .. }));
    assert_eq!(events.len(), 2);
}

/// A loosening (`10/s → 20/s`) promotes 1 % → 10 % → 100 % on schedule.
#[test]
fn harmless_change_promotes_on_schedule() {
    let clock = ManualClock::new();
    let start = clock.now();
    let rollout = Rollout::new(doc(1, "10/s", ""), doc(2, "20/s", ""), clock.clone()).unwrap();
    assert_eq!(rollout.stages(), Rollout::DEFAULT_STAGES);
    let complete = |r: &Rollout| matches!(r.state(), RolloutState::Complete { .. });
    let run = simulate(&rollout, &clock, 11 * 60 * 10, complete);
    assert!(run.ever_denied.is_empty());

    let since: Vec<(u32, Duration)> = rollout
        .events()
        .iter()
        .map(|s| match s {
            RolloutState::Staged {
                basis_points,
                since,
                ..
            } => (*basis_points, *since - start),
            RolloutState::Complete { since } => (10_000, *since - start),
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    println!("harmless change: {since:?}");
    assert_eq!(
        since,
        [
            (100, Duration::ZERO),
            (1_000, Duration::from_secs(300)),
            (10_000, Duration::from_secs(600)),
        ]
    );
    let w = rollout.last_window().expect("windows closed");
    assert_eq!((w.cohort_breadth, w.control_breadth), (0.0, 0.0));
    assert!(w.cohort_keys >= 10);
    assert!((0..KEYS).all(|i| rollout.is_in_cohort(&key(i))));

    // Serving on from a handle keeps the new document's limiters: a key exhausted during
    // the rollout is still exhausted.
    let hot = key(3);
    while rollout
        .check("paid", "checkout", "/v1/checkout/pay", &hot, Check::cost(1))
        .unwrap()
        .is_permitted()
    {}
    let handle = rollout.to_handle().expect("complete");
    assert_eq!(handle.revision(), 2);
    let d = handle
        .check("paid", "checkout", "/v1/checkout/pay", &hot, Check::cost(1))
        .unwrap();
    assert!(!d.is_permitted());
}

#[test]
fn manual_promote_halt_and_revert() {
    let clock = ManualClock::new();
    let rollout = Rollout::builder(doc(1, "10/s", ""), doc(2, "20/s", ""))
        .clock(clock.clone())
        .stages([
            RolloutStage::new(100, Duration::from_secs(60)),
            RolloutStage::new(2_500, Duration::from_secs(60)),
        ])
        .build()
        .unwrap();
    assert!(rollout.promote());
    assert_eq!(rollout.basis_points(), 2_500);

    assert!(rollout.halt("waiting for the dashboard"));
    assert!(!rollout.halt("twice"));
    clock.advance(Duration::from_secs(3_600));
    rollout.tick();
    match rollout.state() {
        RolloutState::Halted {
            reason,
            stage,
            reverted,
            ..
        } => assert_eq!(
            (reason.as_str(), stage, reverted),
            ("waiting for the dashboard", 1, false)
        ),
        other => panic!("expected a hold, got {other:?}"),
    }
    assert_eq!(rollout.basis_points(), 2_500, "a hold keeps the cohort");

    assert!(rollout.promote(), "a hold resumes");
    assert!(matches!(rollout.state(), RolloutState::Complete { .. }));
    assert_eq!(rollout.basis_points(), 10_000);

    assert!(rollout.revert());
    assert!(!rollout.revert());
    assert_eq!(rollout.basis_points(), 0);
    assert!(matches!(
        rollout.state(),
        RolloutState::Halted {
            reverted: true,
            stage: 2,
            ..
        }
    ));
    let d = rollout
        .check("paid", "search", "/v1/search", "anyone", Check::cost(1))
        .unwrap();
    assert_eq!(d.revision(), 1);
}

#[test]
fn unacknowledged_tightening_cannot_be_rolled_out() {
    let errs =
        Rollout::new(doc(1, "10/s", ""), doc(2, "10/min", ""), ManualClock::new()).unwrap_err();
    assert_eq!(
        errs[0].kind(),
        tollgate::limits::ConfigErrorKind::UnacknowledgedTightening
    );
}

#[test]
fn cohorts_are_stable_and_close_to_the_stage_share() {
    let build = |seed| {
        Rollout::builder(doc(1, "10/s", ""), doc(2, "20/s", ""))
            .clock(ManualClock::new())
            .seed(seed)
            .build()
            .unwrap()
    };
    let (a, b, other) = (build(0x5eed), build(0x5eed), build(0x5eee));
    let keys: Vec<String> = (0..100_000).map(|i| format!("acct_{i}")).collect();
    assert!(keys.iter().all(|k| a.bucket(k) == b.bucket(k)));
    assert!(keys.iter().any(|k| a.bucket(k) != other.bucket(k)));
    // Pinned: the hash is fixed, so these buckets hold in every process and release.
    assert_eq!(
        [a.bucket("customer-42"), a.bucket("acct_7"), a.bucket("")],
        [BUCKET_42, BUCKET_7, BUCKET_EMPTY]
    );

    for (bp, tolerance) in [(100u16, 150usize), (1_000, 500), (5_000, 800)] {
        let n = keys.iter().filter(|k| a.bucket(k) < bp).count();
        let expected = keys.len() * usize::from(bp) / 10_000;
        println!("{bp} bp: {n} of {} keys (expected {expected})", keys.len());
        assert!(n.abs_diff(expected) < tolerance, "{n} vs {expected}");
    }
    // A later stage's cohort contains the earlier one's: the bucket does not move.
    assert_eq!(a.basis_points(), 100);
    let in_first: Vec<&String> = keys.iter().filter(|k| a.is_in_cohort(k)).collect();
    a.promote();
    assert!(in_first.iter().all(|k| a.is_in_cohort(k)));
}

/// Buckets under seed 0x5eed (SipHash-1-3, checked against the reference vectors in
/// `src/limits/rollout/cohort.rs`).
const BUCKET_42: u16 = 4_211;
const BUCKET_7: u16 = 5_006;
const BUCKET_EMPTY: u16 = 5_508;

#[test]
fn a_key_joining_the_cohort_keeps_its_place_in_time() {
    // The same quota in both documents: any burst after a move would be a free one.
    let old = doc(1, "10/s", "");
    let new = doc(2, "10/s", "");
    let clock = ManualClock::new();
    let rollout = Rollout::new(old, new, clock.clone()).expect("a harmless change");
    // A key outside the 1 % cohort that joins it at 10 %.
    let mover = (0..100_000)
        .map(key)
        .find(|k| (100..1_000).contains(&rollout.bucket(k)))
        .expect("some key lands in buckets 100..1000");
    let check = |k: &str| {
        rollout
            .check("paid", "checkout", "/", k, Check::cost(1))
            .expect("cost 1 fits")
    };
    let allowed = (0..20).filter(|_| check(&mover).is_permitted()).count();
    assert_eq!(allowed, 10, "the burst, on the old document");
    assert!(!rollout.is_in_cohort(&mover));
    assert!(rollout.promote());
    assert!(rollout.is_in_cohort(&mover), "10 % now");
    let d = check(&mover);
    assert_eq!(d.revision(), 2, "judged by the new document");
    assert!(!d.is_permitted(), "no fresh burst on joining the cohort");
    clock.advance(Duration::from_millis(100));
    assert!(
        check(&mover).is_permitted(),
        "one interval later, one request"
    );
    assert!(!check(&mover).is_permitted(), "and only one");
    // A revert resumes the old document's state: judged by it again.
    assert!(rollout.revert());
    assert_eq!(check(&mover).revision(), 1);
}

#[test]
fn a_joined_key_refills_at_the_new_documents_rate() {
    // A tighter burst in the new document: 10/s with burst 100, then burst 10.
    let ack =
        "[[acknowledge]]\npolicy = \"paid\"\nfrom = \"10/s;burst=100\"\nto = \"10/s;burst=10\"\n";
    let clock = ManualClock::new();
    let rollout = Rollout::new(
        doc(1, "10/s;burst=100", ""),
        doc(2, "10/s;burst=10", ack),
        clock.clone(),
    )
    .expect("acknowledged");
    let mover = (0..100_000)
        .map(key)
        .find(|k| (100..1_000).contains(&rollout.bucket(k)))
        .expect("some key lands in buckets 100..1000");
    let allowed = |n: usize| {
        (0..n)
            .filter(|_| {
                rollout
                    .check("paid", "checkout", "/", &mover, Check::cost(1))
                    .expect("cost 1 fits")
                    .is_permitted()
            })
            .count()
    };
    assert_eq!(allowed(120), 100, "the old document's whole burst");
    assert!(rollout.promote());
    assert_eq!(allowed(5), 0, "joins full: the new burst is used up too");
    // One second later a key of the new document has its 10 back, and so has this one: its
    // state was carried once, when it joined, and the new document's rate applies since.
    // (Carried again at every check, the old document's fuller cell — 90 of its 100 still
    // used — kept it at 9 of the new 10 used.)
    clock.advance(Duration::from_secs(1));
    assert_eq!(allowed(20), 10);
}

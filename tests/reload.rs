//! Hot reload: a check sees exactly one revision, state is kept across reloads (no lockout,
//! no free burst), and a rejected document leaves the old one serving.
#![cfg(feature = "config")]

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use tollgate::limits::{ConfigErrorKind, Limits, LimitsHandle};
use tollgate::safety::FaultDetector;
use tollgate::{Check, DenyReason, ManualClock, PassReason, Shadow, Verdict};

const ONE: Check = Check::cost(1);

/// Two policies: `flip` (whose quota the tests change) and `steady` (never changed), plus
/// whatever `extra` adds.
fn doc(revision: u64, flip: &str, extra: &str) -> Limits {
    Limits::from_toml(&format!(
        r#"schema = 1
revision = {revision}

[[policies]]
name = "flip"
match = {{ route = "/flip" }}
quota = "{flip}"

[[policies]]
name = "steady"
match = {{ route = "/steady" }}
quota = "10/s"
{extra}"#
    ))
    .expect("a valid test document")
}

/// The stress documents alternate by revision parity: odd revisions give `flip` 100/s
/// (T = 10 ms), even ones 50/s (T = 20 ms); both have τ = 1 s.
fn stress_doc(revision: u64) -> Limits {
    doc(
        revision,
        if revision % 2 == 1 { "100/s" } else { "50/s" },
        "",
    )
}

fn handle(limits: Limits, clock: &ManualClock) -> LimitsHandle {
    LimitsHandle::builder(limits)
        .clock(clock.clone())
        .max_keys(1_024)
        .build()
}

fn check(h: &LimitsHandle, route: &str, key: &str) -> tollgate::limits::Decision {
    h.check("free", "api", route, key, ONE)
        .expect("cost 1 fits every burst")
}

#[test]
fn handle_and_rollout_are_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<LimitsHandle>();
    assert_send_sync::<tollgate::limits::Rollout>();
}

/// 8 threads check while the document is swapped 1,000 times. On a frozen clock an exhausted
/// key's denial says `retry_after = T` exactly, so each verdict shows which quota judged it:
/// it must be the quota of the revision the decision reports.
#[test]
fn reload_under_load_each_check_sees_one_revision() {
    let clock = ManualClock::at(Duration::from_secs(1_000));
    let h = Arc::new(handle(stress_doc(1), &clock));
    // Exhaust "k" under 100/s: its TAT is now + τ exactly, where both quotas deny.
    let allowed = (0..200)
        .filter(|_| check(&h, "/flip", "k").is_permitted())
        .count();
    assert_eq!(allowed, 100);
    let steady = Arc::clone(&h.limiter("steady").unwrap());

    const RELOADS: u64 = 1_000;
    let stop = Arc::new(AtomicBool::new(false));
    let steady_allowed = Arc::new(AtomicU64::new(0));
    let start = Arc::new(Barrier::new(9));
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let (h, stop, steady_allowed, start) = (
                Arc::clone(&h),
                Arc::clone(&stop),
                Arc::clone(&steady_allowed),
                Arc::clone(&start),
            );
            std::thread::spawn(move || {
                let mut seen = BTreeSet::new();
                let mut checks = 0u64;
                start.wait();
                while !stop.load(Ordering::Relaxed) || checks < 1_000 {
                    let d = check(&h, "/flip", "k");
                    let expected = if d.revision() % 2 == 1 { 10 } else { 20 };
                    match d.verdict() {
                        Verdict::Deny(deny) => assert_eq!(
                            deny.retry_after(),
                            Duration::from_millis(expected),
                            "revision {} judged by the other quota",
                            d.revision()
                        ),
                        other => panic!("exhausted key got {other:?} at revision {}", d.revision()),
                    }
                    assert!((1..=RELOADS + 1).contains(&d.revision()));
                    seen.insert(d.revision());
                    if check(&h, "/steady", "s").is_permitted() {
                        steady_allowed.fetch_add(1, Ordering::Relaxed);
                    }
                    checks += 1;
                }
                (seen.len(), checks)
            })
        })
        .collect();
    start.wait();
    for revision in 2..=RELOADS + 1 {
        let diff = h
            .reload(stress_doc(revision))
            .expect("a 2× change is within the guard");
        assert_eq!(diff.changed().len(), 1);
    }
    stop.store(true, Ordering::Relaxed);
    let mut revisions_seen = 0;
    let mut checks = 0;
    for t in threads {
        let (seen, n) = t.join().expect("no checker panicked");
        revisions_seen += seen;
        checks += n;
    }
    assert_eq!(h.revision(), RELOADS + 1);
    // The unchanged policy kept its limiter and the exact GCRA bound: one burst in total.
    assert!(Arc::ptr_eq(&steady, &h.limiter("steady").unwrap()));
    assert_eq!(steady_allowed.load(Ordering::Relaxed), 10);
    println!(
        "{checks} checks over {RELOADS} reloads; {revisions_seen} (thread, revision) pairs seen"
    );
    assert!(revisions_seen > 8, "the checks should overlap the reloads");
}

#[test]
fn changed_policy_keeps_its_tat_no_free_burst_no_lockout() {
    let clock = ManualClock::at(Duration::from_secs(5));
    let h = handle(doc(1, "100/s", ""), &clock);
    let flip = h.limiter("flip").unwrap();
    assert_eq!(
        (0..150)
            .filter(|_| check(&h, "/flip", "k").is_permitted())
            .count(),
        100
    );

    h.reload(doc(2, "50/s", "")).unwrap();
    assert!(
        Arc::ptr_eq(&flip, &h.limiter("flip").unwrap()),
        "a changed policy keeps its limiter"
    );
    let d = check(&h, "/flip", "k");
    assert_eq!(d.revision(), 2);
    assert_eq!(
        d.verdict().denied().unwrap().retry_after(),
        Duration::from_millis(20)
    );

    h.reload(doc(3, "100/s", "")).unwrap();
    let d = check(&h, "/flip", "k");
    assert_eq!(
        d.verdict().denied().unwrap().retry_after(),
        Duration::from_millis(10)
    );

    // Time carries over: 10 ms later exactly one more request, never a fresh bucket.
    clock.advance(Duration::from_millis(10));
    assert_eq!(
        (0..50)
            .filter(|_| check(&h, "/flip", "k").is_permitted())
            .count(),
        1
    );
    // And no lockout: a key idle for τ has its whole burst under the new quota.
    h.reload(doc(4, "50/s", "")).unwrap();
    clock.advance(Duration::from_secs(1));
    assert_eq!(
        (0..80)
            .filter(|_| check(&h, "/flip", "k").is_permitted())
            .count(),
        50
    );
}

#[test]
fn rejected_documents_leave_the_old_one_serving() {
    let clock = ManualClock::new();
    let h = handle(doc(7, "100/s", ""), &clock);

    let tighter = doc(8, "100/min", ""); // 60× tighter, not acknowledged
    let errs = h.reload(tighter).unwrap_err();
    assert_eq!(errs[0].kind(), ConfigErrorKind::UnacknowledgedTightening);
    let stale = doc(7, "50/s", ""); // changed, same revision
    let errs = h.reload(stale).unwrap_err();
    assert_eq!(errs[0].kind(), ConfigErrorKind::StaleRevision);
    let older = doc(3, "200/s", "");
    assert_eq!(
        h.reload(older).unwrap_err()[0].kind(),
        ConfigErrorKind::StaleRevision
    );

    assert_eq!(h.revision(), 7);
    assert_eq!(
        h.limits().policy("flip").unwrap().quota(),
        "100/s".parse().unwrap()
    );
    let allowed = (0..150)
        .filter(|_| check(&h, "/flip", "k").is_permitted())
        .count();
    assert_eq!(allowed, 100, "still judged by revision 7's 100/s");

    let ack = "[[acknowledge]]\npolicy = \"flip\"\nfrom = \"100/s\"\nto = \"100/min\"\n";
    let diff = h.reload(doc(8, "100/min", ack)).expect("acknowledged");
    assert_eq!(diff.revisions(), (7, 8));
    assert_eq!(h.revision(), 8);
}

#[test]
fn shadow_policies_pass_through_and_unmatched_requests_are_unlimited() {
    let clock = ManualClock::new();
    let shadow = "[[policies]]\nname = \"trial\"\nmatch = { route = \"/trial\" }\nquota = \"1/s\"\nshadow = true\n";
    let h = handle(doc(1, "10/s", shadow), &clock);
    let first = check(&h, "/trial", "k");
    let second = check(&h, "/trial", "k");
    let pass = |v: Verdict| match v {
        Verdict::PassThrough(p) => (p.reason(), p.shadow()),
        other => panic!("a shadow policy gave {other:?}"),
    };
    assert_eq!(pass(first.verdict()), (PassReason::Shadow, Shadow::Allow));
    assert_eq!(pass(second.verdict()), (PassReason::Shadow, Shadow::Deny));
    assert!(second.is_permitted());
    assert_eq!(second.policy(), Some("trial"));

    let none = check(&h, "/elsewhere", "k");
    assert_eq!(none.policy(), None);
    assert_eq!(none.verdict().allowed().unwrap().remaining(), u64::MAX);
    assert_eq!(none.revision(), 1);
}

#[test]
fn added_policies_start_fresh_and_removed_ones_are_dropped() {
    let clock = ManualClock::new();
    let extra = "[[policies]]\nname = \"extra\"\nmatch = { route = \"/extra\" }\nquota = \"2/s\"\n";
    let h = handle(doc(1, "10/s", extra), &clock);
    assert_eq!(
        (0..5)
            .filter(|_| check(&h, "/extra", "k").is_permitted())
            .count(),
        2
    );

    let diff = h.reload(doc(2, "10/s", "")).unwrap();
    assert_eq!(diff.removed()[0].name(), "extra");
    assert!(h.limiter("extra").is_none());
    assert_eq!(check(&h, "/extra", "k").policy(), None);

    h.reload(doc(3, "10/s", extra)).unwrap();
    assert_eq!(
        (0..5)
            .filter(|_| check(&h, "/extra", "k").is_permitted())
            .count(),
        2
    );
}

#[test]
fn detector_follows_revisions_and_pins_the_baseline_to_known_good() {
    let clock = ManualClock::new();
    let detector = FaultDetector::builder().clock(clock.clone()).build();
    let h = LimitsHandle::builder(doc(1, "10/s", ""))
        .clock(clock.clone())
        .max_keys(64)
        .detector(detector.clone())
        .known_good_after(Duration::from_secs(600))
        .build();
    assert_eq!(detector.state().revision, 1);
    assert_eq!(
        detector.baseline().revision(),
        1,
        "nothing learned yet: the first is known-good"
    );

    let _ = check(&h, "/flip", "k");
    assert_eq!(detector.stats().allowed, 1);
    h.reload(doc(2, "20/s", "")).unwrap();
    assert_eq!(detector.state().revision, 2);
    assert_eq!(
        detector.baseline().revision(),
        1,
        "pinned until revision 2 proves itself"
    );

    clock.advance(Duration::from_secs(599));
    h.tick();
    assert_eq!(detector.baseline().revision(), 1);
    clock.advance(Duration::from_secs(1));
    let _ = check(&h, "/flip", "k");
    assert_eq!(detector.baseline().revision(), 2);

    h.reload(doc(3, "30/s", "")).unwrap();
    h.mark_known_good();
    assert_eq!(detector.baseline().revision(), 3);
}

// ---- incident 003: classes and retry budgets from the document -------------------------

fn link_doc(revision: u64, quota: &str, extra: &str) -> Limits {
    Limits::from_toml(&format!(
        "schema = 1\nrevision = {revision}\n[[policies]]\nname = \"link\"\n\
         match = {{ route = \"/link\" }}\nquota = \"{quota}\"\n{extra}\n"
    ))
    .expect("a valid test document")
}

fn link_check(h: &LimitsHandle, key: &str, check: Check) -> Verdict {
    h.check("free", "api", "/link", key, check)
        .expect("the cost fits")
        .verdict()
}

#[test]
fn policies_get_their_classes_and_retry_budget_and_changing_them_rebuilds() {
    let clock = ManualClock::new();
    let classes = "classes = [{ class = 2, reserve = 0.5 }]";
    let no_retries = "retry_budget = { ratio = 0.0, floor = \"0/s\" }";
    let h = handle(
        link_doc(1, "10/s", &format!("{classes}\n{no_retries}")),
        &clock,
    );
    let lim = h.limiter("link").unwrap();
    assert_eq!(lim.priorities().unwrap().reserve(2), 0.5);
    assert_eq!(lim.retry_budget().unwrap().floor(), 0);

    // Classes: background traffic stops at half the burst, critical traffic finds the rest.
    assert!(link_check(&h, "a", Check::cost(5).class(2)).is_permitted());
    assert!(!link_check(&h, "a", Check::cost(1).class(2)).is_permitted());
    assert!(link_check(&h, "a", Check::cost(5).class(0)).is_permitted());
    let err = h
        .check("free", "api", "/link", "b", Check::cost(6).class(2))
        .unwrap_err();
    assert_eq!(err.capacity(), 5);
    // Retry budget: no ratio and no floor, so every retry is over it.
    let v = link_check(&h, "b", Check::cost(1).attempt(1));
    assert_eq!(
        v.denied().map(|d| d.reason()),
        Some(DenyReason::RetryBudget)
    );

    // A quota-only change keeps the limiter and the keys' state.
    h.reload(link_doc(
        2,
        "10/s;burst=12",
        &format!("{classes}\n{no_retries}"),
    ))
    .unwrap();
    let kept = h.limiter("link").unwrap();
    assert!(Arc::ptr_eq(&lim, &kept));
    assert_eq!(kept.priorities(), lim.priorities());
    // "a" used all 10 of the old burst of 10: it has used all of the new 12 too (the fill
    // level is kept), so nothing more now and one request after one interval.
    assert!(!link_check(&h, "a", Check::cost(1).class(0)).is_permitted());

    // Changed classes: a new limiter with the new classes (state starts fresh, as documented).
    let diff = h
        .reload(link_doc(
            3,
            "10/s;burst=12",
            &format!("classes = [{{ class = 2, reserve = 0.75 }}]\n{no_retries}"),
        ))
        .unwrap();
    assert_eq!(
        diff.changed()[0].classes.as_ref().unwrap().to,
        "0 (reserve 0), 2 (reserve 0.75)"
    );
    let rebuilt = h.limiter("link").unwrap();
    assert!(!Arc::ptr_eq(&kept, &rebuilt));
    assert_eq!(rebuilt.priorities().unwrap().reserve(2), 0.75);
    assert_eq!(rebuilt.retry_budget(), kept.retry_budget());
    assert!(link_check(&h, "a", Check::cost(3).class(2)).is_permitted());
    assert!(!link_check(&h, "a", Check::cost(1).class(2)).is_permitted());

    // A changed retry budget rebuilds too; removing it lets retries through on quota alone.
    let diff = h.reload(link_doc(4, "10/s;burst=12", "")).unwrap();
    let change = &diff.changed()[0];
    assert_eq!(change.retry_budget.as_ref().unwrap().to, "none");
    assert_eq!(change.classes.as_ref().unwrap().to, "none");
    let plain = h.limiter("link").unwrap();
    assert!(!Arc::ptr_eq(&rebuilt, &plain));
    assert!(plain.priorities().is_none() && plain.retry_budget().is_none());
    assert!(link_check(&h, "b", Check::cost(1).attempt(1)).is_permitted());

    // And adding one back applies it at once.
    h.reload(link_doc(5, "10/s;burst=12", no_retries)).unwrap();
    let v = link_check(&h, "b", Check::cost(1).attempt(2));
    assert_eq!(
        v.denied().map(|d| d.reason()),
        Some(DenyReason::RetryBudget)
    );
}

#[test]
fn byte_budget_policy_with_classes_keeps_heartbeats_flowing() {
    let clock = ManualClock::new();
    let h = handle(
        Limits::from_path(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/examples/limits/shared-link.toml"
        ))
        .unwrap(),
        &clock,
    );
    let route = "/replicate/node-7";
    let chunk = Check::cost(64 << 10).class(2);
    let beat = Check::cost(512).class(0);
    let (mut beats, mut bytes) = (0, 0u64);
    for _ms in 0..1_000 {
        while h
            .check("free", "writes", route, "node-7", chunk)
            .unwrap()
            .is_permitted()
        {
            bytes += 64 << 10;
        }
        beats += u32::from(
            h.check("free", "writes", route, "node-7", beat)
                .unwrap()
                .is_permitted(),
        );
        clock.advance(Duration::from_millis(1));
    }
    assert_eq!(beats, 1_000, "heartbeats always find the reserve");
    // 2 Gbit/s (250,000 bytes/ms) over the 999 ms between the first and the last check, plus
    // half the 64 MiB burst, less the heartbeats' bytes, to within a chunk.
    let expected = 999 * 250_000u64 + (32 << 20) - 512_000;
    assert!(
        bytes.abs_diff(expected) <= 64 << 10,
        "{bytes} vs {expected}"
    );
}

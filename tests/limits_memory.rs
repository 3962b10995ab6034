//! What a limits document costs in memory, measured by a counting global
//! allocator: bytes live after [`LimitsHandle::new`] per policy, and the peak while a
//! document past [`Limits::MAX_POLICIES`] is refused.
//!
//! The allocator counts every thread's allocations, so the tests of this file run one at a
//! time (`ALONE`) and measure only what they do between two readings.
#![cfg(feature = "config")]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use tollgate::limits::{ConfigErrorKind, Format, Limits, LimitsHandle, Rollout};
use tollgate::{Check, ManualClock};

/// The system allocator, counting the bytes live and their peak.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is passed on to the system allocator unchanged; the counters are only
// read by the tests. (The library forbids unsafe code; a global allocator needs it.)
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let live = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(live, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// One measurement at a time.
fn alone() -> MutexGuard<'static, ()> {
    static ALONE: Mutex<()> = Mutex::new(());
    ALONE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The bytes live now.
fn live() -> usize {
    LIVE.load(Ordering::Relaxed)
}

/// The bytes `f` allocates at its peak, above what was live when it started.
fn peak_of<T>(f: impl FnOnce() -> T) -> (usize, T) {
    let before = live();
    PEAK.store(before, Ordering::Relaxed);
    let out = f();
    (PEAK.load(Ordering::Relaxed) - before, out)
}

/// `n` policies as production documents write them: a matcher, a quota, priority classes
/// and a retry budget each.
fn document(n: usize) -> String {
    let mut text = String::from("schema = 1\nrevision = 1\ntiers = [\"free\", \"paid\"]\n");
    for i in 0..n {
        let tier = if i % 2 == 0 { "free" } else { "paid" };
        text.push_str(&format!(
            "\n[[policies]]\nname = \"policy-{i}\"\n\
             match = {{ tier = \"{tier}\", route = \"/v1/r{i}/*\" }}\nquota = \"100/s\"\n\
             classes = [{{ class = 0, reserve = 0.0 }}, {{ class = 2, reserve = 0.5 }}]\n\
             retry_budget = {{ ratio = 0.1, period = \"10s\", floor = \"10/s\" }}\n"
        ));
    }
    text
}

#[test]
fn a_handle_of_20_000_policies_costs_at_most_2_kib_a_policy() {
    const N: usize = 20_000;
    const BUDGET: usize = 2 << 10;
    let _alone = alone();
    let text = document(N);
    let before = live();
    let limits = Limits::from_toml(&text).expect("a valid document");
    let document_only = live() - before;
    let handle = LimitsHandle::new(limits);
    let total = live() - before;
    eprintln!(
        "{N} policies: the document {} B a policy, with its handle {} B a policy",
        document_only / N,
        total / N
    );
    assert!(
        total / N <= BUDGET,
        "{} B a policy after LimitsHandle::new, more than {BUDGET}",
        total / N
    );
    // A policy's first check builds its limiter; the others stay as they were.
    let (first_check, d) =
        peak_of(|| handle.check("free", "any", "/v1/r0/x", "alice", Check::cost(1)));
    let d = d.expect("within the burst");
    assert_eq!((d.policy(), d.is_permitted()), (Some("policy-0"), true));
    eprintln!("the first check of a policy: {first_check} B (its limiter and first key)");
    assert!(live() - before < total + (64 << 10));
    drop(handle);
}

#[test]
fn a_rollout_between_two_documents_of_20_000_policies_builds_no_limiter_up_front() {
    const N: usize = 20_000;
    const BUDGET: usize = 2 << 10;
    let _alone = alone();
    let text = document(N);
    let (old, new) = (Limits::from_toml(&text), Limits::from_toml(&text));
    let (old, new) = (old.expect("valid"), new.expect("valid"));
    let before = live();
    let rollout = Rollout::new(old, new, ManualClock::new()).expect("nothing tightens");
    let total = live() - before;
    eprintln!("a rollout of {N} policies: {} B a policy", total / N);
    // Both documents' policies, each within a handle's budget: the limiters a key may carry
    // its state between are built on their first check, not when the rollout starts.
    assert!(
        total / N <= 2 * BUDGET,
        "{} B a policy after Rollout::new, more than {}",
        total / N,
        2 * BUDGET
    );
    let d = rollout.check("free", "any", "/v1/r0/x", "alice", Check::cost(1));
    assert!(d.expect("within the burst").is_permitted());
    drop(rollout);
}

/// `n` policies that are empty tables (the smallest a policy can be written).
fn empty_policies(format: Format, n: usize) -> String {
    match format {
        Format::Toml => format!("schema = 1\nrevision = 1\n{}", "[[policies]]\n".repeat(n)),
        Format::Yaml => format!("schema: 1\nrevision: 1\npolicies:\n{}", "- {}\n".repeat(n)),
        _ => {
            let items = vec!["{}"; n].join(",");
            format!("{{\"schema\": 1, \"revision\": 1, \"policies\": [{items}]}}")
        }
    }
}

#[test]
fn refusing_three_times_the_cap_peaks_where_refusing_one_past_it_does() {
    let _alone = alone();
    for format in [Format::Toml, Format::Yaml, Format::Json] {
        let small = empty_policies(format, Limits::MAX_POLICIES + 1);
        let large = empty_policies(format, 3 * Limits::MAX_POLICIES);
        let refuse = |text: &str| {
            let (peak, parsed) = peak_of(|| Limits::parse(text, format).map(drop));
            let errors = parsed.expect_err("too many policies");
            assert_eq!(
                errors[0].kind(),
                ConfigErrorKind::TooManyPolicies,
                "{format}"
            );
            peak
        };
        let (a, b) = (refuse(&small), refuse(&large));
        eprintln!(
            "{format}: refusing {} B of 100,001 policies peaks at {a} B, {} B of 300,000 at {b} B",
            small.len(),
            large.len()
        );
        assert!(
            b <= a + a / 4 + (64 << 10),
            "{format}: {b} B for 300,000 policies against {a} B for 100,001: the parser does \
             not stop at the cap"
        );
    }
}

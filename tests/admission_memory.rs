//! What the admission filter costs in memory, measured by a counting global
//! allocator: nothing until the table first reaches its cap, then its budget and no more,
//! whatever the flood; nothing at all with `Admission::Off`.
//!
//! The allocator counts only the allocations of the thread that asked it to (`counted`): the
//! limiters here are used from the test's own thread, and the test harness's threads
//! allocate meanwhile.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use tollgate::limiter::Admission;
use tollgate::{KeyedRateLimiter, ManualClock};

/// The system allocator, counting the bytes live that this thread allocated while counting.
struct Counting;

std::thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static LIVE: Cell<isize> = const { Cell::new(0) };
}

fn tally(bytes: isize) {
    // `try_with`: a thread being torn down has no locals left; it is not measured.
    let _ = COUNTING.try_with(|on| {
        if on.get() {
            let _ = LIVE.try_with(|live| live.set(live.get() + bytes));
        }
    });
}

// SAFETY: every call is passed on to the system allocator unchanged; the counters are only
// read by the tests. (The library forbids unsafe code; a global allocator needs it.)
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            tally(layout.size() as isize);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) };
        tally(-(layout.size() as isize));
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Counts this thread's allocations from now on.
fn counted() {
    COUNTING.with(|on| on.set(true));
}

/// The bytes this thread allocated and has not freed since it called [`counted`].
fn live() -> usize {
    usize::try_from(LIVE.with(Cell::get)).expect("never more freed than allocated")
}

fn limiter(clock: &ManualClock, max_keys: usize, admission: Admission) -> KeyedRateLimiter<u64> {
    KeyedRateLimiter::<u64>::builder("1/s".parse().expect("a valid quota"))
        .clock(clock.clone())
        .max_keys(max_keys)
        .admission(admission)
        .build()
}

/// A limiter with 10 keys under the default cap, admission on: table, struct and everything
/// it allocated within 64 KiB, and no filter.
#[test]
fn a_table_that_never_fills_pays_nothing_for_the_filter() {
    counted();
    let clock = ManualClock::new();
    let before = live();
    let lim = limiter(
        &clock,
        tollgate::limiter::DEFAULT_MAX_KEYS,
        Admission::default(),
    );
    for k in 0..10u64 {
        assert!(lim.check_key(&k).is_permitted());
    }
    let total = live() - before + core::mem::size_of_val(&lim);
    assert!(total < 64 << 10, "10 keys: {total} bytes");
    assert_eq!(lim.filter_bytes(), 0);
}

/// The filter is allocated when a newcomer first meets the table at its cap, at its budget,
/// and a flood adds nothing to it.
#[test]
fn the_filter_is_allocated_at_the_cap_and_honours_its_budget() {
    counted();
    for (admission, budget) in [
        (Admission::default(), Admission::DEFAULT_FILTER_BYTES),
        (Admission::Filter { bytes: 100_000 }, 100_000),
        (Admission::Filter { bytes: 16 << 20 }, 16 << 20),
        (Admission::Filter { bytes: 1 }, 4 << 10),
    ] {
        let clock = ManualClock::new();
        let lim = limiter(&clock, 1_000, admission);
        for k in 0..1_000u64 {
            assert!(lim.check_key(&k).is_permitted());
        }
        assert_eq!(lim.len(), 1_000, "at the cap");
        let at_cap = live();
        assert_eq!(
            lim.filter_bytes(),
            0,
            "{admission:?}: no newcomer at the cap yet"
        );
        let _ = lim.check_key(&1_000);
        let filter = live() - at_cap;
        assert_eq!(filter, lim.filter_bytes(), "{admission:?}");
        assert!(filter <= budget, "{admission:?}: {filter} bytes");
        assert!(filter >= budget * 99 / 100, "{admission:?}: {filter} bytes");
        // A flood of one-off keys at the cap, time passing: the filter does not grow (the table
        // is at its largest; a few bytes may go to the spill map's own allocation).
        for k in 2_000..200_000u64 {
            let _ = lim.check_key(&k);
            if k % 10_000 == 0 {
                clock.advance(std::time::Duration::from_millis(300));
            }
        }
        let after = live() - at_cap;
        assert!(
            after - filter < 1 << 10,
            "{admission:?}: {after} bytes after the flood"
        );
        assert_eq!(lim.filter_bytes(), filter);
    }
}

/// `Admission::Off`: no filter, whatever arrives.
#[test]
fn without_admission_there_is_no_filter() {
    counted();
    let clock = ManualClock::new();
    let lim = limiter(&clock, 100, Admission::Off);
    for k in 0..100u64 {
        assert!(lim.check_key(&k).is_permitted());
    }
    let at_cap = live();
    for k in 100..10_000u64 {
        let _ = lim.check_key(&k);
    }
    assert_eq!((live() - at_cap, lim.filter_bytes()), (0, 0));
}

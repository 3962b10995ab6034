//! The CPU time the calling thread has used: how the near-linearity tests time their cases.

use std::time::Duration;

/// The CPU time this thread has used so far. The cases are timed in CPU time, not wall time:
/// time spent waiting for a core while other processes run (CI shares its 2 cores with the
/// build, other test binaries and, on a developer's machine, anything else) is not counted,
/// so a loaded machine cannot make a linear operation look quadratic.
#[cfg(unix)]
pub fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // The call only writes the struct it is given (the library itself forbids unsafe code;
    // this is a test). A failure is reported, never read as a time.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID) failed");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Elsewhere, wall time since the first call (more sensitive to a loaded machine).
#[cfg(not(unix))]
pub fn thread_cpu_time() -> Duration {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START.get_or_init(std::time::Instant::now).elapsed()
}

//! Warm-up for a fault detector on the default clock: it evaluates when its sub-bucket is due
//! on the real clock, which a bench cannot advance, so the bench keeps checking until it has.

use std::time::{Duration, Instant};

use tollgate::safety::FaultDetector;

/// Runs `pass` (one pass of checks over the keys) until `detector` has closed two sub-buckets
/// after the first pass — the first close brings its breadth panel down to size, the second
/// sees it there — or 60 s have passed.
pub fn settle(detector: &FaultDetector, mut pass: impl FnMut()) {
    pass();
    let start = Instant::now();
    let mut seen = detector.state().last.at;
    let mut closes = 0;
    while closes < 2 && start.elapsed() < Duration::from_secs(60) {
        pass();
        let at = detector.state().last.at;
        if at != seen {
            (seen, closes) = (at, closes + 1);
        }
    }
}

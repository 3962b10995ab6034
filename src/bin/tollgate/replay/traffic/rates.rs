//! Each key's request rate in the log, to choose a quota from: requests per minute over the
//! minutes a key was active (p50, p99, max over key-minutes) and the peak burst (the most
//! requests one key sent within one second).
//!
//! Memory: this minute's and this second's counts for at most [`MAX_RATE_KEYS`] keys (keys
//! past that in one window are not counted there, and the figures say "at least"), and a
//! histogram of counts.

use std::collections::BTreeMap;

use serde::Serialize;

use super::tally::HashMap64;

/// Keys counted per minute and per second.
pub(super) const MAX_RATE_KEYS: usize = 100_000;

/// Per-key rates, streaming.
#[derive(Debug, Default)]
pub(super) struct Rates {
    minute: Option<i64>,
    per_minute: HashMap64<u32>,
    /// Requests in a key-minute → how many key-minutes had that many.
    histogram: BTreeMap<u32, u64>,
    second: Option<i64>,
    per_second: HashMap64<u32>,
    peak: u32,
    peak_key: String,
    peak_at_ms: i64,
    capped: bool,
}

/// The figures.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub(super) struct RateFigures {
    /// Requests per minute of a key, over the minutes it was active.
    pub(super) p50_per_minute: u32,
    pub(super) p99_per_minute: u32,
    pub(super) max_per_minute: u32,
    /// The most requests one key sent within one second (a whole second of the clock).
    pub(super) peak_burst: u32,
    pub(super) peak_burst_key: String,
    pub(super) peak_burst_at_ms: i64,
    /// Some keys were past the per-window bound: the figures are lower bounds.
    pub(super) at_least: bool,
}

impl Rates {
    /// Counts one request of `key` (hash `hash`) at `t_ms`.
    pub(super) fn add(&mut self, t_ms: i64, hash: u64, key: &str) {
        let minute = t_ms.div_euclid(60_000);
        if self.minute != Some(minute) {
            self.close_minute();
            self.minute = Some(minute);
        }
        let second = t_ms.div_euclid(1_000);
        if self.second != Some(second) {
            self.per_second.clear();
            self.second = Some(second);
        }
        bump(&mut self.per_minute, hash, &mut self.capped);
        let n = bump(&mut self.per_second, hash, &mut self.capped);
        if n > self.peak {
            self.peak = n;
            key.clone_into(&mut self.peak_key);
            self.peak_at_ms = second * 1_000;
        }
    }

    fn close_minute(&mut self) {
        for n in self.per_minute.values() {
            *self.histogram.entry(*n).or_default() += 1;
        }
        self.per_minute.clear();
    }

    /// The figures so far (closes the minute in progress).
    pub(super) fn figures(&mut self) -> RateFigures {
        self.close_minute();
        let total: u64 = self.histogram.values().sum();
        let quantile = |q: f64| {
            // The smallest count with at least q of the key-minutes at or below it.
            let rank = ((total as f64 * q).ceil() as u64).max(1);
            let mut seen = 0;
            for (n, c) in &self.histogram {
                seen += c;
                if seen >= rank {
                    return *n;
                }
            }
            0
        };
        RateFigures {
            p50_per_minute: quantile(0.5),
            p99_per_minute: quantile(0.99),
            max_per_minute: self.histogram.keys().next_back().copied().unwrap_or(0),
            peak_burst: self.peak,
            peak_burst_key: self.peak_key.clone(),
            peak_burst_at_ms: self.peak_at_ms,
            at_least: self.capped,
        }
    }
}

/// Counts `hash` in `map` unless the map is full; returns its count (0 if not counted).
fn bump(map: &mut HashMap64<u32>, hash: u64, capped: &mut bool) -> u32 {
    let room = map.len() < MAX_RATE_KEYS;
    match map.get_mut(&hash) {
        Some(n) => {
            *n = n.saturating_add(1);
            *n
        }
        None if room => {
            map.insert(hash, 1);
            1
        }
        None => {
            *capped = true;
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_over_key_minutes_and_the_peak_second() {
        let mut r = Rates::default();
        // Key 1: 3 requests in minute 0 (two in one second), 1 in minute 1. Key 2: 1 in minute 0.
        for (t, h, k) in [
            (0, 1, "a"),
            (500, 1, "a"),
            (2_000, 1, "a"),
            (100, 2, "b"),
            (60_000, 1, "a"),
        ] {
            r.add(t, h, k);
        }
        let f = r.figures();
        // Key-minutes: 3, 1, 1.
        assert_eq!(
            (f.p50_per_minute, f.p99_per_minute, f.max_per_minute),
            (1, 3, 3)
        );
        assert_eq!(
            (f.peak_burst, f.peak_burst_key.as_str(), f.peak_burst_at_ms),
            (2, "a", 0)
        );
        assert!(!f.at_least);
    }
}

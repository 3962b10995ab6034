//! The admission filter's memory of fingerprints (TinyLFU's): a doorkeeper of two Bloom filter
//! generations in front of a count-min sketch of 4-bit counters.
//!
//! # What it remembers
//!
//! A *sighting* is one fingerprint recorded. The doorkeeper remembers every fingerprint
//! sighted in the last `period` sightings, and those of the `period` before with a probability
//! that falls from 1 to 0 across that older generation: each generation is a Bloom filter of
//! [`BITS_PER_KEY`] bits per sighting it holds, probed [`PROBES`] times, so a full generation
//! answers "seen" for a fingerprint it never held 0.82 % of the time. Every `period` sightings
//! the generations turn: the older one is cleared and takes the new sightings.
//!
//! A fingerprint the doorkeeper already holds counts once more in the count-min sketch (four
//! rows of 4-bit counters, raised conservatively: only the smallest of its four), which keeps
//! the frequency of recurring fingerprints past the doorkeeper's window; its counters are
//! halved whenever the generations turn. A fingerprint's estimate is 1 if the doorkeeper holds
//! it, plus its count: a fingerprint sighted once has an estimate of 1, twice 2.
//!
//! # Sizes
//!
//! From a budget of `b` bytes: the counters take `b / 16` and the two generations the rest,
//! `period` is a generation's bits divided by [`BITS_PER_KEY`]. At the default 1 MiB: 32,768
//! counters a row (64 KiB), two generations of 480 KiB, a period of 393,216 sightings: a
//! fingerprint is remembered for at least 393,216 sightings and at most 786,432.
//!
//! Only the insert lock's holder uses it: plain memory, no atomics.

use core::fmt;

/// Bits of a doorkeeper generation per sighting it holds.
const BITS_PER_KEY: u64 = 10;
/// Probes per fingerprint in the doorkeeper: the best count for 10 bits a key (0.82 %).
const PROBES: u64 = 7;
/// Rows of the count-min sketch.
const ROWS: usize = 4;
/// 4-bit counters per 64-bit word.
const PER_WORD: u64 = 16;
/// The largest count a counter holds.
const MAX_COUNT: u64 = 15;
/// The count-min sketch takes this fraction of the budget (1/16).
const COUNTS_SHARE: usize = 16;
/// The smallest budget a sketch is built with (smaller ones are raised to it).
pub(crate) const MIN_BYTES: usize = 4 << 10;
/// The largest budget a sketch is built with (larger ones are lowered to it): 1 GiB.
pub(crate) const MAX_BYTES: usize = 1 << 30;

/// A fingerprint's probes: two independent 64-bit hashes, from which every position is
/// derived (double hashing).
#[derive(Clone, Copy)]
struct Hashes(u64, u64);

impl Hashes {
    fn of(fp: u64) -> Self {
        // Fingerprints are seeded per limiter already (see `fingerprint`), but integer keys
        // map to them by a bijection that need not spread low bits, and under loom they are the
        // keys themselves: mix before taking positions.
        Self(mix(fp), mix(fp ^ 0x9e37_79b9_7f4a_7c15) | 1)
    }

    /// The `i`-th probe, reduced to `0..n`.
    fn probe(self, i: u64, n: u64) -> u64 {
        reduce(self.0.wrapping_add(i.wrapping_mul(self.1)), n)
    }
}

/// A doorkeeper in front of a count-min sketch; see the module's doc.
pub(crate) struct Sketch {
    /// Both doorkeeper generations, `words` each: generation `g` is
    /// `door[g * words .. (g + 1) * words]`.
    door: Box<[u64]>,
    words: usize,
    /// The generation that takes new sightings (0 or 1).
    current: usize,
    /// [`ROWS`] rows of `row_words` words of 16 counters each.
    counts: Box<[u64]>,
    row_words: usize,
    /// Sightings since the generations last turned.
    sightings: u64,
    /// Sightings per generation.
    period: u64,
}

impl fmt::Debug for Sketch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sketch")
            .field("bytes", &self.bytes())
            .field("period", &self.period)
            .field("sightings", &self.sightings)
            .finish_non_exhaustive()
    }
}

impl Sketch {
    /// A sketch of at most `bytes` bytes (raised to [`MIN_BYTES`], lowered to
    /// [`MAX_BYTES`]), or `None` if the allocator refuses it.
    pub(crate) fn new(bytes: usize) -> Option<Self> {
        let bytes = bytes.clamp(MIN_BYTES, MAX_BYTES);
        let row_words = bytes / COUNTS_SHARE / 8 / ROWS;
        let words = (bytes - ROWS * row_words * 8) / 16;
        Some(Self {
            door: zeroed(2 * words)?,
            words,
            current: 0,
            counts: zeroed(ROWS * row_words)?,
            row_words,
            sightings: 0,
            period: words as u64 * 64 / BITS_PER_KEY,
        })
    }

    /// Bytes it occupies: its two tables.
    pub(crate) fn bytes(&self) -> usize {
        (self.door.len() + self.counts.len()) * 8
    }

    /// Sightings per doorkeeper generation: every fingerprint is remembered for at least this
    /// many sightings after its last one.
    #[cfg(test)]
    pub(crate) fn period(&self) -> u64 {
        self.period
    }

    /// Records one sighting of `fp` and returns its estimate after it: 1 for a fingerprint not
    /// sighted in the doorkeeper's window, plus how often it was sighted again (at most 16).
    pub(crate) fn record(&mut self, fp: u64) -> u64 {
        let h = Hashes::of(fp);
        let in_current = self.holds(self.current, h);
        if in_current || self.holds(1 - self.current, h) {
            self.count_once_more(h);
        }
        if !in_current {
            self.insert(self.current, h);
        }
        let estimate = 1 + self.count(h);
        self.sightings += 1;
        if self.sightings >= self.period {
            self.turn();
        }
        estimate
    }

    /// The estimate of `fp` without recording a sighting: 0 if never sighted.
    #[cfg(test)]
    pub(crate) fn estimate(&self, fp: u64) -> u64 {
        let h = Hashes::of(fp);
        let held = self.holds(0, h) || self.holds(1, h);
        u64::from(held) + self.count(h)
    }

    fn generation(&self, g: usize) -> core::ops::Range<usize> {
        g * self.words..(g + 1) * self.words
    }

    fn holds(&self, g: usize, h: Hashes) -> bool {
        let bits = &self.door[self.generation(g)];
        let n = bits.len() as u64 * 64;
        (0..PROBES).all(|i| {
            let p = h.probe(i, n);
            bits[(p / 64) as usize] & (1 << (p % 64)) != 0
        })
    }

    fn insert(&mut self, g: usize, h: Hashes) {
        let range = self.generation(g);
        let bits = &mut self.door[range];
        let n = bits.len() as u64 * 64;
        for i in 0..PROBES {
            let p = h.probe(i, n);
            bits[(p / 64) as usize] |= 1 << (p % 64);
        }
    }

    /// Where `h`'s counter in row `r` is: its word and its shift in it.
    fn counter(&self, h: Hashes, r: usize) -> (usize, u64) {
        let per_row = self.row_words as u64 * PER_WORD;
        // Probes past the doorkeeper's: a family of its own per row.
        let c = h.probe(PROBES + r as u64, per_row);
        (
            r * self.row_words + (c / PER_WORD) as usize,
            (c % PER_WORD) * 4,
        )
    }

    fn count(&self, h: Hashes) -> u64 {
        (0..ROWS)
            .map(|r| {
                let (w, shift) = self.counter(h, r);
                (self.counts[w] >> shift) & MAX_COUNT
            })
            .min()
            .unwrap_or(0)
    }

    /// Conservative update: raises only the counters at the smallest count, so a fingerprint's
    /// count grows no faster than its sightings even where rows collide.
    fn count_once_more(&mut self, h: Hashes) {
        let least = self.count(h);
        if least == MAX_COUNT {
            return;
        }
        for r in 0..ROWS {
            let (w, shift) = self.counter(h, r);
            if (self.counts[w] >> shift) & MAX_COUNT == least {
                self.counts[w] += 1 << shift;
            }
        }
    }

    /// The generations turn: the older is cleared and takes the new sightings; every count is
    /// halved (TinyLFU's reset), so old frequencies fade.
    fn turn(&mut self) {
        self.sightings = 0;
        self.current = 1 - self.current;
        let range = self.generation(self.current);
        self.door[range].fill(0);
        for w in self.counts.iter_mut() {
            *w = (*w >> 1) & 0x7777_7777_7777_7777;
        }
    }
}

/// `n` zeroed words, or `None` if the allocator refuses them.
fn zeroed(n: usize) -> Option<Box<[u64]>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).ok()?;
    v.resize(n, 0);
    Some(v.into_boxed_slice())
}

/// SplitMix64's finaliser: a bijection that spreads every input bit over the output.
fn mix(x: u64) -> u64 {
    let x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    let x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// `x` scaled into `0..n` by its high bits (Lemire's reduction: no division).
fn reduce(x: u64, n: u64) -> u64 {
    ((u128::from(x) * u128::from(n)) >> 64) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fingerprints that look like a seeded hash's.
    fn fp(i: u64) -> u64 {
        mix(i.wrapping_add(0x1234_5678))
    }

    #[test]
    fn sizes_honour_the_budget() {
        for bytes in [0, MIN_BYTES, 100_000, 1 << 20, 3 << 20] {
            let s = Sketch::new(bytes).expect("small enough to allocate"); // a test: a panic is its failure
            assert!(s.bytes() <= bytes.max(MIN_BYTES), "{bytes}: {}", s.bytes());
            assert!(
                s.bytes() >= bytes.max(MIN_BYTES) * 99 / 100,
                "{bytes}: {s:?}"
            );
        }
        let s = Sketch::new(1 << 20).expect("1 MiB"); // a test: a panic is its failure
        assert_eq!((s.bytes(), s.period()), (1 << 20, 393_216));
    }

    #[test]
    fn a_second_sighting_is_counted() {
        let mut s = Sketch::new(1 << 20).expect("1 MiB"); // a test: a panic is its failure
        assert_eq!(s.estimate(fp(1)), 0);
        assert_eq!(s.record(fp(1)), 1);
        assert_eq!(s.record(fp(1)), 2);
        assert_eq!(s.record(fp(1)), 3);
        assert_eq!(s.estimate(fp(1)), 3);
        assert_eq!(s.record(fp(2)), 1, "another key starts at 1");
        for _ in 0..40 {
            s.record(fp(3));
        }
        assert_eq!(
            s.estimate(fp(3)),
            16,
            "1 from the doorkeeper, 15 at most counted"
        );
    }

    #[test]
    fn the_doorkeeper_remembers_a_whole_period_and_forgets_after_two() {
        let mut s = Sketch::new(MIN_BYTES).expect("4 KiB"); // a test: a panic is its failure
        let period = s.period();
        // Whenever in its generation a key is sighted, a period later it is remembered.
        for lead in [0, 1, period / 2, period - 1] {
            let mut s = Sketch::new(MIN_BYTES).expect("4 KiB"); // a test: a panic is its failure
            for i in 0..lead {
                s.record(fp(1_000_000 + i));
            }
            s.record(fp(7));
            for i in 0..period - 1 {
                s.record(fp(2_000_000 + i));
            }
            assert_eq!(
                s.estimate(fp(7)),
                1,
                "sighted {period} sightings ago (lead {lead})"
            );
        }
        s.record(fp(7));
        for i in 0..2 * period {
            s.record(fp(3_000_000 + i));
        }
        assert_eq!(s.estimate(fp(7)), 0, "two generations later: forgotten");
    }

    #[test]
    fn counts_are_halved_as_the_generations_turn() {
        let mut s = Sketch::new(MIN_BYTES).expect("4 KiB"); // a test: a panic is its failure
        for _ in 0..9 {
            s.record(fp(5));
        }
        assert_eq!(s.estimate(fp(5)), 9, "1 + 8 counted");
        for i in 0..s.period() {
            s.record(fp(10_000 + i));
        }
        // Turned once: 8 → 4, still held by the previous generation.
        assert_eq!(s.estimate(fp(5)), 5);
        for i in 0..s.period() {
            s.record(fp(20_000 + i));
        }
        assert_eq!(
            s.estimate(fp(5)),
            2,
            "turned twice: 4 → 2, out of the doorkeeper"
        );
    }

    #[test]
    fn one_off_keys_rarely_pass_for_recurring_ones() {
        // A flood of distinct keys, each sighted once, for five periods: the share estimated at
        // 2 or more on their only sighting is the doorkeeper's false-positive rate.
        let mut s = Sketch::new(1 << 20).expect("1 MiB"); // a test: a panic is its failure
        let n = 5 * s.period();
        let passed = (0..n).filter(|&i| s.record(fp(i)) >= 2).count() as f64;
        let rate = passed / n as f64;
        println!("one-off keys estimated ≥ 2: {:.3} %", 100.0 * rate);
        assert!(rate < 0.01, "{rate}");
    }
}

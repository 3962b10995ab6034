//! The key table's storage: slots in buckets, buckets in segments allocated as the table
//! grows, and the two buckets a key may live in.
//!
//! # Layout
//!
//! A [`Slot`] is two words, the key's fingerprint and its TAT (the table of values is in
//! `keyed.rs`); four slots make a [`Bucket`], one 64-byte cache line. Buckets live in
//! segments, allocated when the table first grows into them and kept until the limiter is
//! dropped, so a reference a lock-free reader holds never dangles — no reclamation scheme and
//! no `unsafe` needed to grow:
//!
//! | segment | buckets | bytes |
//! |---|---|---|
//! | 0 | 64 | 4 KiB |
//! | k = 1 … 8 | 64 · 2^k | 8 KiB … 1 MiB |
//! | 9 and later | 16 384 each | 1 MiB each |
//!
//! The directory of segments (40 bytes per segment) is sized for `max_keys` when the limiter
//! is built: 1.1 KiB at the default cap, 3.3 MiB at the largest. A new table occupies 4 KiB
//! of buckets; a grown one at most one segment (≤ 1 MiB) more than the buckets it uses.
//!
//! # Addressing: linear hashing, two choices
//!
//! The table uses `n = 2^L + s` buckets (`0 ≤ s < 2^L`). A 32-bit hash `h` names bucket
//! `h mod 2^L`, or `h mod 2^(L+1)` if that one is below the split pointer `s` (already split).
//! Growing by one bucket *splits* bucket `s`: the keys whose hash now names `s + 2^L` move
//! there (a bucket never used before), `s` advances, and when it reaches `2^L`, `L` does. The
//! table grows a bucket at a time as keys arrive, so its load stays at the split threshold
//! ([`KEYS_PER_BUCKET`] of 4 slots) at any number of keys: no doubling, no sawtooth.
//!
//! Every key has two candidate buckets, named by the low and the high 32 bits of its
//! fingerprint, and lives in one of them. Linear hashing leaves the buckets not yet split this
//! round with twice the keys of the others; the second choice, and moving a key to its other
//! bucket to make room (a cuckoo path of at most two moves, in `grow.rs`), absorb that.

use crate::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use core::fmt;
use std::sync::OnceLock;

use super::GROUP;
use crate::engine::cell::TOMBSTONE;
use crate::engine::params::Gate;
use crate::engine::tagged;

/// Slots per bucket: 4 × 16 bytes, one cache line.
pub(super) const SLOTS: usize = 4;
/// Buckets per group of [`GROUP`] slots (one [`Gate`] each).
const GROUP_BUCKETS: usize = GROUP / SLOTS;
/// Tracked keys per bucket at which the table grows by a bucket: a load of 3/4, 21⅓ bytes of
/// slots per key.
pub(super) const KEYS_PER_BUCKET: usize = 3;
/// Buckets in segment 0 (4 KiB); the table never has fewer.
#[cfg(not(loom))]
const FIRST: usize = 64;
/// Under loom, two buckets: a model splits the table after a handful of keys.
#[cfg(loom)]
const FIRST: usize = 2;
/// Segments that double in size: 64 · 2^k buckets for k = 0 … 8.
const DOUBLING: usize = 9;
/// Buckets in the doubling segments together: 64 · (2^9 − 1).
const DOUBLING_END: usize = FIRST * ((1 << DOUBLING) - 1);
/// log2 of the buckets in each later segment: 16 384 buckets, 1 MiB.
const BIG_SHIFT: u32 = 14;

/// One key's cell: its fingerprint and its TAT.
#[derive(Debug, Default)]
pub(super) struct Slot {
    pub(super) key: AtomicU64,
    pub(super) tat: AtomicU64,
}

impl Slot {
    /// Free for a new key: never used (key 0), or dead (tombstone). Under the insert lock.
    pub(super) fn is_free(&self) -> bool {
        self.key.load(Ordering::Relaxed) == 0 || self.tat.load(Ordering::Acquire) == TOMBSTONE
    }

    /// The fingerprint of the live key here, if any. Under the insert lock.
    pub(super) fn live_key(&self) -> Option<u64> {
        let fp = self.key.load(Ordering::Relaxed);
        (fp != 0 && self.tat.load(Ordering::Acquire) != TOMBSTONE).then_some(fp)
    }

    /// The TAT of the live key `fp` here (its word decoded under `fp`'s mask), or `None` if
    /// the slot is dead. The caller knows the slot holds `fp` (under the insert lock, or
    /// re-checking the key after this load).
    #[inline]
    pub(super) fn tat_of(&self, fp: u64) -> Option<u64> {
        // Acquire: see `install`.
        let raw = self.tat.load(Ordering::Acquire);
        (raw != TOMBSTONE).then(|| tagged::decode(raw, tagged::mask_of(fp)))
    }

    /// The TAT words of these slots with their owners' masks, for a quota change's rescale
    /// (under the insert lock, so the keys stay put).
    pub(super) fn words(slots: &[Slot]) -> impl Iterator<Item = (&AtomicU64, u64)> {
        slots
            .iter()
            .map(|s| (&s.tat, tagged::mask_of(s.key.load(Ordering::Relaxed))))
    }
}

/// Four slots on one cache line.
#[derive(Debug, Default)]
#[repr(align(64))]
pub(super) struct Bucket(pub(super) [Slot; SLOTS]);

/// A run of buckets and the gates of their groups.
#[derive(Debug)]
struct Segment {
    buckets: Box<[Bucket]>,
    gates: Box<[Gate]>,
}

/// Where a key's cell is: its slot and the gate of the slot's group.
#[derive(Clone, Copy, Debug)]
pub(super) struct Place<'a> {
    pub(super) slot: &'a Slot,
    pub(super) gate: &'a Gate,
}

/// The buckets and their addressing. Lookups are lock-free; everything that writes a slot or
/// the shape runs under the limiter's insert lock.
pub(super) struct Store {
    /// The linear-hashing shape, `(2^L − 1) << 32 | s`: written (Release) under the insert lock
    /// after the keys a split moves are in place; read (Acquire) by every lookup.
    shape: AtomicU64,
    segments: Box<[OnceLock<Segment>]>,
    /// Under loom, one flag a segment, set (Release) once its `OnceLock` is and read (Acquire)
    /// before it: loom cannot see inside std's `OnceLock`, so this stands in for its
    /// publication in the models.
    #[cfg(loom)]
    published: Box<[crate::sync::atomic::AtomicBool]>,
    /// Bytes allocated: the directory and every segment (buckets and gates).
    bytes: AtomicUsize,
    /// The most buckets the table may grow to (for `max_keys` keys at the split threshold).
    max_buckets: usize,
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store")
            .field("buckets", &self.buckets_in_use())
            .field("max_buckets", &self.max_buckets)
            .field("bytes", &self.bytes())
            .finish()
    }
}

/// The two 32-bit hashes that name a key's candidate buckets.
#[inline]
pub(super) fn hashes(fp: u64) -> [u32; 2] {
    // Truncations are the intended split of the fingerprint into halves.
    [fp as u32, (fp >> 32) as u32]
}

/// The bucket `h` names under `shape`.
#[inline]
fn bucket_index(shape: u64, h: u32) -> usize {
    let (mask, split) = (shape >> 32, shape & 0xffff_ffff);
    let h = u64::from(h);
    let low = h & mask;
    // The mask is below 2^31 (at most 2^31 buckets), so the result fits 32 bits.
    (if low < split {
        h & (mask << 1 | 1)
    } else {
        low
    }) as usize
}

/// The buckets in use under `shape`: `2^L + s`.
fn buckets_of_shape(shape: u64) -> usize {
    ((shape >> 32) + 1 + (shape & 0xffff_ffff)) as usize
}

/// The shape one split later.
fn next_shape(shape: u64) -> u64 {
    let (mask, split) = (shape >> 32, shape & 0xffff_ffff);
    if split == mask {
        (mask << 1 | 1) << 32
    } else {
        mask << 32 | (split + 1)
    }
}

/// Bucket `p`'s segment and its index there.
#[inline]
fn locate(p: usize) -> (usize, usize) {
    if p < DOUBLING_END {
        let q = p + FIRST;
        let lg = q.ilog2();
        ((lg - FIRST.ilog2()) as usize, q ^ (1 << lg))
    } else {
        let r = p - DOUBLING_END;
        (DOUBLING + (r >> BIG_SHIFT), r & ((1 << BIG_SHIFT) - 1))
    }
}

/// Buckets in segment `seg`.
fn segment_len(seg: usize) -> usize {
    if seg < DOUBLING {
        FIRST << seg
    } else {
        1 << BIG_SHIFT
    }
}

/// A zeroed vector of `n` values, or `None` if the allocator refuses.
fn try_filled<T>(n: usize, value: impl FnMut() -> T) -> Option<Box<[T]>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).ok()?;
    v.resize_with(n, value);
    Some(v.into_boxed_slice())
}

impl Store {
    /// A table for up to `max_keys` keys, its first segment allocated; `None` if the
    /// allocator refuses even that.
    pub(super) fn new(max_keys: usize) -> Option<Self> {
        let max_buckets = max_keys.div_ceil(KEYS_PER_BUCKET).max(FIRST);
        let segments = try_filled(locate(max_buckets - 1).0 + 1, OnceLock::new)?;
        let store = Self {
            shape: AtomicU64::new(((FIRST - 1) as u64) << 32),
            bytes: AtomicUsize::new(core::mem::size_of_val(&*segments)),
            #[cfg(loom)]
            published: try_filled(segments.len(), Default::default)?,
            segments,
            max_buckets,
        };
        store.allocate(0, 0)?;
        Some(store)
    }

    /// A table with no buckets (when the allocator refused one): every key overflows.
    pub(super) fn empty() -> Self {
        Self {
            shape: AtomicU64::new(((FIRST - 1) as u64) << 32),
            segments: Box::default(),
            #[cfg(loom)]
            published: Box::default(),
            bytes: AtomicUsize::new(0),
            max_buckets: 0,
        }
    }

    /// Bytes the table occupies now: the directory and every segment allocated.
    pub(super) fn bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Buckets in use.
    pub(super) fn buckets_in_use(&self) -> usize {
        buckets_of_shape(self.shape.load(Ordering::Acquire))
    }

    /// Finds the live slot of `fp` in its two buckets, without locking, and the gate of its
    /// group. `None` for fp 0, which marks never-used slots.
    #[inline]
    pub(super) fn find(&self, fp: u64) -> Option<Place<'_>> {
        let (segment, off, slot) = self.find_in_segment(fp)?;
        Some(Place {
            slot,
            gate: segment.gates.get(off / GROUP_BUCKETS)?,
        })
    }

    /// [`find`](Self::find) without the gate, for a check in steady state.
    #[inline]
    pub(super) fn find_slot(&self, fp: u64) -> Option<&Slot> {
        Some(self.find_in_segment(fp)?.2)
    }

    #[inline(always)]
    fn find_in_segment(&self, fp: u64) -> Option<(&Segment, usize, &Slot)> {
        if fp == 0 {
            return None;
        }
        let shape = self.shape.load(Ordering::Acquire);
        let [h1, h2] = hashes(fp);
        self.find_in(bucket_index(shape, h1), fp)
            .or_else(|| self.find_in(bucket_index(shape, h2), fp))
    }

    #[inline(always)]
    fn find_in(&self, p: usize, fp: u64) -> Option<(&Segment, usize, &Slot)> {
        let (seg, off) = locate(p);
        let segment = self.segment(seg)?;
        let bucket = segment.buckets.get(off)?;
        // Acquire: pairs with the Release store that placed the key, so its TAT is seen. A
        // dead copy (swept, or left by a move) is passed over: the key may live on elsewhere.
        let slot = bucket.0.iter().find(|slot| {
            slot.key.load(Ordering::Acquire) == fp && slot.tat.load(Ordering::Acquire) != TOMBSTONE
        })?;
        Some((segment, off, slot))
    }

    /// Segment `seg`, if allocated.
    #[inline(always)]
    fn segment(&self, seg: usize) -> Option<&Segment> {
        // Acquire: pairs with the Release in `allocate` (see `published`).
        #[cfg(loom)]
        if !self.published.get(seg)?.load(Ordering::Acquire) {
            return None;
        }
        self.segments.get(seg)?.get()
    }

    /// `fp`'s two candidate buckets (the same one twice if both hashes name it). Under the
    /// insert lock, where the shape cannot change.
    pub(super) fn home(&self, fp: u64) -> [usize; 2] {
        let shape = self.shape.load(Ordering::Relaxed);
        hashes(fp).map(|h| bucket_index(shape, h))
    }

    /// The bucket of a live key `fp` that is not `p`, if it has one. Under the insert lock.
    pub(super) fn other(&self, fp: u64, p: usize) -> Option<usize> {
        let [a, b] = self.home(fp);
        let alt = if a == p { b } else { a };
        (alt != p).then_some(alt)
    }

    /// Bucket `p` and the gate of its group, if allocated.
    pub(super) fn bucket(&self, p: usize) -> Option<(&Bucket, &Gate)> {
        let (seg, off) = locate(p);
        let segment = self.segment(seg)?;
        Some((
            segment.buckets.get(off)?,
            segment.gates.get(off / GROUP_BUCKETS)?,
        ))
    }

    /// A free slot in bucket `p`.
    pub(super) fn free_in(&self, p: usize) -> Option<Place<'_>> {
        let (bucket, gate) = self.bucket(p)?;
        let slot = bucket.0.iter().find(|s| s.is_free())?;
        Some(Place { slot, gate })
    }

    /// The slot at index `i` (bucket `i / 4`), for the resumable sweep.
    pub(super) fn slot(&self, i: usize) -> Option<&Slot> {
        let (bucket, _) = self.bucket(i / SLOTS)?;
        bucket.0.get(i % SLOTS)
    }

    /// Group `g` (buckets `16g .. 16g + 16`): its gate and its buckets, if allocated.
    pub(super) fn group(&self, g: usize) -> Option<(&Gate, &[Bucket])> {
        let (seg, off) = locate(g.checked_mul(GROUP_BUCKETS)?);
        let segment = self.segment(seg)?;
        let buckets = segment.buckets.get(off..off + GROUP_BUCKETS)?;
        Some((segment.gates.get(off / GROUP_BUCKETS)?, buckets))
    }

    /// The group of bucket `p`: its gate and its buckets, if allocated.
    pub(super) fn group_of(&self, p: usize) -> Option<(&Gate, &[Bucket])> {
        self.group(p / GROUP_BUCKETS)
    }

    /// The bucket the next split creates and the bucket it splits, with the shape after it;
    /// `None` if the table is at its largest or the new bucket's segment cannot be allocated
    /// (a new segment's gates are marked at generation `gen`). Under the insert lock.
    pub(super) fn next_split(&self, gen: u64) -> Option<(usize, usize, u64)> {
        let shape = self.shape.load(Ordering::Relaxed);
        let to = buckets_of_shape(shape);
        if to >= self.max_buckets {
            return None;
        }
        self.allocate(locate(to).0, gen)?;
        Some(((shape & 0xffff_ffff) as usize, to, next_shape(shape)))
    }

    /// `fp`'s buckets under `shape`.
    pub(super) fn home_under(shape: u64, fp: u64) -> [usize; 2] {
        hashes(fp).map(|h| bucket_index(shape, h))
    }

    /// Publishes the shape after a split, once the keys it moved are in place. Under the
    /// insert lock.
    pub(super) fn set_shape(&self, shape: u64) {
        // Release: a lookup that reads the new shape sees the moved keys in their new bucket.
        self.shape.store(shape, Ordering::Release);
    }

    /// Allocates segment `seg` if it is not yet, its gates marked at generation `gen`. Under
    /// the insert lock (the only writer).
    fn allocate(&self, seg: usize, gen: u64) -> Option<()> {
        let cell = self.segments.get(seg)?;
        if cell.get().is_some() {
            return Some(());
        }
        let len = segment_len(seg);
        let buckets = try_filled(len, Bucket::default)?;
        let gates = try_filled(len / GROUP_BUCKETS, || {
            let gate = Gate::default();
            gate.mark(gen);
            gate
        })?;
        let added = core::mem::size_of_val(&*buckets) + core::mem::size_of_val(&*gates);
        let _ = cell.set(Segment { buckets, gates });
        #[cfg(loom)]
        if let Some(flag) = self.published.get(seg) {
            // Release: a lookup that sees the flag sees the segment (see `published`).
            flag.store(true, Ordering::Release);
        }
        self.bytes.fetch_add(added, Ordering::Relaxed);
        Some(())
    }
}

/// Writes `fp` with `tat` (stored under `fp`'s mask, see [`tagged`]) into the free slot
/// `slot`. Under the insert lock.
pub(super) fn install(slot: &Slot, fp: u64, tat: u64) {
    let tat = tagged::encode(tat, tagged::mask_of(fp));
    if slot.tat.load(Ordering::Relaxed) == TOMBSTONE {
        // Reused: the key first, then the TAT with Release. A check that read this slot's
        // old key and then sees the new TAT also sees the new key, so its key check fails; a
        // check that re-checked the old key before this and swaps after expects the old
        // key's encoding, which the new key's word is not (`tagged`).
        slot.key.store(fp, Ordering::Release);
        slot.tat.store(tat, Ordering::Release);
    } else {
        // Never used (both words 0): the TAT first, then the key with Release, so a reader
        // that finds the key sees its TAT.
        slot.tat.store(tat, Ordering::Relaxed);
        slot.key.store(fp, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_tile_the_buckets_without_gaps() {
        let mut expect = (0, 0);
        for p in 0..DOUBLING_END + 3 * (1 << BIG_SHIFT) {
            let (seg, off) = locate(p);
            if seg != expect.0 {
                assert_eq!(expect.1, segment_len(expect.0), "segment {} full", expect.0);
                expect = (expect.0 + 1, 0);
            }
            assert_eq!((seg, off), expect, "bucket {p}");
            expect.1 += 1;
        }
        assert_eq!(segment_len(DOUBLING - 1), 1 << BIG_SHIFT);
    }

    #[test]
    fn a_split_moves_keys_only_to_the_new_bucket() {
        let mut shape = ((FIRST - 1) as u64) << 32;
        let fps: Vec<u64> = (1..2_000u64)
            .map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15))
            .collect();
        for _ in 0..1_000 {
            let next = next_shape(shape);
            let (from, to) = ((shape & 0xffff_ffff) as usize, buckets_of_shape(shape));
            assert_eq!(buckets_of_shape(next), to + 1);
            for &fp in &fps {
                for h in hashes(fp) {
                    let (a, b) = (bucket_index(shape, h), bucket_index(next, h));
                    assert!(a < to && b <= to);
                    assert!(a == b || (a == from && b == to), "{fp:x}: {a} -> {b}");
                }
            }
            shape = next;
        }
    }

    #[test]
    fn a_new_store_is_small_and_the_largest_directory_fits() {
        let s = Store::new(crate::limiter::keyed::DEFAULT_MAX_KEYS).unwrap(); // unit test: a panic is the test failing
        assert_eq!(s.buckets_in_use(), FIRST);
        assert!(s.bytes() < 8 << 10, "{} bytes", s.bytes());
        assert_eq!(
            core::mem::size_of::<OnceLock<Segment>>(),
            40,
            "as the docs say"
        );
        let default = locate(s.max_buckets - 1).0 + 1;
        assert_eq!(default * 40, 1_160, "1.1 KiB at the default cap");
        let max = crate::limiter::keyed::MAX_KEYS_LIMIT.div_ceil(KEYS_PER_BUCKET);
        let largest = (locate(max - 1).0 + 1) * 40;
        assert!((3 << 20..7 << 19).contains(&largest), "3.3 MiB: {largest}");
    }
}

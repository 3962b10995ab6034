//! Growing the table and making room in it: splitting a bucket, moving a key to its other
//! bucket. Everything here runs under the insert lock; checks go on lock-free meanwhile.
//!
//! # No step lost or counted twice
//!
//! A move first kills the old copy with a compare-and-swap of its TAT to [`TOMBSTONE`] — an
//! allow that lands first is carried along, one that comes later fails — and only then writes
//! the new copy: a key never has two live copies. Lookups pass over dead copies; a check that
//! meets one under its feet, or finds no copy, takes the insert path, which waits for this lock
//! and finds the key where the move left it. A split publishes the new shape after its moves,
//! so a lookup under the new shape finds the moved keys in the new bucket; one under the old
//! shape finds the dead copies and goes the slow way.
//!
//! A dead slot (swept, or left by a move) can be handed to another key whose TAT happens to
//! equal one a stalled check read from the old key before its compare-and-swap (an ABA). The
//! TAT word is stored under its owner's mask ([`tagged`]), so the stalled check's swap, which
//! expects its own key's encoding, fails on the new owner's word and the check looks again: a
//! swap that lands, lands on its own key's cell (and is carried if the key moves right after).
//!
//! # Exactly one rescale per TAT
//!
//! A move carries a TAT as it is, so it happens only between groups at the same generation of
//! a quota change. Moves and the change's rescaling of each group both run under this lock, so
//! the generations cannot move during a move. With no change in progress (the snapshot read
//! under the lock has no previous parameters) every group is at one generation. During one,
//! a move between a group already rescaled and one not yet rescales the one behind first, as
//! the change's walk would (`same_scale`); the walk skips groups already at its generation —
//! those, and groups born during the change (empty, their gates marked at the new generation).
//! So every group, and every TAT in it, moved or not, is rescaled exactly once.

use crate::sync::atomic::{fence, AtomicU64, Ordering};

use super::store::{self, Bucket, Place, Slot, Store, KEYS_PER_BUCKET};
use super::{KeyedRateLimiter, Slow};
use crate::engine::cell::TOMBSTONE;
use crate::engine::params::Snapshot;
use crate::engine::tagged;

/// Splits per insert at most: a table that fell behind (an allocation the allocator refused)
/// catches up, and no insert waits for more than two buckets' moves.
const SPLITS_PER_INSERT: usize = 2;
/// The longest cuckoo path tried to make room for a new key: three moves, shortest paths first
/// (a few hundred slots looked at, at most). At a load of 3/4 it found room for every one of a
/// million keys in our runs (two moves left a few in a million to the spill map).
const MOVES: usize = 3;

impl<K> KeyedRateLimiter<K> {
    /// Before an insert: grows the table by a bucket (or two) while it tracks
    /// [`KEYS_PER_BUCKET`] keys per bucket or more. `snap` was read under the lock and `now`
    /// too: new segments' gates are born at `snap.gen`, and a group a move needs at the new
    /// generation of a change in progress is rescaled at `now`.
    pub(super) fn grow(&self, slow: &mut Slow, snap: &Snapshot, now: u64) {
        for _ in 0..SPLITS_PER_INSERT {
            let full = self.len() >= KEYS_PER_BUCKET * self.table.buckets_in_use();
            if !full || !self.split(slow, snap, now) {
                return;
            }
        }
    }

    /// Splits the next bucket: its live keys whose hash names the new bucket now move there,
    /// then the new shape is published. `false` if the table is at its largest or the
    /// allocator refused a segment.
    fn split(&self, slow: &mut Slow, snap: &Snapshot, now: u64) -> bool {
        let Some((from, to, next)) = self.table.next_split(snap.gen) else {
            return false;
        };
        let (Some((src, _)), Some((dst, _))) = (self.table.bucket(from), self.table.bucket(to))
        else {
            return false;
        };
        if !self.same_scale(from, to, snap, now) {
            return false;
        }
        // The new bucket was never used, and takes at most the old one's four keys. Until the
        // new shape is out, a lookup under the old one misses the keys moved: the moves and
        // the shape go out together, under one turn of the sequence lock.
        self.moving(|| {
            let mut free = dst.0.iter();
            for slot in &src.0 {
                let Some(fp) = slot.live_key() else { continue };
                if Store::home_under(next, fp).contains(&from) {
                    continue;
                }
                if let Some(to_slot) = free.next() {
                    self.relocate(slow, slot, to_slot);
                }
            }
            self.table.set_shape(next);
        });
        true
    }

    /// Runs `body` — moves of live keys between slots, and a split's new shape — inside the
    /// sequence lock `moves` (see `keyed.rs` and `carry.rs`): odd while it runs, so a
    /// lock-free lookup that misses a key meanwhile knows it may be in flight.
    fn moving<T>(&self, body: impl FnOnce() -> T) -> T {
        // Odd: a Relaxed store, then a Release fence, so a reader whose Acquire load sees
        // any write of `body` (a dead copy, a new copy, the shape) then sees the odd value
        // or a later one.
        let seq = self.moves.load(Ordering::Relaxed);
        self.moves.store(seq.wrapping_add(1), Ordering::Relaxed);
        fence(Ordering::Release);
        let out = body();
        // Even again, with Release: a reader that sees it sees every write of `body`.
        self.moves.store(seq.wrapping_add(2), Ordering::Release);
        out
    }

    /// Before a move from bucket `a` to bucket `b`: `true` once their groups are at the same
    /// generation, so the TAT can move as it is. They differ only while a quota change is in
    /// progress and has rescaled one group and not yet the other; then the one behind is
    /// rescaled now, under this lock, as the change's walk would have — the walk skips groups
    /// already at its generation, so every group (and every TAT, moved or not) is rescaled
    /// exactly once.
    pub(super) fn same_scale(&self, a: usize, b: usize, snap: &Snapshot, now: u64) -> bool {
        // Groups differ only during a change, which the snapshot (read under this lock, which
        // every group's rescale takes) shows; the one behind is one generation behind. With
        // no change in progress when it was read, none can rescale a group before the lock is
        // released, and every group (new ones too) is at the snapshot's generation.
        let Some(prev) = snap.prev else {
            return true;
        };
        let (Some((ga, wa)), Some((gb, wb))) = (self.table.group_of(a), self.table.group_of(b))
        else {
            return false;
        };
        if ga.same_generation(gb) {
            return true;
        }
        for (gate, buckets) in [(ga, wa), (gb, wb)] {
            if !gate.is_at(snap.gen) {
                gate.rescale(snap.gen, tat_words(buckets), &prev, &snap.cur, now);
            }
        }
        ga.same_generation(gb)
    }

    /// Frees a slot in the full bucket `p` by moving a key that lives there as its second
    /// choice back to its first bucket, if that has a free slot: both keys then sit in their
    /// first bucket. The slot freed.
    pub(super) fn bring_home(
        &self,
        slow: &mut Slow,
        p: usize,
        snap: &Snapshot,
        now: u64,
    ) -> Option<Place<'_>> {
        let (bucket, gate) = self.table.bucket(p)?;
        for slot in &bucket.0 {
            let Some(first) = slot.live_key().map(|fp| self.table.home(fp)[0]) else {
                continue;
            };
            if first == p {
                continue;
            }
            if let Some(to) = self.table.free_in(first) {
                if self.same_scale(p, first, snap, now) {
                    self.moving(|| self.relocate(slow, slot, to.slot));
                    return Some(Place { slot, gate });
                }
            }
        }
        None
    }

    /// Frees a slot in one of `home`'s buckets by moving one of their keys to its other
    /// bucket — after moving a key there to its own other bucket, and so on, if need be (a
    /// cuckoo path of at most [`MOVES`] moves, shortest first) — only between groups at the
    /// same generation. The slot freed.
    pub(super) fn make_room(
        &self,
        slow: &mut Slow,
        home: [usize; 2],
        snap: &Snapshot,
        now: u64,
    ) -> Option<Place<'_>> {
        let buckets = if home[0] == home[1] {
            &home[..1]
        } else {
            &home[..]
        };
        let at = (snap, now);
        for depth in 0..MOVES {
            for &p in buckets {
                let (bucket, gate) = self.table.bucket(p)?;
                for slot in &bucket.0 {
                    if self.push_out(slow, slot, p, at, depth) {
                        return Some(Place { slot, gate });
                    }
                }
            }
        }
        None
    }

    /// Moves the live key in `x` (in bucket `p`) to a free slot of its other bucket; with
    /// `depth` > 0 and none free there, first frees one by pushing one of its keys out in turn
    /// (`depth − 1` further). `true` if `x` is free now.
    fn push_out(
        &self,
        slow: &mut Slow,
        x: &Slot,
        p: usize,
        at: (&Snapshot, u64),
        depth: usize,
    ) -> bool {
        let Some(alt) = x.live_key().and_then(|fp| self.table.other(fp, p)) else {
            return false;
        };
        let Some((bucket, _)) = self.table.bucket(alt) else {
            return false;
        };
        let to = match bucket.0.iter().find(|s| s.is_free()) {
            Some(to) => to,
            None if depth > 0 => {
                let pushed = |y: &&Slot| self.push_out(slow, y, alt, at, depth - 1);
                match bucket.0.iter().find(pushed) {
                    Some(y) => y,
                    None => return false,
                }
            }
            None => return false,
        };
        if !self.same_scale(p, alt, at.0, at.1) {
            return false;
        }
        self.moving(|| self.relocate(slow, x, to));
        true
    }

    /// Moves the live key in `from` to the free slot `to` (inside [`moving`](Self::moving)).
    /// The old copy dies first — a compare-and-swap of its TAT to the tombstone: an allow
    /// that lands before it moves with the key, one that comes after fails and takes the
    /// insert path, which waits for this lock — and only then is the new copy written: the
    /// key never has two live copies.
    fn relocate(&self, slow: &mut Slow, from: &Slot, to: &Slot) {
        let fp = from.key.load(Ordering::Relaxed);
        // Acquire (load and failed CAS): the value moved is the latest allow's.
        let mut raw = from.tat.load(Ordering::Acquire);
        loop {
            if raw == TOMBSTONE {
                return;
            }
            match from.tat.compare_exchange_weak(
                raw,
                TOMBSTONE,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => break,
                Err(actual) => raw = actual,
            }
        }
        let tat = tagged::decode(raw, tagged::mask_of(fp));
        // The old slot stays a dead copy of `fp` (free for any key) until it is reused. A check
        // whose compare-and-swap landed just before the move is carried with it; one that
        // comes after fails on the tombstone, or on the next owner's word, which is never
        // `fp`'s encoding (`tagged`), and looks again.
        store::install(to, fp, tat);
        // The resumable sweep may have passed `to` already in its current pass.
        slow.saw_live(tat);
    }
}

/// The TAT words of `buckets` with their owners' masks (under the insert lock).
pub(super) fn tat_words(buckets: &[Bucket]) -> impl Iterator<Item = (&AtomicU64, u64)> {
    buckets.iter().flat_map(|b| Slot::words(&b.0))
}

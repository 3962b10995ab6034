//! Carrying one key's state between two limiters (a staged rollout moves keys between the
//! old and the new document's limiters): the key's fill level is carried over, as for a quota
//! change, so a move never hands out a free burst.
//!
//! # The protocol
//!
//! A cohort check of a key on the new document's limiter `to`, carrying from the old
//! document's `from` ([`check_key_carried`](KeyedRateLimiter::check_key_carried)):
//!
//! 1. `to`'s table holds the key live: nothing to carry. Its state was carried when it joined
//!    (or there was none to carry then), and its own cell is its state now. One lock-free
//!    lookup, then the check. This is every cohort check but a key's first.
//! 2. Otherwise, the key's fill level in `from` ([`live_fill`](KeyedRateLimiter::live_fill)):
//!    lock-free, unless `from` has spilled keys and the key is not in its table, or a key
//!    moved in `from`'s table while the lookup ran.
//! 3. Live there: [`adopt`](KeyedRateLimiter::adopt), under `to`'s insert lock. It installs
//!    the fill level, or keeps the later of the two if another thread placed the key
//!    meanwhile (a racing cohort check adopting it first). Once per key joining the cohort.
//!
//! A key's first cohort check adopts before it checks, so no check of the key in `to` can
//! start it fresh while a fuller state waits in `from`: racing cohort checks of a joining key
//! all adopt first, and the insert lock orders their adoptions and inserts.
//!
//! # Memory orderings in `live_fill` (for the model checker)
//!
//! - `moves`, a sequence lock over moves of live keys between slots, is written only under
//!   `from`'s insert lock (`moving` in `grow.rs`): stored odd (Relaxed) and a Release fence
//!   before a move kills the old copy, stored even (Release) once the new copy is installed —
//!   for a split, once its new shape is published too, since until then a lookup under the
//!   old shape misses the keys it moved. `live_fill` loads it (Acquire) before the lookup and,
//!   after a miss, again (Relaxed) behind an Acquire fence: a lookup that saw any effect of a
//!   move (a dead copy, a slot reused after one) synchronises with the fence before it and so
//!   sees the counter changed. A miss with the counter even and unchanged means the key was
//!   in no slot.
//! - `spilled` is loaded (Acquire) before the lookup; it is stored (Release) after every
//!   change of the spill map, and a key leaves the map only for the table (`rehome`, which
//!   installs it first) or because it went idle (swept). Found 0, a miss means the key is
//!   neither in the table nor in the map; found above 0, a miss takes the lock.
//! - The TAT word is loaded (Acquire) after the lookup, then the slot's key again (Acquire):
//!   a reused slot publishes its new key before its new TAT (`store::install`), so another
//!   key's TAT is never taken for ours. The parameter snapshot's token is re-validated after
//!   the TAT load, as a check does, so a TAT is never read against the other quota's τ.
//! - Anything else — the counter odd or changed, keys spilled, the slot dead or changed hands
//!   under the read — takes `from`'s insert lock, under which keys neither move nor spill.
//!
//! The lookup in `to` (step 1) needs none of this: a miss there only sends the key to steps
//! 2–3, and `adopt` looks again under `to`'s lock.

use crate::sync::atomic::{fence, AtomicU64, Ordering};
use core::borrow::Borrow;
use core::hash::Hash;

use super::insert::Held;
use super::{store, KeyedRateLimiter};
use crate::engine::cell::TOMBSTONE;
use crate::engine::check::Check;
use crate::engine::error::InsufficientCapacity;
use crate::engine::gcra;
use crate::engine::tagged;
use crate::engine::verdict::Verdict;

/// A key's fill level read from a limiter: its TAT, the tolerance it was written under.
type Fill = (u64, u64);

impl<K> KeyedRateLimiter<K> {
    /// The key with fingerprint `fp`, if it is tracked and live: its TAT, the tolerance it
    /// was written under, and the instant read. Lock-free unless keys are spilled or moving
    /// (see the module's protocol).
    fn live_fill(&self, fp: u64) -> Option<(u64, u64, u64)> {
        let (tat, tau) = match self.fill_lock_free(fp) {
            Some(found) => found?,
            None => self.fill_locked(fp)?,
        };
        let now = self.now();
        (tat > now).then_some((tat, tau, now))
    }

    /// `Some(found)` if a lock-free look settles it (`found` is `None` for a key in no slot
    /// and not spilled); `None` if only the insert lock can tell.
    #[inline]
    fn fill_lock_free(&self, fp: u64) -> Option<Option<Fill>> {
        // Acquire: pairs with the Release of the store that ended the last move.
        let moves = self.moves.load(Ordering::Acquire);
        if moves & 1 == 1 {
            return None;
        }
        // Acquire: pairs with the Release store after the spill map changed.
        let spilled = self.spilled.load(Ordering::Acquire);
        let snap = self.params.load();
        let Some(place) = self.table.find(fp) else {
            // The move counter read again after the lookup's loads (see the module's notes).
            fence(Ordering::Acquire);
            let unchanged = self.moves.load(Ordering::Relaxed) == moves;
            return (spilled == 0 && unchanged).then_some(None);
        };
        let (p, token) = place.gate.resolve(&snap);
        let tat = place.slot.tat_of(fp);
        let ours = place.slot.key.load(Ordering::Acquire) == fp;
        let valid = ours && token.still_valid(&self.params, place.gate);
        let tat = tat.filter(|_| valid)?;
        Some(Some((tat, p.tau)))
    }

    /// [`fill_lock_free`](Self::fill_lock_free) under the insert lock, where keys neither
    /// move nor spill and quota changes rescale no group: exact.
    #[cold]
    #[inline(never)]
    fn fill_locked(&self, fp: u64) -> Option<Fill> {
        self.locked_word(fp).map(|(tat, p)| (tat, p.tau))
    }

    /// Starts the untracked key `fp` at the fill level `(tat, tau_from, at)` carried from
    /// another limiter, if there is room; a tracked key moves up to it if that is later.
    /// Under the insert lock: called once per key joining (see the module's protocol).
    #[cold]
    #[inline(never)]
    fn adopt(&self, fp: u64, (tat, tau_from, at): (u64, u64, u64)) {
        let mut slow = self.slow.lock();
        let now = self.locked_now(&mut slow).max(at);
        let snap = self.params.load();
        let fill = |tau_to: u64| gcra::rescale(tat, now, tau_from, tau_to);
        if let Some(own) = slow.spill.get_mut(&fp) {
            let tau = Self::params_at(&snap, &self.spill_gate).tau;
            *own = (*own).max(fill(tau));
            return;
        }
        self.grow(&mut slow, &snap, now);
        let dead = match self.held(fp) {
            Held::Live(place) => {
                // Tracked: keep the later of the two fill levels. Under the insert lock, so
                // the group's generation cannot change and the key stays; races allows
                // harmlessly (a swap on the owner's encoding, see `tagged`).
                let tau = Self::params_at(&snap, place.gate).tau;
                raise(&place.slot.tat, tagged::mask_of(fp), fill(tau));
                return;
            }
            Held::Dead(place) => Some(place),
            Held::Absent => None,
        };
        // A carried key brings a debt (`live_fill` finds only live keys): at the cap it takes an
        // idle key's slot whatever admission would say of a newcomer, or its debt would be
        // forgotten in the overflow cell.
        if self.len() >= self.max_keys && !self.free_one(&mut slow, fp, now) {
            return;
        }
        let Some(place) = dead.or_else(|| self.room_for(&mut slow, fp, &snap, now, now)) else {
            return;
        };
        let tat = fill(Self::params_at(&snap, place.gate).tau);
        if tat > now && self.len() < self.max_keys {
            store::install(place.slot, fp, tat);
            self.inserted(&mut slow, tat);
        }
    }

    /// Carries the key's state from `from` (its fingerprint there computed by `fp_from`) to
    /// this limiter's key `fp`, unless this limiter tracks it already (step 1 of the
    /// protocol).
    #[inline]
    fn carry(&self, fp: u64, from: &KeyedRateLimiter<K>, fp_from: impl FnOnce() -> u64) {
        if self.table.find_slot(fp).is_some() {
            return;
        }
        if let Some(fill) = from.live_fill(fp_from()) {
            self.adopt(fp, fill);
        }
    }
}

impl<K: Hash> KeyedRateLimiter<K> {
    /// If `key` is live in `from` and not tracked here, carries its fill level here: if it
    /// has used a share `u` of its burst there, it has used (at least) the same share of this
    /// limiter's burst. A key moving between the two limiters never gets a fresh burst, and
    /// never loses more than its share. A key tracked here already keeps its own state: it
    /// was carried when it first came (see the module's protocol).
    pub(crate) fn carry_from<Q>(&self, from: &KeyedRateLimiter<K>, key: &Q)
    where
        K: Borrow<Q>,
        Q: Hash + ?Sized,
    {
        let fp = self.fingerprinter.fingerprint(key);
        self.carry(fp, from, || from.fingerprinter.fingerprint(key));
    }

    /// [`carry_from`](Self::carry_from) `from`, then
    /// [`check_key_with`](Self::check_key_with), hashing the key once for this limiter.
    ///
    /// # Errors
    ///
    /// As [`check_key_with`](Self::check_key_with) (the state is carried all the same).
    #[inline]
    pub(crate) fn check_key_carried<Q>(
        &self,
        from: &KeyedRateLimiter<K>,
        key: &Q,
        check: Check,
    ) -> Result<Verdict, InsufficientCapacity>
    where
        K: Borrow<Q>,
        Q: Hash + ?Sized,
    {
        let fp = self.fingerprinter.fingerprint(key);
        self.carry(fp, from, || from.fingerprinter.fingerprint(key));
        self.check_fp_with(fp, check)
    }
}

/// A hook for `tests/loom.rs`: [`carry_from`](KeyedRateLimiter::carry_from) (crate-private).
#[cfg(loom)]
impl<K: Hash> KeyedRateLimiter<K> {
    #[doc(hidden)]
    pub fn loom_carry_from<Q>(&self, from: &KeyedRateLimiter<K>, key: &Q)
    where
        K: Borrow<Q>,
        Q: Hash + ?Sized,
    {
        self.carry_from(from, key);
    }
}

/// Raises the live TAT word `word` (stored under `mask`) to at least `tat`; a tombstone stays.
fn raise(word: &AtomicU64, mask: u64, tat: u64) {
    let mut raw = word.load(Ordering::Acquire);
    while raw != TOMBSTONE && tagged::decode(raw, mask) < tat {
        let next = tagged::encode(tat, mask);
        match word.compare_exchange_weak(raw, next, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return,
            Err(actual) => raw = actual,
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use core::time::Duration;
    use std::sync::mpsc;

    use super::KeyedRateLimiter;
    use crate::engine::check::Check;
    use crate::engine::clock::ManualClock;

    fn limiter(clock: &ManualClock, quota: &str) -> KeyedRateLimiter<String> {
        let quota = quota.parse().expect("a valid test quota"); // a test: a panic is its failure
        KeyedRateLimiter::builder(quota)
            .clock(clock.clone())
            .build()
    }

    /// Runs `f` on another thread while this one holds the insert locks of `held`: `true` if
    /// it finished. A path that takes one of those locks blocks until they are released, so
    /// it fails this after the timeout (a bound on a hang, not a wait for time to pass: the
    /// lock-free path answers at once).
    fn finishes_while_locked(held: &[&KeyedRateLimiter<String>], f: impl FnOnce() + Send) -> bool {
        let guards: Vec<_> = held.iter().map(|l| l.slow.lock()).collect();
        let (tx, rx) = mpsc::channel();
        std::thread::scope(|s| {
            s.spawn(move || {
                f();
                let _ = tx.send(());
            });
            let done = rx.recv_timeout(Duration::from_secs(30)).is_ok();
            drop(guards);
            done
        })
    }

    fn allowed(lim: &KeyedRateLimiter<String>, from: &KeyedRateLimiter<String>, n: usize) -> usize {
        (0..n)
            .filter(|_| {
                lim.check_key_carried(from, "alice", Check::cost(1))
                    .expect("cost 1 fits") // a test: a panic is its failure
                    .is_permitted()
            })
            .count()
    }

    #[test]
    fn a_joined_key_is_checked_without_either_lock() {
        let clock = ManualClock::new();
        let (old, new) = (limiter(&clock, "10/s"), limiter(&clock, "10/s"));
        assert_eq!(allowed(&old, &new, 4), 4, "4 of 10 used on the old limiter");
        assert_eq!(allowed(&new, &old, 1), 1, "joins: carried, then checked");
        // Present in the new limiter and still live in the old one: neither lock.
        let mut left = 0;
        assert!(finishes_while_locked(&[&old, &new], || {
            left = allowed(&new, &old, 10);
        }));
        assert_eq!(
            left, 5,
            "10 − 4 − 1: carried once, nothing lost or counted twice"
        );
    }

    #[test]
    fn a_key_new_to_both_limiters_is_looked_up_without_either_lock() {
        let clock = ManualClock::new();
        let (old, new) = (limiter(&clock, "10/s"), limiter(&clock, "10/s"));
        assert_eq!(allowed(&old, &new, 3), 3, "another key fills a few slots");
        assert!(finishes_while_locked(&[&old, &new], || {
            new.carry_from(&old, "bob");
        }));
        assert_eq!(new.len(), 0, "nothing to carry, nothing placed");
    }

    #[test]
    fn the_lock_free_lookup_answers_only_when_nothing_spilled_or_moved() {
        let clock = ManualClock::new();
        let lim = limiter(&clock, "10/s");
        assert!(lim.check_key("alice").is_permitted());
        let fp = |k: &str| lim.fingerprinter.fingerprint(k);
        let found = lim.fill_lock_free(fp("alice")).expect("settled"); // a test: a panic is its failure
        assert!(found.is_some_and(|(tat, _)| tat > clock.nanos()));
        assert_eq!(lim.fill_lock_free(fp("bob")), Some(None), "absent");

        // A move under way: an absent key cannot be told from one in flight.
        lim.moves.store(1, Ordering::Relaxed);
        assert_eq!(lim.fill_lock_free(fp("bob")), None);
        lim.moves.store(2, Ordering::Relaxed);
        assert_eq!(lim.fill_lock_free(fp("bob")), Some(None));

        // Keys spilled: an absent key may be one of them.
        lim.spilled.store(1, Ordering::Relaxed);
        assert_eq!(lim.fill_lock_free(fp("bob")), None);
        assert!(
            lim.fill_lock_free(fp("alice")).is_some(),
            "found in the table"
        );
        lim.spilled.store(0, Ordering::Relaxed);
    }

    #[test]
    fn a_spilled_key_is_carried_from_under_the_lock() {
        let clock = ManualClock::new();
        let (old, new) = (limiter(&clock, "10/s"), limiter(&clock, "10/s"));
        // Spill "alice" by hand (the table makes room for almost every key, so a test cannot
        // count on one spilling): 7 of her 10 used, as 7 checks would leave her TAT.
        let fp = old.fingerprinter.fingerprint("alice");
        let tat = clock.nanos() + 7 * 100_000_000;
        {
            let mut slow = old.slow.lock();
            slow.spill.insert(fp, tat);
            old.spilled.store(slow.spill.len(), Ordering::Release);
            old.inserted(&mut slow, tat);
        }
        assert_eq!(
            allowed(&new, &old, 10),
            3,
            "her 3 left, carried from the spill"
        );
    }

    #[test]
    fn a_key_carried_with_a_debt_into_a_full_table_is_not_refused_by_admission() {
        let clock = ManualClock::new();
        let old = limiter(&clock, "10/s");
        let new = KeyedRateLimiter::<String>::builder("10/s".parse().expect("a valid quota")) // a test: a panic is its failure
            .clock(clock.clone())
            .max_keys(4)
            .overflow_quota("1/h".parse().expect("a valid quota")) // a test: a panic is its failure
            .build();
        for k in ["a", "b", "c", "d"] {
            assert!(new.check_key(k).is_permitted());
        }
        // The new table is at its cap, its keys idle for 100 ms: a newcomer seen once could
        // not displace them, and the overflow cell is spent.
        assert!(new.check_key("e").is_permitted());
        clock.advance(Duration::from_millis(200));
        assert_eq!(allowed(&old, &new, 7), 7, "7 of 10 used on the old limiter");
        assert_eq!(
            allowed(&new, &old, 10),
            3,
            "her 3 left, carried into an idle key's slot"
        );
        assert_eq!(new.stats().admissions_refused, 1, "only e's");
    }

    #[test]
    fn a_live_key_is_never_missed_while_the_table_moves_it() {
        // A lookup that met a move used to take the key for absent (in about half the
        // rounds here), and a key joining the cohort then started fresh.
        for round in 0..ROUNDS {
            let (lookups, moves, misses) = race_lookups_with_moves();
            println!("round {round}: {lookups} lookups during {moves} moves");
            assert!(moves > 10_000, "the table moved keys: {moves}");
            assert_eq!(misses, 0, "round {round}: a live key taken for absent");
        }
    }

    const ROUNDS: usize = 8;
    const WATCHED: usize = 64;
    const INSERTS: usize = 300_000;

    /// One thread looks up live keys over and over while another inserts keys: the lookups,
    /// the moves, and the lookups that did not find a live key.
    fn race_lookups_with_moves() -> (usize, u64, usize) {
        // Frozen clock, 10 per minute: every key checked stays live for the whole test.
        let clock = ManualClock::at(Duration::from_secs(3_600));
        let lim = limiter(&clock, "10/min");
        let watched: Vec<u64> = (0..WATCHED)
            .map(|i| {
                let k = format!("watched-{i}");
                assert!(lim.check_key(&k).is_permitted());
                lim.fingerprinter.fingerprint(&k)
            })
            .collect();
        let done = AtomicBool::new(false);
        let (lookups, misses) = (AtomicUsize::new(0), AtomicUsize::new(0));
        std::thread::scope(|s| {
            // The table grows from 64 buckets to 100,000: splits and room-making move the
            // watched keys' cells again and again while they are looked up.
            s.spawn(|| {
                for i in 0..INSERTS {
                    assert!(lim.check_key(&format!("new-{i}")).is_permitted());
                }
                done.store(true, Ordering::Release);
            });
            s.spawn(|| {
                while !done.load(Ordering::Acquire) {
                    for &fp in &watched {
                        if lim.live_fill(fp).is_none() {
                            misses.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    lookups.fetch_add(watched.len(), Ordering::Relaxed);
                }
            });
        });
        (
            lookups.into_inner(),
            lim.moves.load(Ordering::Relaxed) / 2,
            misses.into_inner(),
        )
    }
}

//! A keyed slot's TAT word, tagged with its owner: the TAT is stored XOR a mask drawn from the
//! owning key's fingerprint, so a word that changes hands never holds a value its previous
//! owner's checks could have read.
//!
//! # Why
//!
//! A keyed slot changes hands: a sweep or a move kills it (its TAT word becomes
//! [`TOMBSTONE`]) and a later insert gives it to another key. A check reads the TAT word,
//! re-checks the slot's key, then swaps in its new TAT with a compare-and-swap. If, between
//! the re-check and the swap, the slot is killed and handed to a key whose TAT happens to
//! equal the one read (an ABA; with a frozen clock, two keys' TATs coincide readily), a swap
//! on the bare TAT succeeds and charges the new owner for the old key's check. Undoing it
//! afterwards cannot be made sound: the new owner may step over the write before the undo (the
//! old key then gets an allow its own TAT never paid for), or may have been installed with
//! exactly the value written (the undo then hands the new owner what it had used). Both were
//! shown by the loom models `slot_aba_*` in `tests/loom.rs`.
//!
//! With the owner's mask in the word, a check's compare-and-swap expects its own key's
//! encoding: it fails on any other key's word unless `tat_B ⊕ m_B = tat_A ⊕ m_A`, a 64-bit
//! coincidence between two keys' seeded fingerprints and their TATs of the same kind as two
//! live keys sharing a fingerprint, which the table assumes away already. A swap that succeeds
//! landed on its own key's cell, so no undo is needed and the step stands even if the key is
//! moved away right after (it carries the write).
//!
//! # The encoding
//!
//! `mask = (fp >> 1) & !1`: bit 63 and bit 0 clear. The word is `tat ⊕ mask`, except that a
//! TAT whose encoding would be the tombstone (`tat = !mask`, which needs a TAT of 2^63 ns or
//! more: a clock past 2^62 ns, 146 years from its origin) is stored one nanosecond later —
//! never earlier, so the cell never grants. A direct limiter's cell and the overflow cell never
//! change hands: their mask is 0 and the encoding is the identity.

use crate::engine::cell::TOMBSTONE;

/// The mask of the key with fingerprint `fp`'s TAT word (0 for fingerprint 0, which marks
/// never-used slots).
#[inline(always)]
pub(crate) const fn mask_of(fp: u64) -> u64 {
    (fp >> 1) & !1
}

/// The word that stores `tat ≤` [`MAX_TAT`](crate::engine::gcra::MAX_TAT) under `mask`:
/// never the tombstone.
#[inline(always)]
pub(crate) const fn encode(tat: u64, mask: u64) -> u64 {
    let word = tat ^ mask;
    if word == TOMBSTONE {
        // tat = !mask: odd (bit 0 of the mask is clear) and so below MAX_TAT; one later.
        (tat + 1) ^ mask
    } else {
        word
    }
}

/// The TAT stored in the live word `word` under `mask`.
#[inline(always)]
pub(crate) const fn decode(word: u64, mask: u64) -> u64 {
    word ^ mask
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::gcra::MAX_TAT;

    #[test]
    fn the_encoding_round_trips_and_never_makes_a_tombstone() {
        for fp in [0, 1, 2, 3, 4, 0x1234_5678_9abc_def0, u64::MAX, u64::MAX - 1] {
            let m = mask_of(fp);
            assert_eq!(m & (1 << 63 | 1), 0, "mask of {fp:#x}");
            for tat in [0, 1, 100, 1 << 62, (1 << 63) + 1, MAX_TAT - 1, MAX_TAT, !m] {
                if tat > MAX_TAT {
                    continue;
                }
                let word = encode(tat, m);
                assert_ne!(word, TOMBSTONE, "tat {tat:#x} under {m:#x}");
                let back = decode(word, m);
                if tat == !m {
                    assert_eq!(back, tat + 1, "one later, never earlier");
                    assert!(back <= MAX_TAT);
                } else {
                    assert_eq!(back, tat);
                }
            }
        }
    }

    #[test]
    fn two_keys_with_the_same_tat_have_different_words() {
        // The ABA the tag closes: two keys' TATs coincide (a frozen clock), their words do not.
        let (a, b) = (2 << 32 | 2, 12 << 32 | 12);
        let tat = 10_100_000_000;
        assert_ne!(encode(tat, mask_of(a)), encode(tat, mask_of(b)));
        assert_eq!(encode(tat, mask_of(a)), encode(tat, mask_of(a)));
    }
}

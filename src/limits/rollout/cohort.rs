//! Cohort membership: SipHash-1-3 of the key's bytes under a 128-bit seed, the same in every
//! process and on every platform.

use siphasher::sip::SipHasher13;

/// Buckets a key falls into: a key is in the cohort iff its bucket is below the stage's
/// basis points.
pub(crate) const BUCKETS: u64 = 10_000;

/// The cohort hash: SipHash-1-3 (one compression round, three finalization rounds) keyed by
/// a 128-bit seed whose low 64 bits are `k0` and high 64 bits `k1`, over the key's UTF-8
/// bytes. From the `siphasher` crate (checked here against the reference vectors), not
/// `std`, whose hasher is not promised to stay SipHash-1-3, and not `RandomState`, whose keys
/// differ per process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Cohort {
    k0: u64,
    k1: u64,
}

impl Cohort {
    pub(crate) fn new(seed: u128) -> Self {
        Self {
            k0: seed as u64,
            k1: (seed >> 64) as u64,
        }
    }

    /// The key's 64-bit hash.
    #[inline]
    pub(crate) fn hash(&self, key: &str) -> u64 {
        siphash13(self.k0, self.k1, key.as_bytes())
    }

    /// The key's bucket in `0..10_000`.
    #[inline]
    pub(crate) fn bucket_of(hash: u64) -> u16 {
        (hash % BUCKETS) as u16
    }
}

/// SipHash-1-3 of `data` under the key `(k0, k1)`: the bytes alone, as the reference hashes
/// them (`Hasher::write` on a fresh hasher; no length prefix, unlike `Hash for [u8]`).
#[inline]
fn siphash13(k0: u64, k1: u64, data: &[u8]) -> u64 {
    SipHasher13::new_with_keys(k0, k1).hash(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_siphash13_reference() {
        // The reference SipHash-1-3 (github.com/veorq/SipHash) with a zero key over the
        // inputs 00 01 02 … (n − 1).
        let expected: [(usize, u64); 6] = [
            (0, 0xd1fb_a762_150c_532c),
            (1, 0x68a9_1412_8e01_e473),
            (7, 0x2f09_8ab0_c751_325a),
            (8, 0xead4_11e6_7ebe_2eea),
            (15, 0xf30e_b725_bb91_c9ea),
            (36, 0xac77_921f_cc64_2bd3),
        ];
        let input: Vec<u8> = (0..64u8).collect();
        let cohort = Cohort::new(0);
        for (n, want) in expected {
            assert_eq!(
                siphash13(cohort.k0, cohort.k1, &input[..n]),
                want,
                "length {n}"
            );
        }
    }

    #[test]
    fn keeps_the_outputs_of_the_hand_written_implementation() {
        // Before `siphasher`, this module had its own SipHash-1-3; these are its outputs under the
        // specification's test key 00 01 … 0f (k0 = 0x0706…00, k1 = 0x0f0e…08) over the
        // inputs 00 01 02 … (n − 1): every key keeps its cohort under every seed.
        let expected: [(usize, u64); 10] = [
            (0, 0xabac_0158_050f_c4dc),
            (1, 0xc9f4_9bf3_7d57_ca93),
            (7, 0xd392_7d98_9bb1_1140),
            (8, 0x3690_9511_8d29_9a8e),
            (15, 0xd320_d86d_2a51_9956),
            (16, 0xcc4f_dd1a_7d90_8b66),
            (36, 0x2cf5_08d3_ada2_6206),
            (63, 0x9d19_9062_b7bb_b3a8),
            (64, 0xf179_97ec_4b4a_6065),
            (255, 0xf762_14e3_153c_4a15),
        ];
        let input: Vec<u8> = (0..=255u8).collect();
        let cohort = Cohort::new(0x0f0e_0d0c_0b0a_0908_0706_0504_0302_0100);
        for (n, want) in expected {
            assert_eq!(
                siphash13(cohort.k0, cohort.k1, &input[..n]),
                want,
                "length {n}"
            );
        }
        // Through `hash`, on a key's UTF-8 bytes (bytes below 0x80 are one character each).
        let key = core::str::from_utf8(&input[..36]).expect("ASCII"); // a test: a panic is its failure
        assert_eq!(cohort.hash(key), 0x2cf5_08d3_ada2_6206);
    }

    #[test]
    fn zero_key_agrees_with_std_today() {
        // std's DefaultHasher is SipHash-1-3 with a zero key today (not promised, so this
        // only cross-checks the implementation; the reference vectors above are the contract).
        use std::hash::Hasher;
        for n in [0usize, 3, 8, 13, 200] {
            let data: Vec<u8> = (0..n).map(|i| (i * 7) as u8).collect();
            let mut h = std::hash::DefaultHasher::new();
            h.write(&data);
            assert_eq!(siphash13(0, 0, &data), h.finish(), "length {n}");
        }
    }
}

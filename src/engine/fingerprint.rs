//! Seeded 64-bit key fingerprints for the keyed table.
//!
//! Keys are attacker-controlled, so placement must not be predictable: every limiter draws
//! fresh seeds from [`std::hash::RandomState`]. A key that hashes as one integer (`u64`,
//! `u32`, `i64`, `usize`, …) is mapped through a seeded bijection — distinct integers never
//! share a fingerprint. Anything else (strings, tuples, structs) goes through SipHash-1-3
//! keyed with 128 random bits.

use core::hash::{BuildHasher, Hash, Hasher};
use std::collections::hash_map::RandomState;
use std::hash::DefaultHasher;

/// Per-limiter seeds.
#[derive(Debug)]
pub(crate) struct Fingerprinter {
    sip: RandomState,
    k0: u64,
    k1: u64,
}

impl Fingerprinter {
    pub(crate) fn new() -> Self {
        let sip = RandomState::new();
        let k0 = sip.hash_one(0x746f_6c6c_6761_7465_u64);
        let k1 = sip.hash_one(k0) | 1;
        Self { sip, k0, k1 }
    }

    /// The fingerprint of `key`.
    #[inline]
    pub(crate) fn fingerprint<Q: Hash + ?Sized>(&self, key: &Q) -> u64 {
        let mut h = KeyHasher {
            seeds: self,
            first: None,
            sip: None,
        };
        key.hash(&mut h);
        h.finish()
    }

    /// [`fingerprint`](Self::fingerprint) of a `str` (or a `String`), in one SipHash pass:
    /// `str` hashes as its bytes and then `0xff`, which [`KeyHasher`] writes as a `u64`.
    #[cfg_attr(not(feature = "tower"), allow(dead_code))] // reason: the gateway layer's
    #[inline]
    pub(crate) fn fingerprint_str(&self, key: &str) -> u64 {
        let mut sip = self.sip.build_hasher();
        sip.write(key.as_bytes());
        sip.write_u64(0xff);
        sip.finish()
    }

    /// A seeded bijection on u64 (the splitmix64 finalizer around seeded xor and multiply:
    /// every step is invertible).
    #[cfg(not(loom))]
    #[inline]
    fn mix(&self, x: u64) -> u64 {
        let mut z = (x ^ self.k0).wrapping_mul(self.k1);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Under loom an integer key is its own fingerprint: loom replays every schedule and needs
    /// each run to touch the same slots (random seeds would not), and a model places its keys
    /// in the buckets it means to (the low and high 32 bits name the two candidate buckets).
    #[cfg(loom)]
    #[inline]
    fn mix(&self, x: u64) -> u64 {
        let _ = (self.k0, self.k1);
        x
    }
}

struct KeyHasher<'a> {
    seeds: &'a Fingerprinter,
    /// The first word, while it is the only one written.
    first: Option<u64>,
    /// SipHash, once anything but a single word has been written.
    sip: Option<DefaultHasher>,
}

impl KeyHasher<'_> {
    /// Switches to SipHash, replaying a buffered single word.
    fn sip(&mut self) -> &mut DefaultHasher {
        let (seeds, first) = (self.seeds, &mut self.first);
        self.sip.get_or_insert_with(|| {
            let mut sip = seeds.sip.build_hasher();
            if let Some(x) = first.take() {
                sip.write_u64(x);
            }
            sip
        })
    }
}

impl Hasher for KeyHasher<'_> {
    #[inline]
    fn write_u64(&mut self, x: u64) {
        if self.first.is_none() && self.sip.is_none() {
            self.first = Some(x);
        } else {
            self.sip().write_u64(x);
        }
    }

    #[inline]
    fn write_u32(&mut self, x: u32) {
        self.write_u64(u64::from(x));
    }

    #[inline]
    fn write_u16(&mut self, x: u16) {
        self.write_u64(u64::from(x));
    }

    #[inline]
    fn write_u8(&mut self, x: u8) {
        self.write_u64(u64::from(x));
    }

    #[inline]
    fn write_usize(&mut self, x: usize) {
        self.write_u64(x as u64);
    }

    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        // Raw bytes always take the SipHash path, so a string never takes the bijection.
        self.sip().write(bytes);
    }

    #[inline]
    fn finish(&self) -> u64 {
        match (&self.sip, self.first) {
            (Some(sip), _) => sip.finish(),
            (None, Some(x)) => self.seeds.mix(x),
            (None, None) => self.seeds.mix(0) ^ self.seeds.k1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_never_collide_and_strings_differ() {
        let f = Fingerprinter::new();
        let mut seen = std::collections::HashSet::new();
        for k in 0u64..100_000 {
            assert!(seen.insert(f.fingerprint(&k)));
        }
        assert_ne!(f.fingerprint("a"), f.fingerprint("b"));
        assert_eq!(f.fingerprint("abc"), f.fingerprint(&String::from("abc")));
        for s in [
            "",
            "a",
            "key-17",
            "a much longer key than a single sip block holds",
        ] {
            assert_eq!(f.fingerprint_str(s), f.fingerprint(s), "{s:?}");
        }
    }

    #[test]
    fn seeds_differ_between_limiters() {
        let (a, b) = (Fingerprinter::new(), Fingerprinter::new());
        assert_ne!(a.fingerprint(&1u64), b.fingerprint(&1u64));
    }
}

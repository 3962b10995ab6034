//! Seeded 64-bit key fingerprints for the keyed table.
//!
//! Keys are attacker-controlled, so placement must not be predictable: every limiter draws
//! fresh seeds from [`std::hash::RandomState`]. A key that hashes as one integer (`u64`,
//! `u32`, `i64`, `usize`, …) is mapped through a seeded bijection — distinct integers never
//! share a fingerprint. Anything else (strings, tuples, structs) goes through SipHash-1-3
//! keyed with 128 random bits (the `siphasher` crate's, with keys of our own, so that a
//! string, the common key, can also be hashed in one pass to the same value: [`sip13_str`]).

use core::hash::{BuildHasher, Hash, Hasher};
use std::collections::hash_map::RandomState;

use siphasher::sip::SipHasher13;

/// Per-limiter seeds.
#[derive(Debug)]
pub(crate) struct Fingerprinter {
    /// SipHash-1-3's 128-bit key.
    s0: u64,
    s1: u64,
    /// The integer bijection's seeds.
    k0: u64,
    k1: u64,
}

impl Fingerprinter {
    pub(crate) fn new() -> Self {
        // `RandomState` draws from the OS's randomness once per process and varies it per
        // instance: four words from a fresh one.
        let r = RandomState::new();
        let s0 = r.hash_one(0x746f_6c6c_6761_7465_u64);
        let s1 = r.hash_one(s0);
        let k0 = r.hash_one(s1);
        let k1 = r.hash_one(k0) | 1;
        Self { s0, s1, k0, k1 }
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

    /// [`fingerprint`](Self::fingerprint) of the `str` (or `String`) whose UTF-8 is `key`, in
    /// one pass: a `str` hashes as its bytes and then the byte `0xff` (see [`sip13_str`]).
    #[cfg_attr(not(feature = "tower"), allow(dead_code))] // reason: the gateway layer's
    #[inline]
    pub(crate) fn fingerprint_utf8(&self, key: &[u8]) -> u64 {
        sip13_str(self.s0, self.s1, key)
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

/// SipHash-1-3 under the key `(k0, k1)` of `bytes` followed by the byte `0xff` — what a
/// streaming SipHash-1-3 gives for a `str` (its `Hash` writes the bytes, then `0xff`) — in
/// one pass over whole 8-byte words with no buffering. The reference algorithm (Aumasson and
/// Bernstein), checked against the `siphasher` crate's streaming hasher in the tests.
#[cfg_attr(not(feature = "tower"), allow(dead_code))] // reason: the gateway layer's
#[inline]
pub(crate) fn sip13_str(k0: u64, k1: u64, bytes: &[u8]) -> u64 {
    let mut v = [
        k0 ^ 0x736f_6d65_7073_6575,
        k1 ^ 0x646f_7261_6e64_6f6d,
        k0 ^ 0x6c79_6765_6e65_7261,
        k1 ^ 0x7465_6462_7974_6573,
    ];
    let mut words = bytes.chunks_exact(8);
    for w in &mut words {
        let mut m = [0u8; 8];
        m.copy_from_slice(w);
        compress(&mut v, u64::from_le_bytes(m));
    }
    // The last word: the tail, then 0xff, then zeros, with the length (the 0xff counted) in
    // its top byte. A tail of 7 bytes fills a word with the 0xff: one more word follows.
    let tail = words.remainder();
    let len = (bytes.len() as u64).wrapping_add(1); // reason: only its low byte counts
    let mut m = [0u8; 8];
    m[..tail.len()].copy_from_slice(tail);
    if tail.len() == 7 {
        m[7] = 0xff;
        compress(&mut v, u64::from_le_bytes(m));
        compress(&mut v, (len & 0xff) << 56);
    } else {
        m[tail.len()] = 0xff;
        compress(&mut v, u64::from_le_bytes(m) | (len & 0xff) << 56);
    }
    v[2] ^= 0xff;
    round(&mut v);
    round(&mut v);
    round(&mut v);
    v[0] ^ v[1] ^ v[2] ^ v[3]
}

#[inline(always)]
fn compress(v: &mut [u64; 4], m: u64) {
    v[3] ^= m;
    round(v);
    v[0] ^= m;
}

#[inline(always)]
fn round(v: &mut [u64; 4]) {
    v[0] = v[0].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(13) ^ v[0];
    v[0] = v[0].rotate_left(32);
    v[2] = v[2].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(16) ^ v[2];
    v[0] = v[0].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(21) ^ v[0];
    v[2] = v[2].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(17) ^ v[2];
    v[2] = v[2].rotate_left(32);
}

struct KeyHasher<'a> {
    seeds: &'a Fingerprinter,
    /// The first word, while it is the only one written.
    first: Option<u64>,
    /// SipHash, once anything but a single word has been written.
    sip: Option<SipHasher13>,
}

impl KeyHasher<'_> {
    /// Switches to SipHash, replaying a buffered single word.
    fn sip(&mut self) -> &mut SipHasher13 {
        let (seeds, first) = (self.seeds, &mut self.first);
        self.sip.get_or_insert_with(|| {
            let mut sip = SipHasher13::new_with_keys(seeds.s0, seeds.s1);
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

    // A narrower integer is the first word as a u64 (so `1u8` and `1u64` share the
    // bijection), and its own width once SipHash has started: `str` ends with `0xff` as a
    // `u8`, which keeps a short string within one SipHash block.
    #[inline]
    fn write_u32(&mut self, x: u32) {
        match &mut self.sip {
            Some(sip) => sip.write_u32(x),
            None => self.write_u64(u64::from(x)),
        }
    }

    #[inline]
    fn write_u16(&mut self, x: u16) {
        match &mut self.sip {
            Some(sip) => sip.write_u16(x),
            None => self.write_u64(u64::from(x)),
        }
    }

    #[inline]
    fn write_u8(&mut self, x: u8) {
        match &mut self.sip {
            Some(sip) => sip.write_u8(x),
            None => self.write_u64(u64::from(x)),
        }
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
            assert_eq!(f.fingerprint_utf8(s.as_bytes()), f.fingerprint(s), "{s:?}");
        }
    }

    #[test]
    fn the_one_pass_str_hash_is_streaming_siphash_1_3() {
        // Every tail length, several whole words, arbitrary bytes, several keys.
        let bytes: Vec<u8> = (0..80u32)
            .map(|i| (i.wrapping_mul(151) ^ 0x5a).to_le_bytes()[0])
            .collect();
        for (k0, k1) in [(0, 0), (1, 2), (u64::MAX, 0x0123_4567_89ab_cdef)] {
            for n in 0..bytes.len() {
                let mut h = SipHasher13::new_with_keys(k0, k1);
                h.write(&bytes[..n]);
                h.write_u8(0xff);
                assert_eq!(sip13_str(k0, k1, &bytes[..n]), h.finish(), "{n} bytes");
            }
        }
    }

    #[test]
    fn seeds_differ_between_limiters() {
        let (a, b) = (Fingerprinter::new(), Fingerprinter::new());
        assert_ne!(a.fingerprint(&1u64), b.fingerprint(&1u64));
    }
}

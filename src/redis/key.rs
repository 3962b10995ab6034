//! Keys: `prefix:policy:{customer}`, every key of one customer in one cluster slot. A policy
//! name holds no `:` (a prefix may), so a key names one prefix and one policy.
//!
//! The customer part is attacker-controlled. It is escaped so that the hash tag (the bytes
//! between the first `{` and the next `}`) is always exactly the escaped customer and never
//! empty: `%` becomes `%25`, `}` becomes `%7D`, and the empty key is written `%` (which no
//! escaped key can be). The escaping is injective, so two customers never share a key.

/// The longest customer key accepted, in bytes (before escaping).
pub(crate) const MAX_KEY_BYTES: usize = 512;

/// The longest prefix or policy name.
const MAX_NAME_BYTES: usize = 64;

/// `true` if `name` may be a prefix (or, without a `:`, a policy name).
pub(crate) fn valid_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= MAX_NAME_BYTES && !name.contains(['{', '}'])
}

/// `true` if `name` may be a policy name: a [`valid_name`] without `:`. The policy is the last
/// segment before the customer, so a `:` in it would let two deployments share keys (prefix
/// `svc` with policy `a:b`, prefix `svc:a` with policy `b`). Refused rather than escaped:
/// escaping would rename existing keys, a fresh burst for every customer on upgrade. A prefix
/// keeps its `:`s: `svc:a` is a legitimate namespace, and with colon-free policies the prefix
/// is unambiguously everything before the key's last-but-one `:` ahead of `{`.
pub(crate) fn valid_policy(name: &str) -> bool {
    valid_name(name) && !name.contains(':')
}

/// `prefix:policy:{`: the part of a key before the customer.
pub(crate) fn head(prefix: &str, policy: &str) -> Vec<u8> {
    format!("{prefix}:{policy}:{{").into_bytes()
}

/// The key of `customer` under `head`.
pub(crate) fn key(head: &[u8], customer: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(head.len() + customer.len() + 2);
    k.extend_from_slice(head);
    if customer.is_empty() {
        k.push(b'%');
    }
    for &b in customer {
        match b {
            b'%' => k.extend_from_slice(b"%25"),
            b'}' => k.extend_from_slice(b"%7D"),
            _ => k.push(b),
        }
    }
    k.push(b'}');
    k
}

/// How many slots a Redis Cluster has.
pub(crate) const SLOTS: u16 = 16384;

/// The cluster slot of `key`: CRC16 (XMODEM) of its hash tag, modulo 16384 — what Redis
/// computes (`CLUSTER KEYSLOT`). The `redis` crate routes by it but does not expose it; the
/// limiter needs it only to pick a breaker.
pub(crate) fn slot(key: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in hash_tag(key) {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % SLOTS
}

/// The hash tag Redis Cluster hashes `key` by: the bytes between the first `{` and the next
/// `}` when they are not empty, else the whole key.
pub(crate) fn hash_tag(key: &[u8]) -> &[u8] {
    if let Some(open) = key.iter().position(|&b| b == b'{') {
        if let Some(len) = key[open + 1..].iter().position(|&b| b == b'}') {
            if len > 0 {
                return &key[open + 1..open + 1 + len];
            }
        }
    }
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_customer_gets_a_non_empty_tag_of_its_own() {
        let (a, b) = (head("tg", "api"), head("tg", "daily"));
        let customers: [&[u8]; 7] = [b"", b"}", b"{", b"%", b"%7D", b"a}b{c", b"{x}"];
        let mut tags = Vec::new();
        for c in customers {
            let (ka, kb) = (key(&a, c), key(&b, c));
            assert_eq!(hash_tag(&ka), hash_tag(&kb), "{c:?}");
            assert!(!hash_tag(&ka).is_empty() && hash_tag(&ka).len() < ka.len());
            tags.push(hash_tag(&ka).to_vec());
        }
        tags.sort();
        tags.dedup();
        assert_eq!(tags.len(), customers.len(), "escaping is injective");
        assert_eq!(key(&a, b"x}y"), b"tg:api:{x%7Dy}".to_vec());
    }

    /// Prefix `svc` with policy `a:b` and prefix `svc:a` with policy `b` once gave the
    /// same keys. With `:` refused in policies (and allowed in prefixes), the part of a key
    /// before its first `{` is `prefix:policy:`, the policy is what stands between its last
    /// two `:`, so a key names one prefix, one policy and one customer.
    #[test]
    fn prefixes_with_colons_and_policies_without_never_collide() {
        assert!(!valid_policy("a:b") && !valid_policy(":") && !valid_policy("a:"));
        assert!(valid_policy("a") && valid_name("svc:a") && valid_name("a:b"));
        let prefixes = ["svc", "svc:a", "svc:a:b", "a", ":", "svc:", ":svc", "s%v"];
        let policies = ["a", "b", "a%3Ab", "ab", "default", "%"];
        let customers: [&[u8]; 8] = [b"", b"b", b"a:b", b":", b"{c}", b"b:{c}", b"%", b"}"];
        let mut seen = std::collections::HashMap::new();
        for prefix in prefixes {
            assert!(valid_name(prefix), "{prefix}");
            for policy in policies {
                assert!(valid_policy(policy), "{policy}");
                for customer in customers {
                    let k = key(&head(prefix, policy), customer);
                    let (p, q, _) = split(&k);
                    assert_eq!((p, q), (prefix, policy), "{k:?} read back");
                    if let Some(other) = seen.insert(k.clone(), (prefix, policy, customer)) {
                        panic!("{k:?}: {other:?} and {:?}", (prefix, policy, customer));
                    }
                }
            }
        }
    }

    /// Reads a key back: prefix, policy, escaped customer.
    fn split(k: &[u8]) -> (&str, &str, &[u8]) {
        let open = k.iter().position(|&b| b == b'{').unwrap(); // a test: a panic is its failure
        let before = core::str::from_utf8(&k[..open - 1]).unwrap(); // without the last ':' (a test: a panic is its failure)
        let (prefix, policy) = before.rsplit_once(':').unwrap(); // a test: a panic is its failure
        (prefix, policy, &k[open..])
    }

    /// The reference value of the Redis Cluster specification (CRC16 of `123456789` is
    /// 0x31C3) and slots `CLUSTER KEYSLOT` gave on Redis 7.0.15.
    #[test]
    fn slots_are_those_redis_computes() {
        assert_eq!(slot(b"123456789"), 0x31C3);
        for (k, want) in REDIS_KEYSLOTS {
            assert_eq!(slot(k), *want, "{:?}", String::from_utf8_lossy(k));
        }
    }

    const REDIS_KEYSLOTS: &[(&[u8], u16)] = &[
        (b"foo", 12182),
        (b"somekey", 11058),
        (b"{user1000}.following", 3443),
        (b"tollgate:default:{alice}", 749),
        (b"gw:api:{c%7D7}", 15244),
        (b"x{}y", 16116),
        (b"{a}{b}", 15495),
        (b"a{b", 13340),
        (b"%", 13511),
        (b"tg:api:{%}", 13511),
    ];

    #[test]
    fn names_with_braces_are_refused() {
        assert!(valid_name("tollgate"));
        assert!(!valid_name("a{b") && !valid_name("a}b") && !valid_name(""));
        assert!(!valid_name(&"x".repeat(65)));
    }
}

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

/// The hash tag Redis Cluster hashes `key` by: the bytes between the first `{` and the next
/// `}` when they are not empty, else the whole key.
#[cfg(test)]
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

    /// Issue 18: prefix `svc` with policy `a:b` and prefix `svc:a` with policy `b` gave the
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
        let open = k.iter().position(|&b| b == b'{').unwrap();
        let before = core::str::from_utf8(&k[..open - 1]).unwrap(); // without the last ':'
        let (prefix, policy) = before.rsplit_once(':').unwrap();
        (prefix, policy, &k[open..])
    }

    #[test]
    fn names_with_braces_are_refused() {
        assert!(valid_name("tollgate"));
        assert!(!valid_name("a{b") && !valid_name("a}b") && !valid_name(""));
        assert!(!valid_name(&"x".repeat(65)));
    }
}

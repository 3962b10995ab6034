//! The key layout `prefix:policy:{customer}` across deployments: a policy name may
//! not hold `:`, so two deployments with different prefixes never share a key. No server is
//! needed: the builder connects lazily and `keys` computes locally.
#![cfg(feature = "redis")]

use tollgate::redis::{BackendError, SharedRateLimiter};
use tollgate::Quota;

fn q(s: &str) -> Quota {
    s.parse().unwrap()
}

fn build(prefix: &str, policy: &str) -> Result<SharedRateLimiter, BackendError> {
    SharedRateLimiter::builder(q("10/s"), "redis://127.0.0.1:1/")
        .prefix(prefix)
        .policy(policy)
        .build()
}

/// Prefix `svc` with policy `a:b` and prefix `svc:a` with policy `b` both wrote
/// `svc:a:b:{cust}`: two deployments sharing one customer's limit.
#[tokio::test(flavor = "current_thread")]
async fn a_colon_in_a_policy_is_refused_so_deployments_never_share_keys() {
    let err = build("svc", "a:b").unwrap_err();
    assert!(
        matches!(&err, BackendError::ColonInPolicy(p) if p == "a:b"),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        r#"invalid policy "a:b": a policy name may not contain ':' (keys are prefix:policy:{customer}, so it would share keys with another prefix)"#
    );
    // The extra limits follow the same rule.
    let err = SharedRateLimiter::builder(q("10/s"), "redis://127.0.0.1:1/")
        .limit("daily:eu", q("1000/d"))
        .build()
        .unwrap_err();
    assert!(
        matches!(&err, BackendError::ColonInPolicy(p) if p == "daily:eu"),
        "{err:?}"
    );
    // The other deployment's prefix keeps its `:`, and its keys are its own.
    let b = build("svc:a", "b").unwrap();
    let a = build("svc", "a").unwrap();
    assert_eq!(b.keys("cust"), [b"svc:a:b:{cust}".to_vec()]);
    assert_eq!(a.keys("cust"), [b"svc:a:{cust}".to_vec()]);
}

/// A name that breaks the layout otherwise (braces, over 64 bytes) keeps its own error.
#[tokio::test(flavor = "current_thread")]
async fn braces_and_length_are_checked_before_the_colon() {
    for bad in ["a:{b}".to_owned(), format!("{}:x", "p".repeat(64))] {
        assert!(
            matches!(
                build("svc", &bad).unwrap_err(),
                BackendError::InvalidName { what: "policy", .. }
            ),
            "{bad}"
        );
    }
}

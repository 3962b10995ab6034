//! `rediss://`: a TLS-only `redis-server` of the test's own with a CA and
//! certificates made here. The right CA decides as plain Redis does; `#insecure` skips the
//! check as the `redis` crate documents; a wrong CA, no CA (the platform's roots do not hold
//! ours) and a missing client certificate are typed errors at the first check — never
//! fallback verdicts, whatever the failure policy — counted as `tls_failures`.
#![cfg(all(feature = "redis", not(loom)))]

#[path = "common/secure_redis.rs"]
mod secure_redis;

use std::time::Duration;

use secure_redis::{Pki, Server};
use tollgate::redis::{BackendError, FailurePolicy, SharedRateLimiter};
use tollgate::Verdict;

/// Far above a loopback handshake on a loaded machine: a check that failed on a certificate
/// must have failed on it, not on the deadline.
const DEADLINE: Duration = Duration::from_secs(2);

fn builder(url: &str, policy: FailurePolicy) -> tollgate::redis::SharedRateLimiterBuilder {
    SharedRateLimiter::builder("2/s".parse().unwrap(), url)
        .deadline(DEADLINE)
        .failure_policy(policy)
}

fn url(s: &Server) -> String {
    format!("rediss://127.0.0.1:{}/", s.port)
}

/// Redis decides: the burst of 2, then a denial, all three by Redis.
async fn decides(lim: &SharedRateLimiter) {
    let key = "customer";
    for i in 0..2 {
        let v = lim.check_key(key).await.unwrap();
        assert!(matches!(v, Verdict::Allow(_)), "check {i}: {v:?}");
    }
    let v = lim.check_key(key).await.unwrap();
    assert!(matches!(v, Verdict::Deny(_)), "{v:?}");
    let s = lim.stats();
    assert_eq!((s.allowed, s.denied, s.fallbacks()), (2, 1, 0), "{s:?}");
    assert_eq!(s.tls_failures, 0, "{s:?}");
}

/// Every one of `n` checks is the certificate error; none is a verdict, nothing else counted.
async fn refused_on_certificate(lim: &SharedRateLimiter, n: u64, needle: &str) {
    for i in 0..n {
        match lim.check_key("customer").await {
            Err(e @ BackendError::CertificateVerification(_)) => {
                let m = e.to_string();
                assert!(
                    m.starts_with("tls certificate verification failed: "),
                    "{m}"
                );
                assert!(m.contains(needle), "check {i}: {m:?} lacks {needle:?}");
            }
            other => panic!("check {i}: {other:?}"),
        }
    }
    let s = lim.stats();
    assert_eq!((s.tls_failures, s.round_trips), (n, n), "{s:?}");
    let others = (
        s.timeouts,
        s.refused,
        s.errors,
        s.auth_failures,
        s.permission_denied,
    );
    assert_eq!(others, (0, 0, 0, 0, 0), "counted apart: {s:?}");
    assert_eq!(
        (s.total(), s.fallbacks(), s.breaker_rejected),
        (0, 0, 0),
        "{s:?}"
    );
    assert!(!lim.breaker_open(), "a misconfiguration is not an outage");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_right_ca_decides_as_plain_redis_does() {
    let pki = Pki::new("tollgate test CA");
    let Some(s) = Server::tls("tls_right_ca", &pki, false) else {
        return;
    };
    let lim = builder(&url(&s), FailurePolicy::Local)
        .tls_root_ca(pki.ca.as_bytes())
        .build()
        .unwrap();
    decides(&lim).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insecure_skips_the_certificate_check_as_the_redis_crate_documents() {
    let pki = Pki::new("tollgate test CA");
    let Some(s) = Server::tls("tls_insecure", &pki, false) else {
        return;
    };
    let lim = builder(&format!("{}#insecure", url(&s)), FailurePolicy::Local)
        .build()
        .unwrap();
    decides(&lim).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unrelated_ca_is_a_certificate_error_not_a_fallback() {
    let pki = Pki::new("tollgate test CA");
    let other = Pki::new("another CA");
    let Some(s) = Server::tls("tls_unrelated_ca", &pki, false) else {
        return;
    };
    // Open would let every check through: it must not be asked.
    let lim = builder(&url(&s), FailurePolicy::Open)
        .tls_root_ca(other.ca.as_bytes())
        .build()
        .unwrap();
    refused_on_certificate(&lim, 10, "UnknownIssuer").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_ca_is_a_certificate_error_with_the_platform_roots() {
    let pki = Pki::new("tollgate test CA");
    let Some(s) = Server::tls("tls_no_ca", &pki, false) else {
        return;
    };
    let lim = builder(&url(&s), FailurePolicy::Local).build().unwrap();
    refused_on_certificate(&lim, 3, "UnknownIssuer").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_asks_for_client_certificates_gets_ours() {
    let pki = Pki::new("tollgate test CA");
    let Some(s) = Server::tls("tls_client_cert", &pki, true) else {
        return;
    };
    let lim = builder(&url(&s), FailurePolicy::Local)
        .tls_root_ca(pki.ca.as_bytes())
        .tls_client_cert(pki.client.cert.as_bytes(), pki.client.key.as_bytes())
        .build()
        .unwrap();
    decides(&lim).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_client_certificate_is_a_certificate_error() {
    let pki = Pki::new("tollgate test CA");
    let Some(s) = Server::tls("tls_no_client_cert", &pki, true) else {
        return;
    };
    let lim = builder(&url(&s), FailurePolicy::Closed)
        .tls_root_ca(pki.ca.as_bytes())
        .build()
        .unwrap();
    refused_on_certificate(&lim, 3, "client certificate").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_of_another_ca_is_a_certificate_error() {
    let pki = Pki::new("tollgate test CA");
    let other = Pki::new("another CA");
    let Some(s) = Server::tls("tls_foreign_client_cert", &pki, true) else {
        return;
    };
    let lim = builder(&url(&s), FailurePolicy::Local)
        .tls_root_ca(pki.ca.as_bytes())
        .tls_client_cert(other.client.cert.as_bytes(), other.client.key.as_bytes())
        .build()
        .unwrap();
    refused_on_certificate(&lim, 3, "client certificate").await;
}

/// A server whose only cipher rustls does not offer (CBC, TLS 1.2): the handshake fails on
/// something other than a certificate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_cipher_in_common_is_a_tls_error() {
    let pki = Pki::new("tollgate test CA");
    let old = [
        "--tls-protocols",
        "TLSv1.2",
        "--tls-ciphers",
        "ECDHE-ECDSA-AES128-SHA",
    ];
    let Some(s) = Server::tls_with("tls_no_cipher", &pki, false, &old) else {
        return;
    };
    let lim = builder(&url(&s), FailurePolicy::Open)
        .tls_root_ca(pki.ca.as_bytes())
        .build()
        .unwrap();
    match lim.check_key("customer").await {
        Err(e @ BackendError::Tls(_)) => {
            assert!(e.to_string().starts_with("tls handshake failed: "), "{e}")
        }
        other => panic!("{other:?}"),
    }
    let s = lim.stats();
    assert_eq!(
        (s.tls_failures, s.fallbacks(), s.refused),
        (1, 0, 0),
        "{s:?}"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn bad_certificates_and_keys_are_refused_at_build() {
    let pki = Pki::new("tollgate test CA");
    let other = Pki::new("another CA");
    let url = "rediss://127.0.0.1:1/";
    let build = |b: tollgate::redis::SharedRateLimiterBuilder| b.build().map(|_| ()).unwrap_err();

    let e = build(builder(url, FailurePolicy::Local).tls_root_ca(b"garbage"));
    assert!(
        matches!(
            e,
            BackendError::InvalidTls {
                what: "root ca",
                ..
            }
        ),
        "{e}"
    );
    // A key that is not the certificate's.
    let e = build(
        builder(url, FailurePolicy::Local)
            .tls_client_cert(pki.client.cert.as_bytes(), other.client.key.as_bytes()),
    );
    assert!(
        matches!(
            e,
            BackendError::InvalidTls {
                what: "client certificate",
                ..
            }
        ),
        "{e}"
    );
    let e = build(
        builder(url, FailurePolicy::Local)
            .tls_client_cert(pki.client.cert.as_bytes(), pki.client.cert.as_bytes()),
    );
    assert!(
        matches!(
            e,
            BackendError::InvalidTls {
                what: "client key",
                ..
            }
        ),
        "{e}"
    );
    assert!(
        !e.to_string().contains("BEGIN"),
        "no PEM in the message: {e}"
    );
    // TLS settings with a plain URL would be ignored: refused.
    let e =
        build(builder("redis://127.0.0.1:1/", FailurePolicy::Local).tls_root_ca(pki.ca.as_bytes()));
    assert!(matches!(e, BackendError::InvalidSetting(_)), "{e}");
}

/// The shared concurrency limiter over the same TLS: the right CA takes and gives back
/// slots; an unrelated CA is the certificate error at the acquire, never a fallback permit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_concurrency_limiter_speaks_tls_and_refuses_a_wrong_ca() {
    use std::num::NonZeroU32;
    use tollgate::redis::{AcquireError, SharedConcurrencyLimiter};
    let pki = Pki::new("tollgate test CA");
    let Some(s) = Server::tls("tls_conc", &pki, false) else {
        return;
    };
    let build = |ca: &str| {
        SharedConcurrencyLimiter::builder(NonZeroU32::new(1).unwrap(), &url(&s))
            .deadline(DEADLINE)
            .failure_policy(FailurePolicy::Open)
            .tls_root_ca(ca.as_bytes())
            .build()
            .unwrap()
    };
    let lim = build(&pki.ca);
    let held = lim.try_acquire_key("customer").await.unwrap();
    assert!(held.is_shared());
    assert!(matches!(
        lim.try_acquire_key("customer").await,
        Err(AcquireError::Saturated(_))
    ));
    drop(held);
    lim.flush().await;
    assert_eq!(lim.in_flight_key("customer").await.unwrap(), Some(0));
    let other = Pki::new("another CA");
    let wrong = build(&other.ca);
    match wrong.try_acquire_key("customer").await {
        Err(AcquireError::Backend(BackendError::CertificateVerification(_))) => {}
        other => panic!("{other:?}"),
    }
    let st = wrong.stats();
    assert_eq!((st.misconfigured, st.fallbacks()), (1, 0), "{st:?}");
}

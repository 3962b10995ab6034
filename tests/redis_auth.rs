//! Passwords and ACL users: a `redis-server` of the test's own with `requirepass`
//! or ACL users. The right credentials decide; a wrong or missing password is
//! `BackendError::Authentication`, an ACL user without a command the check needs (or without
//! its keys) `BackendError::Permission` — at the first check, never fallback verdicts,
//! counted apart. The README's minimal ACL is the one tested here.
#![cfg(all(feature = "redis", not(loom)))]

#[path = "common/secure_redis.rs"]
mod secure_redis;

use std::time::Duration;

use secure_redis::Server;
use tollgate::redis::{BackendError, FailurePolicy, SharedRateLimiter};
use tollgate::Verdict;

const DEADLINE: Duration = Duration::from_secs(2);
const PASSWORD: &str = "s3cret-pw";
const PREFIX: &str = "gw";

/// The Redis guide's minimal ACL for the prefix `gw` (read from docs/redis.md itself, so the two
/// cannot drift apart), without the rules in `except`.
fn minimal_acl(except: &str) -> Vec<String> {
    let readme = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/redis.md"))
        .lines()
        .find_map(|l| l.trim().strip_prefix("ACL SETUSER tollgate "))
        .expect("docs/redis.md gives the minimal ACL")
        .replace("PASSWORD", PASSWORD);
    assert!(readme.contains(&format!("~{PREFIX}:*")), "{readme}");
    readme
        .split(' ')
        .filter(|w| *w != except)
        .map(String::from)
        .collect()
}

fn limiter(url: &str) -> SharedRateLimiter {
    SharedRateLimiter::builder("2/s".parse().unwrap(), url)
        .prefix(PREFIX)
        .deadline(DEADLINE)
        // Open would let every check through: it must not be asked.
        .failure_policy(FailurePolicy::Open)
        .build()
        .unwrap()
}

/// Redis decides: the burst of 2, then a denial.
async fn decides(lim: &SharedRateLimiter, key: &str) {
    for i in 0..2 {
        let v = lim.check_key(key).await.unwrap();
        assert!(matches!(v, Verdict::Allow(_)), "check {i}: {v:?}");
    }
    let v = lim.check_key(key).await.unwrap();
    assert!(matches!(v, Verdict::Deny(_)), "{v:?}");
    assert_eq!(lim.stats().fallbacks(), 0, "{:?}", lim.stats());
}

/// `n` checks, each the error `want` names; counted in its own counter only.
async fn refused(lim: &SharedRateLimiter, n: u64, want: fn(&BackendError) -> bool, words: &str) {
    for i in 0..n {
        match lim.check_key("customer").await {
            Err(e) if want(&e) => {
                let m = e.to_string();
                assert!(m.starts_with(words), "check {i}: {m}");
                assert!(!m.contains(PASSWORD), "the password leaked: {m}");
            }
            other => panic!("check {i}: {other:?}"),
        }
    }
    let s = lim.stats();
    assert_eq!(s.auth_failures + s.permission_denied, n, "{s:?}");
    let others = (
        s.timeouts,
        s.refused,
        s.errors,
        s.tls_failures,
        s.corrupt_values,
    );
    assert_eq!(others, (0, 0, 0, 0, 0), "counted apart: {s:?}");
    assert_eq!((s.total(), s.fallbacks()), (0, 0), "{s:?}");
    assert!(!lim.breaker_open(), "a misconfiguration is not an outage");
}

fn is_auth(e: &BackendError) -> bool {
    matches!(e, BackendError::Authentication(_))
}

fn is_permission(e: &BackendError) -> bool {
    matches!(e, BackendError::Permission(_))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requirepass_the_right_password_decides() {
    let Some(s) = Server::plain("auth_right", &["--requirepass", PASSWORD]) else {
        return;
    };
    let lim = limiter(&format!("redis://:{PASSWORD}@127.0.0.1:{}/", s.port));
    decides(&lim, "customer").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requirepass_a_wrong_password_is_an_authentication_error() {
    let Some(s) = Server::plain("auth_wrong", &["--requirepass", PASSWORD]) else {
        return;
    };
    let lim = limiter(&format!("redis://:not-it@127.0.0.1:{}/", s.port));
    refused(&lim, 5, is_auth, "redis authentication failed: ").await;
    assert_eq!(lim.stats().auth_failures, 5);
    // What it costs the server: a connection per check (the README says so), no more.
    let info: String = redis::cmd("INFO")
        .arg("stats")
        .query(&mut s.admin(Some(PASSWORD)))
        .unwrap();
    let connections: u64 = info
        .lines()
        .find_map(|l| l.strip_prefix("total_connections_received:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap();
    eprintln!("5 checks with a wrong password: {connections} connections (one is the test's)");
    assert!(connections <= 5 + 2, "{connections} connections");
    // The server's password changed to the limiter's: it decides again, no restart needed.
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("requirepass")
        .arg("not-it")
        .exec(&mut s.admin(Some(PASSWORD)))
        .unwrap();
    let v = lim.check_key("healed").await;
    assert!(matches!(v, Ok(Verdict::Allow(_))), "{v:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requirepass_no_password_is_an_authentication_error() {
    let Some(s) = Server::plain("auth_missing", &["--requirepass", PASSWORD]) else {
        return;
    };
    let lim = limiter(&format!("redis://127.0.0.1:{}/", s.port));
    refused(&lim, 5, is_auth, "redis authentication failed: ").await;
    let m = lim.check_key("customer").await.unwrap_err().to_string();
    assert!(m.contains("NOAUTH"), "{m}");
}

/// A server with the user `tg` given `acl`.
fn acl_server(test: &str, acl: &[String]) -> Option<Server> {
    let s = Server::plain(test, &[])?;
    let mut admin = s.admin(None);
    redis::cmd("ACL")
        .arg("SETUSER")
        .arg("tg")
        .arg(acl)
        .exec(&mut admin)
        .expect("ACL SETUSER");
    Some(s)
}

fn acl_url(s: &Server, password: &str) -> String {
    format!("redis://tg:{password}@127.0.0.1:{}/", s.port)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_minimal_acl_is_enough() {
    let Some(s) = acl_server("acl_minimal", &minimal_acl("")) else {
        return;
    };
    let lim = limiter(&acl_url(&s, PASSWORD));
    // The first check loads the script (a new server): SCRIPT LOAD under this ACL.
    decides(&lim, "a").await;
    assert_eq!(lim.stats().script_reloads, 1);
    // The script lost again (a restart, a failover): loaded again.
    redis::cmd("SCRIPT")
        .arg("FLUSH")
        .exec(&mut s.admin(None))
        .unwrap();
    decides(&lim, "b").await;
    let st = lim.stats();
    assert_eq!(
        (st.script_reloads, st.errors, st.corrupt_values),
        (2, 0, 0),
        "{st:?}"
    );
    assert_eq!((st.allowed, st.denied), (4, 2), "{st:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acl_user_with_a_wrong_password_is_an_authentication_error() {
    let Some(s) = acl_server("acl_wrong_password", &minimal_acl("")) else {
        return;
    };
    let lim = limiter(&acl_url(&s, "not-it"));
    refused(&lim, 3, is_auth, "redis authentication failed: ").await;
}

/// Each rule of the minimal ACL is needed: without it, every check is a permission error.
/// (`+eval` is for a script lost on a cluster node, sent with its body.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acl_user_without_a_needed_command_is_a_permission_error() {
    for rule in ["+evalsha", "+eval", "+get", "+set", "+time", "~gw:*"] {
        let test = format!(
            "acl_without_{}",
            rule.replace(['+', '|', '~', ':', '*'], "")
        );
        let Some(s) = acl_server(&test, &minimal_acl(rule)) else {
            return;
        };
        let lim = limiter(&acl_url(&s, PASSWORD));
        eprintln!("without {rule}:");
        refused(&lim, 3, is_permission, "redis permission denied: ").await;
        assert_eq!(lim.stats().permission_denied, 3);
    }
}

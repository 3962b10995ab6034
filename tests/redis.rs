//! `SharedRateLimiter` against a real `redis-server` on loopback: the core's property-test
//! oracle through the client clock (exact, µs), the exact retry-after, the fill-level rule
//! (its exact multiply-divide at the documented maxima), two instances sharing one limit,
//! several limits in one call, the deny cache, and the server-clock mode.
#![cfg(all(feature = "redis", not(loom)))]

mod common;
#[path = "common/redis_server.rs"]
mod redis_server;

use std::collections::HashMap;
use std::sync::OnceLock;
use std::time::Duration;

use common::{byte_spec, request_spec, Model, Obs, Per, Spec};
use proptest::prelude::*;
use redis::Commands;
use redis_server::{connection, prefix, shared, Redis};
use tollgate::redis::{BackendError, SharedRateLimiter};
use tollgate::{Check, DenyReason, ManualClock, Quota, Verdict};

fn rt() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    })
}

/// The server for one test (kept alive while the test runs), or `None` when skipped.
fn redis(test: &str) -> Option<Redis> {
    shared(test)
}

fn limiter(r: &Redis, test: &str, quota: Quota, clock: &ManualClock) -> SharedRateLimiter {
    let _guard = rt().enter();
    SharedRateLimiter::builder(quota, &r.url)
        .prefix(&prefix(test))
        .clock(clock.clone())
        // The oracle runs on a loaded machine: give each call room, it is not a latency test.
        .deadline(Duration::from_secs(5))
        .build()
        .unwrap()
}

// ---------------------------------------------------------------------------------------------
// The oracle in µs

const MAX_TAU_US: u128 = SharedRateLimiter::MAX_TAU_MICROS as u128;

/// The spec as the Redis limiter counts it: the same rules with µs as the time unit, derived
/// from the written parts (the GCRA rules with P in µs), the burst capped at 2^50 µs of τ.
fn micros(s: &Spec) -> Spec {
    let period_us = s.period / 1000;
    let (per, cap) = match s.per {
        Per::Request { .. } => {
            let t = period_us.div_ceil(u128::from(s.count));
            (Per::Request { t }, MAX_TAU_US / t)
        }
        Per::Byte { num, den } => {
            let den = den * 1000;
            (Per::Byte { num, den }, MAX_TAU_US * den / num)
        }
    };
    let burst = s.burst.min(cap).max(1);
    let tau = match per {
        Per::Request { t } => burst * t,
        Per::Byte { num, den } => (burst * num).div_ceil(den),
    };
    Spec {
        per,
        burst,
        tau,
        ..s.clone()
    }
}

/// A model's observation in the ns the verdicts speak.
fn in_nanos(o: Obs) -> Obs {
    match o {
        Obs::Allow {
            remaining,
            reset_after,
        } => Obs::Allow {
            remaining,
            reset_after: reset_after * 1000,
        },
        Obs::Deny {
            retry_after,
            reason,
        } => Obs::Deny {
            retry_after: retry_after * 1000,
            reason,
        },
        other => other,
    }
}

fn obs(r: Result<Verdict, BackendError>) -> Obs {
    match r {
        Ok(v) => Obs::of(v),
        Err(BackendError::InsufficientCapacity(e)) => Obs::Insufficient {
            cost: e.cost(),
            capacity: e.capacity(),
        },
        Err(e) => panic!("unexpected error: {e}"),
    }
}

#[derive(Clone, Debug)]
enum Op {
    Wait(u64),
    Check(u8, u64),
    Peek(u8),
    SetQuota(usize),
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    let op = prop_oneof![
        3 => prop_oneof![Just(0u64), 1u64..1_000, 1u64..1 << 36].prop_map(Op::Wait),
        5 => (0u8..3, any::<u64>()).prop_map(|(k, c)| Op::Check(k, c)),
        1 => (0u8..3).prop_map(Op::Peek),
        1 => any::<usize>().prop_map(Op::SetQuota),
    ];
    prop::collection::vec(op, 1..60)
}

/// A cost: mostly within the burst, sometimes the burst, sometimes above it.
fn cost(x: u64, burst: u128) -> u64 {
    let burst = u64::try_from(burst).unwrap();
    match x % 8 {
        0 => 0,
        1 => burst,
        2 => burst.saturating_add(1),
        3 => 1,
        _ => (x >> 3) % burst.saturating_add(1),
    }
}

/// The model of one key under lazy rescaling: the script rescales a key at its first touch
/// after a quota change (and writes that back), at that instant.
fn touch(m: &mut Model, spec: &Spec, now: u128) {
    if m.spec != *spec {
        m.set_spec(spec.clone(), now);
    }
}

fn run_oracle(r: &Redis, specs: &[Spec], ops: &[Op], start_us: u64) -> Result<(), TestCaseError> {
    let us: Vec<Spec> = specs.iter().map(micros).collect();
    let clock = ManualClock::at(Duration::from_micros(start_us));
    let lim = limiter(r, "oracle", specs[0].quota(), &clock);
    let mut cur = 0;
    let mut models: HashMap<u8, Model> = HashMap::new();
    for (i, op) in ops.iter().enumerate() {
        let now = u128::from(clock.nanos() / 1000);
        let spec = &us[cur];
        let (got, want) = match *op {
            Op::Wait(d) => {
                clock.advance(Duration::from_micros(d));
                continue;
            }
            Op::SetQuota(j) => {
                cur = j % specs.len();
                lim.set_quota(specs[cur].quota());
                continue;
            }
            Op::Check(k, x) => {
                let n = cost(x, spec.burst);
                let got = obs(rt().block_on(lim.check_key_with(&[k][..], Check::cost(n))));
                if u128::from(n) > spec.burst {
                    // Decided before any call: the key is not touched.
                    let capacity = u64::try_from(spec.burst).unwrap();
                    (got, Obs::Insufficient { cost: n, capacity })
                } else {
                    let m = models.entry(k).or_insert_with(|| Model::new(spec.clone()));
                    touch(m, spec, now);
                    (got, in_nanos(m.check(now, n)))
                }
            }
            Op::Peek(k) => {
                let got = obs(rt().block_on(lim.peek_key(&[k][..])));
                let m = models.entry(k).or_insert_with(|| Model::new(spec.clone()));
                touch(m, spec, now);
                (got, in_nanos(m.peek(now)))
            }
        };
        prop_assert_eq!(
            got,
            want,
            "op #{} {:?} at {} µs under {}",
            i,
            op,
            now,
            specs[cur].text
        );
    }
    Ok(())
}

fn oracle_cases() -> u32 {
    if std::env::var_os("TOLLGATE_REDIS_SKIP").is_some()
        && std::env::var_os("TOLLGATE_REDIS_URL").is_none()
    {
        1
    } else {
        200
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(oracle_cases()))]

    #[test]
    fn requests_match_the_oracle_through_the_client_clock(
        specs in prop::collection::vec(request_spec(), 1..4), ops in ops(), start in 0u64..1 << 50,
    ) {
        let Some(r) = redis("requests_match_the_oracle") else { return Ok(()) };
        run_oracle(&r, &specs, &ops, start)?;
    }

    #[test]
    fn byte_budgets_match_the_oracle_through_the_client_clock(
        specs in prop::collection::vec(byte_spec(), 1..4), ops in ops(), start in 0u64..1 << 50,
    ) {
        let Some(r) = redis("byte_budgets_match_the_oracle") else { return Ok(()) };
        run_oracle(&r, &specs, &ops, start)?;
    }

    #[test]
    fn retry_after_is_exact_to_the_microsecond(spec in request_spec(), split in 1u64..6, start in 0u64..1 << 50) {
        let Some(r) = redis("retry_after_is_exact") else { return Ok(()) };
        let us = micros(&spec);
        let clock = ManualClock::at(Duration::from_micros(start));
        let lim = limiter(&r, "retry", spec.quota(), &clock);
        let n = (u64::try_from(us.burst).unwrap() / split).max(1);
        let mut tries = 0;
        let wait = loop {
            match rt().block_on(lim.check_key_with("k", Check::cost(n))).unwrap() {
                Verdict::Allow(_) => tries += 1,
                Verdict::Deny(d) => break d.retry_after(),
                other => panic!("{other:?}"),
            }
            prop_assert!(tries <= 2 * split, "{}: cost {} allowed {} times", spec.text, n, tries);
        };
        prop_assert!(wait > Duration::ZERO && wait.as_micros() <= us.tau);
        let now = clock.now();
        let one = Duration::from_micros(1);
        clock.set(now + wait - one);
        let v = rt().block_on(lim.check_key_with("k", Check::cost(n))).unwrap();
        prop_assert_eq!(v.denied().map(|d| d.retry_after()), Some(one), "{}", spec.text);
        clock.set(now + wait);
        prop_assert!(rt().block_on(lim.check_key_with("k", Check::cost(n))).unwrap().is_permitted());
    }
}

// ---------------------------------------------------------------------------------------------
// The fill-level rule

fn q(s: &str) -> Quota {
    s.parse().unwrap()
}

fn allowed_now(lim: &SharedRateLimiter, key: &str, n: u64) -> u64 {
    (0..n)
        .filter(|_| rt().block_on(lim.check_key(key)).unwrap().is_permitted())
        .count() as u64
}

#[test]
fn a_quota_change_keeps_each_keys_fill_level() {
    let Some(r) = redis("fill_level") else { return };
    let clock = ManualClock::at(Duration::from_secs(1_000));
    let lim = limiter(&r, "fill", q("1/s;burst=100"), &clock);
    assert_eq!(allowed_now(&lim, "full", 100), 100);
    assert_eq!(allowed_now(&lim, "part", 40), 40);
    lim.set_quota(q("1/s;burst=3"));
    let d = rt()
        .block_on(lim.check_key("full"))
        .unwrap()
        .denied()
        .unwrap();
    assert_eq!(
        d.retry_after(),
        Duration::from_secs(1),
        "all used stays all used"
    );
    lim.set_quota(q("1/s;burst=100"));
    assert_eq!(allowed_now(&lim, "full", 200), 0, "a toggle grants nothing");
    assert_eq!(
        allowed_now(&lim, "part", 200),
        60,
        "40 % used stays 40 % used"
    );
    assert_eq!(allowed_now(&lim, "empty", 200), 100, "empty stays empty");
    // The value carries the τ it was written under: µs, 100 s.
    let mut con = connection(&r.url);
    let key = &lim.keys("part")[0];
    let v: String = con.get(key).unwrap();
    assert!(v.ends_with(":100000000"), "{v}");
    let ttl: i64 = redis::cmd("PTTL").arg(key).query(&mut con).unwrap();
    assert!(ttl > 99_000 && ttl <= 100_000, "PX TTL is tat − now: {ttl}");
}

/// `⌈a·τ_new/τ_old⌉` in the script, exactly, where doubles would not be: values written under
/// one τ, read under another, compared with u128 arithmetic at and near the maxima.
#[test]
fn the_rescale_is_exact_at_the_documented_maxima() {
    let Some(r) = redis("rescale_maxima") else {
        return;
    };
    let max = SharedRateLimiter::MAX_TAU_MICROS;
    let now_us: u64 = (1 << 52) - (1 << 40);
    let clock = ManualClock::at(Duration::from_micros(now_us));
    let mut con = connection(&r.url);
    let cases: [(u64, u64, u64); 8] = [
        (max, max - 1, max),
        (max - 1, max, max - 1),
        (max / 3, max - 3, max - 7),
        ((1 << 49) + 12_345, 86_400_000_000 * 13_000, max),
        (1, max, max - 1),
        (max - 12_345, 999_999_999_999_989, max - 3),
        (86_400_000_000, 86_400_000_000 * 7, 86_400_000_000 * 10),
        (3, 10, 3),
    ];
    for (i, &(a, tau_new, tau_old)) in cases.iter().enumerate() {
        // T = 1 µs, burst = τ_new: τ = τ_new µs.
        let quota = q(&format!("1000000/s;burst={tau_new}"));
        let lim = limiter(&r, "maxima", quota, &clock);
        let key = lim.keys("k")[0].clone();
        let _: () = con
            .set(&key, format!("{}:{}", now_us + a, tau_old))
            .unwrap();
        let v = rt().block_on(lim.peek_key("k")).unwrap();
        let stored: String = con.get(&key).unwrap();
        let want = u128::from(a.min(tau_old)) * u128::from(tau_new);
        let want = want.div_ceil(u128::from(tau_old));
        let want_tat = u128::from(now_us) + want;
        assert_eq!(stored, format!("{want_tat}:{tau_new}"), "case {i}");
        // And the verdict speaks from the rescaled TAT: a peek of one µs of weight.
        let ahead = want + 1;
        let expect = if ahead > u128::from(tau_new) {
            Obs::Deny {
                retry_after: (ahead - u128::from(tau_new)) * 1000,
                reason: DenyReason::Quota,
            }
        } else {
            Obs::Allow {
                remaining: u128::from(tau_new) - ahead,
                reset_after: ahead * 1000,
            }
        };
        assert_eq!(Obs::of(v), expect, "case {i}");
    }
}

// ---------------------------------------------------------------------------------------------
// Sharing

/// Two gateways on one limit: together they admit what one limit admits, where two local
/// limiters would admit twice that. Exact on a shared manual clock.
#[test]
fn two_instances_share_one_limit_exactly() {
    let Some(r) = redis("two_instances") else {
        return;
    };
    let clock = ManualClock::at(Duration::from_secs(10));
    let pre = prefix("two");
    let build = || {
        let _guard = rt().enter();
        SharedRateLimiter::builder(q("10/s;burst=5"), &r.url)
            .prefix(&pre)
            .clock(clock.clone())
            .deadline(Duration::from_secs(5))
            .build()
            .unwrap()
    };
    let (a, b) = (build(), build());
    let mut allowed = 0;
    // 2 s in steps of 10 ms, each instance checking 3 times per step.
    for _ in 0..200 {
        for lim in [&a, &b] {
            for _ in 0..3 {
                allowed += u64::from(rt().block_on(lim.check_key("c")).unwrap().is_permitted());
            }
        }
        clock.advance(Duration::from_millis(10));
    }
    // burst + rate × elapsed: 5 + 10/s × 1.99 s (the last step's time is not checked).
    assert_eq!(allowed, 5 + 19, "one limit for both");
    let one_alone = 5 + 19;
    assert!(allowed < 2 * one_alone);
}

/// The same on the server's clock, with both instances hammering concurrently for ~1 s.
#[test]
fn two_instances_share_one_limit_on_server_time() {
    let Some(r) = redis("two_instances_time") else {
        return;
    };
    let pre = prefix("two-time");
    let build = || {
        let _guard = rt().enter();
        SharedRateLimiter::builder(q("20/s;burst=10"), &r.url)
            .prefix(&pre)
            .deadline(Duration::from_secs(2))
            .build()
            .unwrap()
    };
    let (a, b) = (build(), build());
    let start = std::time::Instant::now();
    let total = rt().block_on(async {
        let run = |lim: SharedRateLimiter| {
            tokio::spawn(async move {
                let mut n = 0u64;
                let t0 = std::time::Instant::now();
                while t0.elapsed() < Duration::from_millis(1_000) {
                    n += u64::from(lim.check_key("c").await.unwrap().is_permitted());
                }
                n
            })
        };
        let (x, y) = (run(a.clone()), run(b.clone()));
        x.await.unwrap() + y.await.unwrap()
    });
    let elapsed = start.elapsed().as_secs_f64();
    let bound = 10.0 + 20.0 * elapsed;
    assert!(
        (total as f64) <= bound + 1.0,
        "{total} allowed in {elapsed:.3} s, bound {bound:.1}"
    );
    assert!(total >= 25, "{total}: both made progress against one limit");
    let stats = a.stats();
    assert!(stats.allowed + stats.denied + stats.denied_cached > 0);
}

// ---------------------------------------------------------------------------------------------
// Several limits in one call; keys; the deny cache; errors

#[test]
fn several_limits_are_checked_in_one_call_all_or_nothing() {
    let Some(r) = redis("several_limits") else {
        return;
    };
    let clock = ManualClock::at(Duration::from_secs(50));
    let _guard = rt().enter();
    let lim = SharedRateLimiter::builder(q("10/s"), &r.url)
        .prefix(&prefix("several"))
        .policy("per-second")
        .limit("per-minute", q("3/min"))
        .clock(clock.clone())
        .build()
        .unwrap();
    let before = lim.stats().round_trips;
    for _ in 0..3 {
        assert!(rt().block_on(lim.check_key("c")).unwrap().is_permitted());
    }
    assert_eq!(
        lim.stats().round_trips - before,
        3,
        "one round trip per check"
    );
    let d = rt().block_on(lim.check_key("c")).unwrap().denied().unwrap();
    assert_eq!(
        d.retry_after(),
        Duration::from_secs(20),
        "the per-minute limit speaks"
    );
    // All or nothing: the denied check charged neither limit. The per-second cell holds
    // exactly the three allowed checks: 300 ms ahead.
    let mut con = connection(&r.url);
    let keys = lim.keys("c");
    let per_second: String = con.get(&keys[0]).unwrap();
    assert_eq!(per_second, format!("{}:{}", 50_300_000u64, 1_000_000u64));
    // Allowed, the tighter limit reports: 2 of 3 per minute left after 20 s.
    clock.advance(Duration::from_secs(20));
    let a = rt()
        .block_on(lim.check_key("c"))
        .unwrap()
        .allowed()
        .unwrap();
    assert_eq!(a.remaining(), 0);
}

/// Redis Cluster hashes a key by its tag: every key of one call must share one, for any
/// customer an attacker can send.
#[test]
fn every_key_of_one_call_shares_a_hash_tag() {
    fn tag(key: &[u8]) -> &[u8] {
        let open = key.iter().position(|&b| b == b'{').expect("a tag");
        let len = key[open + 1..]
            .iter()
            .position(|&b| b == b'}')
            .expect("closed");
        assert!(len > 0, "an empty tag hashes the whole key");
        &key[open + 1..open + 1 + len]
    }
    let _guard = rt().enter();
    let lim = SharedRateLimiter::builder(q("10/s"), "redis://127.0.0.1:1/")
        .policy("a")
        .limit("b", q("100/min"))
        .limit("c", q("1000/h"))
        .build()
        .unwrap();
    let mut tags = Vec::new();
    for c in ["", "}", "{", "{}", "x}y", "%", "%7D", "a{b}c", "normal"] {
        let keys = lim.keys(c);
        assert_eq!(keys.len(), 3);
        let t = tag(&keys[0]).to_vec();
        for k in &keys {
            assert_eq!(tag(k), &t[..], "{c:?}: {:?}", String::from_utf8_lossy(k));
        }
        tags.push(t);
    }
    let n = tags.len();
    tags.sort();
    tags.dedup();
    assert_eq!(tags.len(), n, "distinct customers, distinct tags");
}

#[test]
fn a_denied_key_is_answered_locally_until_its_retry_time() {
    let Some(r) = redis("deny_cache") else { return };
    let clock = ManualClock::at(Duration::from_secs(7));
    let lim = limiter(&r, "cache", q("2/s"), &clock);
    assert_eq!(allowed_now(&lim, "k", 2), 2);
    let d = rt().block_on(lim.check_key("k")).unwrap().denied().unwrap();
    assert_eq!(d.retry_after(), Duration::from_millis(500));
    let trips = lim.stats().round_trips;
    clock.advance(Duration::from_millis(499));
    let d = rt().block_on(lim.check_key("k")).unwrap().denied().unwrap();
    assert_eq!(
        d.retry_after(),
        Duration::from_millis(1),
        "exact, from the cache"
    );
    let s = lim.stats();
    assert_eq!(
        (s.round_trips, s.denied_cached),
        (trips, 1),
        "no round trip"
    );
    clock.advance(Duration::from_millis(1));
    assert!(
        rt().block_on(lim.check_key("k")).unwrap().is_permitted(),
        "never past retry_at"
    );
    assert_eq!(lim.stats().round_trips, trips + 1);
}

#[test]
fn caller_mistakes_are_typed_errors_with_no_round_trip() {
    let Some(r) = redis("mistakes") else { return };
    let clock = ManualClock::new();
    let lim = limiter(&r, "mistakes", q("10/s"), &clock);
    let err = rt()
        .block_on(lim.check_key_with("k", Check::cost(11)))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "cost 11 exceeds the capacity of 10 per check"
    );
    let long = "x".repeat(SharedRateLimiter::MAX_KEY_BYTES + 1);
    let err = rt().block_on(lim.check_key(&long)).unwrap_err();
    assert!(
        matches!(err, BackendError::KeyTooLong { len: 513, max: 512 }),
        "{err}"
    );
    assert_eq!(lim.stats().round_trips, 0);
    // A client clock past 2^52 µs: denied, never allowed, never sent.
    clock.set(Duration::from_micros((1 << 52) + 1));
    let d = rt().block_on(lim.check_key("k")).unwrap().denied().unwrap();
    assert_eq!(d.reason(), DenyReason::ClockOverflow);
    assert_eq!(lim.stats().round_trips, 0);
}

// ---------------------------------------------------------------------------------------------
// The server's clock

#[test]
fn on_server_time_a_burst_then_a_bounded_wait() {
    let Some(r) = redis("server_time") else {
        return;
    };
    let _guard = rt().enter();
    let lim = SharedRateLimiter::builder(q("10/s;burst=3"), &r.url)
        .prefix(&prefix("server-time"))
        .deadline(Duration::from_secs(2))
        .deny_cache(0)
        .build()
        .unwrap();
    let t0 = std::time::Instant::now();
    let mut allowed = 0;
    let mut retry = None;
    for _ in 0..10 {
        match rt().block_on(lim.check_key("c")).unwrap() {
            Verdict::Allow(_) => allowed += 1,
            Verdict::Deny(d) => {
                retry = Some(d.retry_after());
                break;
            }
            other => panic!("{other:?}"),
        }
    }
    let spent = t0.elapsed();
    // 3 at once, plus one per 100 ms that passed while checking.
    let most = 3 + (spent.as_millis() / 100) as u64 + 1;
    assert!(
        (3..=most).contains(&allowed),
        "{allowed} allowed in {spent:?}"
    );
    let retry = retry.expect("denied within 10 checks");
    assert!(
        retry > Duration::ZERO && retry <= Duration::from_millis(100),
        "{retry:?}"
    );
}

#[test]
fn the_limiter_is_send_and_sync() {
    fn assert_both<T: Send + Sync>() {}
    assert_both::<SharedRateLimiter>();
}

/// A fault detector attached to a shared limiter: Redis's verdicts are recorded with their
/// keys, and while the detector passes traffic through, quota denials pass (shadow deny) up to
/// the ceiling — `factor` times the quota in all, never more — and the pass-through ends on time
/// at low traffic, with enforcement back on Redis's state.
#[test]
fn a_fault_detector_passes_through_up_to_its_ceiling_and_ends_on_time() {
    let Some(r) = redis("detector") else { return };
    let clock = ManualClock::at(Duration::from_secs(10));
    let detector = tollgate::safety::FaultDetector::builder()
        .clock(clock.clone())
        .ceiling(Some(3))
        .build();
    let lim = {
        let _guard = rt().enter();
        SharedRateLimiter::builder(q("10/s;burst=5"), &r.url)
            .prefix(&prefix("detector"))
            .clock(clock.clone())
            .deadline(Duration::from_secs(5))
            .detector(detector.clone())
            .build()
            .unwrap()
    };
    let check = || rt().block_on(lim.check_key("k")).unwrap();
    for _ in 0..5 {
        assert!(matches!(check(), Verdict::Allow(_)));
    }
    let d = check().denied().expect("the burst is spent");
    assert_eq!(d.reason(), DenyReason::Quota);
    let seen = detector.stats();
    assert_eq!(
        (seen.allowed, seen.denied_quota),
        (5, 1),
        "Redis's verdicts are recorded"
    );

    detector.force_pass_through(tollgate::PassReason::Forced, Duration::from_secs(30));
    // The ceiling is 3× the quota: 2 × the burst more, on this instance's ceiling cells.
    for i in 0..10 {
        match check() {
            Verdict::PassThrough(p) => {
                assert_eq!(p.reason(), tollgate::PassReason::Forced);
                assert_eq!(p.shadow(), tollgate::Shadow::Deny, "check {i}");
            }
            other => panic!("check {i} during the pass-through: {other:?}"),
        }
    }
    let beyond = check()
        .denied()
        .expect("the ceiling bounds the pass-through");
    assert_eq!(beyond.reason(), DenyReason::Ceiling);
    // A peek says what a check would: a pass-through, charging nothing.
    assert!(rt().block_on(lim.peek_key("k")).unwrap().is_permitted());

    // 30 s later, one check: the override has ended on time (no traffic needed to end it), and
    // Redis's state was not charged by the pass-through: a full burst, enforced again.
    clock.advance(Duration::from_secs(30));
    for _ in 0..5 {
        assert!(
            matches!(check(), Verdict::Allow(_)),
            "enforcing again, on a full cell"
        );
    }
    assert_eq!(
        check().denied().map(|d| d.reason()),
        Some(DenyReason::Quota)
    );
}

/// The `metrics` export of a shared limiter: a scrape right after traffic shows how each check
/// was decided and each call to Redis, by fixed labels only.
#[cfg(feature = "metrics")]
#[test]
fn a_scrape_shows_how_each_shared_check_was_decided() {
    let Some(r) = redis("metrics") else { return };
    let clock = ManualClock::at(Duration::from_secs(10));
    let lim = std::sync::Arc::new(limiter(&r, "metrics", q("10/s;burst=3"), &clock));
    for _ in 0..5 {
        let _ = rt().block_on(lim.check_key("k")).unwrap();
    }
    let text = redis_server::scrape(&lim);
    let value = |s: &str| redis_server::series(&text, s);
    // 3 allowed by Redis, 1 denied by Redis, 1 from the deny cache with no call.
    assert_eq!(
        value(r#"tollgate_redis_checks_total{limiter="shared",outcome="allowed"}"#),
        Some(3),
        "{text}"
    );
    assert_eq!(
        value(r#"tollgate_redis_checks_total{limiter="shared",outcome="denied"}"#),
        Some(1)
    );
    assert_eq!(
        value(r#"tollgate_redis_checks_total{limiter="shared",outcome="denied_cached"}"#),
        Some(1)
    );
    assert_eq!(
        value(r#"tollgate_redis_checks_total{limiter="shared",outcome="fallback_open"}"#),
        Some(0)
    );
    assert_eq!(
        value(r#"tollgate_redis_calls_total{limiter="shared",result="sent"}"#),
        Some(4)
    );
    assert_eq!(
        value(r#"tollgate_redis_calls_total{limiter="shared",result="timeout"}"#),
        Some(0)
    );
    assert_eq!(
        value(r#"tollgate_redis_breaker_open{limiter="shared"}"#),
        Some(0)
    );
    assert!(!text.contains("\"k\""), "no label carries a key");
}

//! Refunds, charges and resets of a shared limiter against a real `redis-server` on loopback:
//! exact against the script's GCRA, debt capped and waited out with an exact retry-after, a
//! key in debt whose TTL covers the debt, a call sent twice applied once, a call that cannot
//! reach Redis counted and given to the local fallback, a leased customer's cells dropped
//! before its refund, and refunds racing this instance's own checks, each giving back exactly
//! one unit (the deny cache keeps no denial Redis decided before a refund).
#![cfg(all(feature = "redis", not(loom)))]

#[path = "common/redis_server.rs"]
mod redis_server;

use std::sync::OnceLock;
use std::time::Duration;

use redis_server::{connection, own, prefix, shared, Redis};
use tollgate::redis::{FailurePolicy, Settled, SharedRateLimiter, SharedRateLimiterBuilder};
use tollgate::{ManualClock, Verdict};

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

fn builder(r: &Redis, test: &str, quota: &str, clock: &ManualClock) -> SharedRateLimiterBuilder {
    SharedRateLimiter::builder(quota.parse().unwrap(), &r.url)
        .prefix(&prefix(test))
        .clock(clock.clone())
        // A loaded machine: each call gets room, these are not latency tests.
        .deadline(Duration::from_secs(5))
}

fn build(b: SharedRateLimiterBuilder) -> SharedRateLimiter {
    let _guard = rt().enter();
    b.build().unwrap()
}

fn check(lim: &SharedRateLimiter, key: &str) -> Verdict {
    rt().block_on(lim.check_key(key)).unwrap()
}

fn retry(v: Verdict) -> Duration {
    v.denied()
        .unwrap_or_else(|| panic!("expected a denial, got {v:?}"))
        .retry_after()
}

fn applied(s: Settled) -> tollgate::limiter::Charged {
    match s {
        Settled::Applied(c) => c,
        other => panic!("expected the settle applied, got {other:?}"),
    }
}

#[test]
fn a_refund_gives_back_exactly_and_never_past_full() {
    let Some(r) = shared("settle_refund") else {
        return;
    };
    let clock = ManualClock::new();
    let lim = build(builder(&r, "settle_refund", "3/min;burst=3", &clock));
    for _ in 0..3 {
        assert!(check(&lim, "c").is_permitted());
    }
    assert_eq!(retry(check(&lim, "c")), Duration::from_secs(20));
    let back = applied(rt().block_on(lim.refund_key("c", 1)).unwrap());
    assert!(back.is_paid() && back.debt().is_zero());
    assert!(
        check(&lim, "c").is_permitted(),
        "the refund gave one unit back"
    );
    assert_eq!(retry(check(&lim, "c")), Duration::from_secs(20));
    // A refund far beyond the charge fills the cell, no more: exactly the burst again.
    let _ = applied(rt().block_on(lim.refund_key("c", u64::MAX)).unwrap());
    for _ in 0..3 {
        assert!(check(&lim, "c").is_permitted());
    }
    assert_eq!(retry(check(&lim, "c")), Duration::from_secs(20));
    // A full key's refund leaves nothing behind in Redis.
    let _ = applied(rt().block_on(lim.refund_key("fresh", 5)).unwrap());
    let exists: i64 = redis::cmd("EXISTS")
        .arg(&lim.keys("fresh")[0])
        .query(&mut connection(&r.url))
        .unwrap();
    assert_eq!(exists, 0);
    let s = lim.stats();
    assert_eq!((s.refunds, s.settles_lost), (3, 0));
}

#[test]
fn a_charge_goes_into_debt_up_to_the_cap_and_is_waited_out_exactly() {
    let Some(r) = shared("settle_debt") else {
        return;
    };
    let clock = ManualClock::new();
    let p = prefix("settle_debt");
    let make = || {
        build(
            builder(&r, "settle_debt", "10/s", &clock)
                .prefix(&p)
                .max_debt(Duration::from_secs(5)),
        )
    };
    let lim = make();
    assert!(check(&lim, "t").is_permitted());
    // 20 units in all against a burst of 10: one second past drained.
    let c = applied(rt().block_on(lim.charge_key("t", 19)).unwrap());
    assert_eq!((c.unpaid(), c.debt()), (0, Duration::from_secs(1)));
    assert_eq!(retry(check(&lim, "t")), Duration::from_millis(1_100));
    clock.advance(Duration::from_millis(1_099));
    assert_eq!(retry(check(&lim, "t")), Duration::from_millis(1));
    clock.advance(Duration::from_millis(1));
    assert!(check(&lim, "t").is_permitted(), "the debt is paid off");
    // The cap: a huge charge stops 5 s past drained, and says what it cut off.
    let c = applied(rt().block_on(lim.charge_key("t", u64::MAX)).unwrap());
    assert_eq!(c.debt(), Duration::from_secs(5));
    assert!(c.unpaid() > u64::MAX / 2, "unpaid {}", c.unpaid());
    assert_eq!(retry(check(&lim, "t")), Duration::from_millis(5_100));
    // Another instance with the same settings sees the same debt.
    let other = make();
    assert_eq!(other.keys("t"), lim.keys("t"));
    assert_eq!(retry(check(&other, "t")), Duration::from_millis(5_100));
    assert_eq!(lim.stats().charges, 2);
}

#[test]
fn a_key_in_debt_lives_until_its_debt_is_paid() {
    let Some(r) = shared("settle_ttl") else {
        return;
    };
    // The server's clock, so that the TTL is the script's own (no client-clock floor).
    let lim = build(
        SharedRateLimiter::builder("1/s;burst=2".parse().unwrap(), &r.url)
            .prefix(&prefix("settle_ttl"))
            .deadline(Duration::from_secs(5))
            .max_debt(Duration::from_secs(3_600)),
    );
    assert!(check(&lim, "k").is_permitted());
    let c = applied(rt().block_on(lim.charge_key("k", 1_000)).unwrap());
    assert!(c.is_paid());
    let wait = retry(check(&lim, "k"));
    let ttl_ms: u64 = redis::cmd("PTTL")
        .arg(&lim.keys("k")[0])
        .query(&mut connection(&r.url))
        .unwrap();
    // One unit (1 s) fits at the retry; the cell is full again τ − T = 1 s after that. The key
    // must live that long, or it would expire in debt and come back as a full burst.
    let full_again = wait + Duration::from_secs(1);
    assert!(
        Duration::from_millis(ttl_ms) + Duration::from_millis(50) >= full_again,
        "PTTL {ttl_ms} ms expires before the cell is full again, {full_again:?} from now"
    );
    assert!(
        ttl_ms <= 1_002_000,
        "PTTL {ttl_ms} ms: longer than the debt"
    );
}

#[test]
fn a_reset_deletes_the_customer_and_forgives_its_debt() {
    let Some(r) = shared("settle_reset") else {
        return;
    };
    let clock = ManualClock::new();
    let lim = build(
        builder(&r, "settle_reset", "1/min", &clock)
            .limit("daily", "5/d".parse().unwrap())
            .max_debt(Duration::from_secs(600)),
    );
    assert!(check(&lim, "x").is_permitted());
    let _ = applied(rt().block_on(lim.charge_key("x", 4)).unwrap());
    assert!(!check(&lim, "x").is_permitted());
    let _ = applied(rt().block_on(lim.reset_key("x")).unwrap());
    let mut con = connection(&r.url);
    for k in lim.keys("x") {
        let exists: i64 = redis::cmd("EXISTS").arg(&k).query(&mut con).unwrap();
        assert_eq!(exists, 0, "{}", String::from_utf8_lossy(&k));
    }
    assert!(
        check(&lim, "x").is_permitted(),
        "a reset key has its whole burst"
    );
    assert_eq!(lim.stats().resets, 1);
}

#[test]
fn the_same_settle_sent_twice_is_applied_once() {
    let Some(r) = shared("settle_twice") else {
        return;
    };
    // The script itself, as a client resending a call after a lost reply would send it: the
    // same cell, the same token.
    let p = prefix("settle_twice");
    let cell = format!("{p}:default:{{c}}");
    let token = format!("{p}:default:{{c}}:settle:abc");
    let mut con = connection(&r.url);
    let src = SharedRateLimiter::script_source();
    // A check of weight 10 s under τ = 60 s at now = 100 s (µs): the TAT is 110 s.
    let checked: Vec<i64> = redis::cmd("EVAL")
        .arg(src)
        .arg(1)
        .arg(&cell)
        .arg(100_000_000u64)
        .arg("1")
        .arg(0)
        .arg(10_000_000u64)
        .arg(60_000_000u64)
        .query(&mut con)
        .unwrap();
    assert_eq!(checked[0], 0);
    let refund = |con: &mut redis::Connection| -> Vec<i64> {
        redis::cmd("EVAL")
            .arg(src)
            .arg(2)
            .arg(&cell)
            .arg(&token)
            .arg(100_000_000u64)
            .arg("R:0")
            .arg(0)
            .arg(4_000_000u64)
            .arg(60_000_000u64)
            .query(con)
            .unwrap()
    };
    assert_eq!(refund(&mut con), [5, 100_000_000, 6_000_000, 4_000_000, 0]);
    assert_eq!(refund(&mut con)[0], 6, "the second send finds the token");
    let v: String = redis::cmd("GET").arg(&cell).query(&mut con).unwrap();
    assert_eq!(v, "106000000:60000000", "refunded once");
    // A refund past the reach the script allows is refused, not clamped silently.
    let bad: Vec<i64> = redis::cmd("EVAL")
        .arg(src)
        .arg(2)
        .arg(&cell)
        .arg(format!("{token}2"))
        .arg(100_000_000u64)
        .arg("R:0")
        .arg(0)
        .arg(60_000_001u64)
        .arg(60_000_000u64)
        .query(&mut con)
        .unwrap();
    assert_eq!(bad[0], 3);
}

#[test]
fn a_settle_that_cannot_reach_redis_is_lost_counted_and_goes_to_the_local_fallback() {
    let Some(mut r) = own("settle_lost") else {
        return;
    };
    let clock = ManualClock::new();
    let lim = build(
        builder(&r, "settle_lost", "2/min", &clock)
            .deadline(Duration::from_millis(500))
            .failure_policy(FailurePolicy::Local),
    );
    assert!(check(&lim, "c").is_permitted());
    if let Some(s) = r.own.as_mut() {
        s.kill();
    }
    // Redis is gone: checks fall back to the local share, which this refund then reaches.
    let local = lim.local_fallback("default").unwrap();
    assert!(check(&lim, "c").is_permitted());
    assert!(check(&lim, "c").is_permitted());
    assert!(
        !local.check_key(b"c".as_slice()).is_permitted(),
        "the local share is spent"
    );
    assert_eq!(
        rt().block_on(lim.refund_key("c", 1)).unwrap(),
        Settled::Lost
    );
    assert!(
        local.check_key(b"c".as_slice()).is_permitted(),
        "refunded locally"
    );
    assert_eq!(
        rt().block_on(lim.charge_key("c", 1)).unwrap(),
        Settled::Lost
    );
    let s = lim.stats();
    assert_eq!((s.settles_lost, s.refunds, s.charges), (2, 0, 0));
}

#[test]
fn a_refund_of_a_leased_customer_drops_this_instances_cells_first() {
    let Some(r) = shared("settle_lease") else {
        return;
    };
    let clock = ManualClock::new();
    let lim = build(
        builder(&r, "settle_lease", "1000/s;burst=100", &clock)
            .lease(8)
            .lease_time(Duration::from_millis(100)),
    );
    // Hot: enough checks within one horizon for a lease.
    let mut leased = false;
    for _ in 0..200 {
        assert!(check(&lim, "hot").is_permitted());
        clock.advance(Duration::from_micros(100));
        if lim.stats().leases_taken > 0 && lim.stats().leased_allowed > 0 {
            leased = true;
            break;
        }
    }
    assert!(leased, "the customer took a lease: {:?}", lim.stats());
    let before = lim.stats();
    let _ = applied(rt().block_on(lim.refund_key("hot", 1)).unwrap());
    let after = lim.stats();
    assert!(
        after.cells_lapsed > before.cells_lapsed,
        "the unspent cells were dropped: {before:?} -> {after:?}"
    );
    // The next check asks Redis (the instance holds no cell of the customer now).
    let trips = lim.stats().round_trips;
    assert!(check(&lim, "hot").is_permitted());
    assert!(lim.stats().round_trips > trips);
}

#[test]
fn bad_settles_are_typed_errors_and_zero_is_free() {
    let Some(r) = shared("settle_bad") else {
        return;
    };
    let clock = ManualClock::new();
    let lim = build(builder(&r, "settle_bad", "1/s", &clock));
    let long = "k".repeat(SharedRateLimiter::MAX_KEY_BYTES + 1);
    for res in [
        rt().block_on(lim.refund_key(&long, 1)),
        rt().block_on(lim.charge_key(&long, 1)),
        rt().block_on(lim.reset_key(&long)),
    ] {
        assert!(matches!(
            res,
            Err(tollgate::redis::BackendError::KeyTooLong { .. })
        ));
    }
    let trips = lim.stats().round_trips;
    let _ = applied(rt().block_on(lim.charge_key("z", 0)).unwrap());
    let _ = applied(rt().block_on(lim.refund_key("z", 0)).unwrap());
    assert_eq!(
        lim.stats().round_trips,
        trips,
        "a settle of nothing sends nothing"
    );
}

#[test]
fn debt_stays_exact_at_the_scripts_maxima() {
    let Some(r) = shared("settle_max") else {
        return;
    };
    // now = 2^52 µs, τ = 2^50, a debt cap of 2^50: the largest TATs the script can write.
    let (now, tau) = (1u64 << 52, 1u64 << 50);
    let p = prefix("settle_max");
    let cell = format!("{p}:default:{{m}}");
    let mut con = connection(&r.url);
    let src = SharedRateLimiter::script_source();
    let eval = |con: &mut redis::Connection, keys: &[&str], mode: &str, w: u64| -> Vec<i64> {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(src).arg(keys.len());
        for k in keys {
            cmd.arg(*k);
        }
        cmd.arg(now)
            .arg(mode)
            .arg(format!("0:{tau}"))
            .arg(w)
            .arg(tau)
            .query(con)
            .unwrap()
    };
    assert_eq!(
        eval(&mut con, &[&cell], "1", tau)[0],
        0,
        "a whole burst from empty"
    );
    let token = format!("{cell}:settle:max");
    let charged = eval(&mut con, &[&cell, &token], "C:0", 2 * tau);
    // TAT was now + τ; the cap is now + τ + debt = now + 2^51: 2^50 of the 2^51 fit.
    assert_eq!(charged, [5, now as i64, 2 * tau as i64, tau as i64, 0]);
    let v: String = redis::cmd("GET").arg(&cell).query(&mut con).unwrap();
    assert_eq!(v, format!("{}:{tau}", now + 2 * tau));
    // A check of one unit of 1 µs now waits exactly the debt plus that µs past τ.
    let denied = eval(&mut con, &[&cell], "1", 1);
    assert_eq!(denied, [1, now as i64, (2 * tau + 1) as i64, 0]);
}

/// How many rounds a race test runs: `TOLLGATE_RACE_ROUNDS` (CI runs 20), else 3.
fn race_rounds() -> u32 {
    match std::env::var("TOLLGATE_RACE_ROUNDS") {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("TOLLGATE_RACE_ROUNDS={v:?} is not a count of rounds")),
        Err(_) => 3,
    }
}

#[test]
fn refunds_racing_checks_each_give_back_exactly_one_unit() {
    let Some(r) = shared("settle_race") else {
        return;
    };
    // A frozen clock: nothing refills, so every unit admitted after the drain is a refund's.
    let clock = ManualClock::new();
    let p = prefix("settle_race");
    let make = |cache| {
        build(
            builder(&r, "settle_race", "10/min;burst=10", &clock)
                .prefix(&p)
                .deny_cache(cache),
        )
    };
    let lim = make(4096);
    // Another instance, with no deny cache: what Redis itself holds.
    let redis_view = make(0);
    let rounds = race_rounds();
    let mut short = Vec::new();
    for round in 0..rounds {
        let key = format!("c{round}");
        for _ in 0..10 {
            assert!(check(&lim, &key).is_permitted());
        }
        // 5 refunds among 35 checks, all in flight at once on two worker threads.
        let during: u32 = rt().block_on(async {
            let tasks: Vec<_> = (0..40)
                .map(|i| {
                    let (lim, key) = (lim.clone(), key.clone());
                    tokio::spawn(async move {
                        if i % 8 == 7 {
                            let _ = applied(lim.refund_key(&key, 1).await.unwrap());
                            0
                        } else {
                            u32::from(lim.check_key(&key).await.unwrap().is_permitted())
                        }
                    })
                })
                .collect();
            let mut n = 0;
            for t in tasks {
                n += t.await.unwrap();
            }
            n
        });
        // Whatever the race left, this instance admits it now: a stale cached denial would not.
        let mut after = 0;
        while after < 10 && check(&lim, &key).is_permitted() {
            after += 1;
        }
        if during + after != 5 {
            let held = rt().block_on(redis_view.peek_key(&key)).unwrap();
            short.push(format!(
                "round {round}: {during} admitted in the race and {after} after it; \
                 Redis itself: {held:?}"
            ));
        }
    }
    assert!(
        short.is_empty(),
        "{} of {rounds} rounds did not admit exactly the 5 refunded units:\n{}",
        short.len(),
        short.join("\n")
    );
    assert_eq!(lim.stats().refunds, u64::from(5 * rounds));
}

//! Checks per second and latency through `SharedRateLimiter` against a real Redis, for
//! `benches/redis.sh`, which runs `redis-benchmark` on the same `EVALSHA` against the same
//! server in the same run and prints the ratio. Not a criterion bench: a network benchmark
//! measured the way `redis-benchmark` measures (requests per second, latency percentiles).
//!
//! Usage: `redis URL TASKS CHECKS [cached|hot|hot-lease|hots|hots-lease]`. Keys are drawn
//! from 100,000 customers (as `redis-benchmark -r 100000`), quota 100/s per customer (almost
//! every check allowed: one round trip each). With `cached`, one customer used up and checked
//! over and over: denials answered from the deny cache, with no round trip. With `hot`, one
//! customer at `10000/s;burst=1000` checked by every task as fast as it goes (on the server's
//! clock), and `hot-lease` the same with `.lease(20)`: the admitted count is printed beside
//! burst + rate·elapsed, its bound. `hots` and `hots-lease`: twelve customers at
//! `2000/s;burst=200`, task `t` on customer `t mod 12` (each far above its rate; on a cluster
//! their hash tags spread them over the masters). The hot modes first make every hot customer
//! hot (untimed, `rate · lease_time` checks each) and time the CHECKS after that, or, given
//! SECONDS, as many checks as the tasks make in that time.

use std::time::{Duration, Instant};

use tollgate::redis::SharedRateLimiter;
use tollgate::Verdict;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// `per_task` checks from each of `tasks` tasks (or as many as they make until `until`), the
/// key of each from `key`; the latencies, and when the last task made its last check.
async fn run(
    lim: &SharedRateLimiter,
    tasks: usize,
    per_task: usize,
    until: Option<Instant>,
    key: impl Fn(usize, &mut u64, &mut String) + Copy + Send + 'static,
) -> Result<(Vec<Duration>, Instant), Box<dyn std::error::Error>> {
    let handles: Vec<_> = (0..tasks)
        .map(|t| {
            let lim = lim.clone();
            tokio::spawn(async move {
                let mut lat = Vec::with_capacity(per_task);
                let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ (t as u64);
                let mut buf = String::new();
                for i in 0.. {
                    let more = match until {
                        Some(end) => Instant::now() < end,
                        None => i < per_task,
                    };
                    if !more {
                        break;
                    }
                    key(t, &mut x, &mut buf);
                    // A task answered locally every time (leases, the deny cache) would hold
                    // its worker thread, and the I/O of the other tasks would wait: a gateway's
                    // request tasks do I/O between checks.
                    if i % 64 == 63 {
                        tokio::task::yield_now().await;
                    }
                    let s = Instant::now();
                    let v = lim.check_key(buf.as_str()).await;
                    lat.push(s.elapsed());
                    if v.is_err() {
                        return Err("check failed");
                    }
                }
                Ok((lat, Instant::now()))
            })
        })
        .collect();
    let mut lat = Vec::with_capacity(tasks * per_task);
    let mut last = Instant::now();
    for (i, h) in handles.into_iter().enumerate() {
        let (l, end) = h.await?.map_err(|e| e.to_string())?;
        lat.extend(l);
        last = if i == 0 { end } else { last.max(end) };
    }
    Ok((lat, last))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    // `cargo bench` passes `--bench`: run nothing then (this bench is driven by the script).
    if args.len() < 4 || args.iter().any(|a| a == "--bench") {
        eprintln!(
            "usage: redis URL TASKS CHECKS [cached|hot|hot-lease|hots|hots-lease [SECONDS]]   \
             (run by benches/redis.sh and benches/redis_cluster.sh)"
        );
        return Ok(());
    }
    let (url, tasks, checks) = (
        &args[1],
        args[2].parse::<usize>()?,
        args[3].parse::<usize>()?,
    );
    let mode = args.get(4).map_or("", String::as_str);
    // Timed by the clock instead of a count of checks.
    let seconds = args.get(5).map(|s| s.parse::<f64>()).transpose()?;
    let cached = mode == "cached";
    let hot = mode.starts_with("hot");
    // Hot customers: one, or twelve.
    let hots: u64 = if mode.starts_with("hots") { 12 } else { 1 };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async {
        // (rate, burst) of each hot customer.
        let (per_second, burst) = if hots > 1 {
            (2000, 200)
        } else {
            (10_000, 1000)
        };
        let quota = if hot {
            format!("{per_second}/s;burst={burst}")
        } else {
            "100/s".to_owned()
        };
        let mut b = SharedRateLimiter::builder(quota.parse()?, url)
            .prefix("bench")
            .policy("rb")
            .deadline(Duration::from_secs(1))
            .deny_cache(if cached || hot { 4096 } else { 0 });
        if mode.ends_with("-lease") {
            b = b.lease(20);
        }
        let lim = b.build()?;
        // Connect and load the script before timing.
        if !matches!(lim.peek_key("warm-up").await?, Verdict::Allow(_)) {
            return Err("redis did not decide the warm-up check".into());
        }
        if cached {
            while lim.check_key("hot").await?.is_permitted() {}
        }
        // The key a task checks: a customer out of 100,000 (xorshift), or its hot customer.
        let key = move |t: usize, x: &mut u64, buf: &mut String| {
            buf.clear();
            if cached || hot {
                buf.push_str("hot");
                if hots > 1 {
                    buf.push_str(&(t as u64 % hots).to_string());
                }
            } else {
                *x ^= *x << 13;
                *x ^= *x >> 7;
                *x ^= *x << 17;
                buf.push_str(&(*x % 100_000).to_string());
            }
        };
        if hot {
            // Untimed: every hot customer proves hot (rate · lease_time checks on this
            // instance, with or without leases alike), so the timed checks are steady state.
            let per_customer = tasks / hots as usize;
            let warm = (per_second as usize + 40).div_ceil(per_customer);
            run(&lim, tasks, warm, None, key).await?;
        }
        let before = lim.stats();
        let started = Instant::now();
        let until = seconds.map(|s| started + Duration::from_secs_f64(s));
        let (mut lat, last) = run(&lim, tasks, checks / tasks, until, key).await?;
        let elapsed = last - started;
        lat.sort();
        let s = lim.stats();
        let round_trips = s.round_trips - before.round_trips;
        let rate = lat.len() as f64 / elapsed.as_secs_f64();
        println!(
            "tollgate tasks={tasks} checks={} rps={rate:.0} p50_ms={:.3} p99_ms={:.3} \
             round_trips={round_trips} fallbacks={} cached_denials={}",
            lat.len(),
            percentile(&lat, 0.50).as_secs_f64() * 1e3,
            percentile(&lat, 0.99).as_secs_f64() * 1e3,
            s.fallbacks() - before.fallbacks(),
            s.denied_cached - before.denied_cached,
        );
        if hot {
            let admitted = s.allowed + s.leased_allowed - before.allowed - before.leased_allowed;
            // Saturated when the timing starts: rate · elapsed is what an exact GCRA admits.
            let steady = hots as f64 * f64::from(per_second) * elapsed.as_secs_f64();
            println!(
                "{mode}: admitted={admitted} rate_elapsed={steady:.0} bound={:.0} \
                 round_trips_per_check={:.4} leases={} cells_leased={} cells_lapsed={}",
                steady + hots as f64 * f64::from(burst),
                round_trips as f64 / lat.len() as f64,
                s.leases_taken - before.leases_taken,
                s.cells_leased - before.cells_leased,
                s.cells_lapsed - before.cells_lapsed,
            );
        }
        Ok::<_, Box<dyn std::error::Error>>(())
    })?;
    Ok(())
}

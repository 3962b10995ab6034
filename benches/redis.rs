//! Checks per second and latency through `SharedRateLimiter` against a real Redis, for
//! `benches/redis.sh`, which runs `redis-benchmark` on the same `EVALSHA` against the same
//! server in the same run and prints the ratio. Not a criterion bench: a network benchmark
//! measured the way `redis-benchmark` measures (requests per second, latency percentiles).
//!
//! Usage: `redis URL TASKS CHECKS [cached|hot|hot-lease]`. Keys are drawn from 100,000
//! customers (as `redis-benchmark -r 100000`), quota 100/s per customer (almost every check
//! allowed: one round trip each). With `cached`, one customer used up and checked over and
//! over: denials answered from the deny cache, with no round trip. With `hot`, one customer
//! at `10000/s;burst=1000` checked by every task as fast as it goes (on the server's clock),
//! and `hot-lease` the same with `.lease(20)`: the admitted count is printed beside burst +
//! rate·elapsed, its bound.

use std::time::{Duration, Instant};

use tollgate::{SharedRateLimiter, Verdict};

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    // `cargo bench` passes `--bench`: run nothing then (this bench is driven by the script).
    if args.len() < 4 || args.iter().any(|a| a == "--bench") {
        eprintln!(
            "usage: redis URL TASKS CHECKS [cached|hot|hot-lease]   (run by benches/redis.sh)"
        );
        return Ok(());
    }
    let (url, tasks, checks) = (
        &args[1],
        args[2].parse::<usize>()?,
        args[3].parse::<usize>()?,
    );
    let mode = args.get(4).map_or("", String::as_str);
    let cached = mode == "cached";
    let hot = mode.starts_with("hot");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async {
        let quota = if hot { "10000/s;burst=1000" } else { "100/s" };
        let mut b = SharedRateLimiter::builder(quota.parse()?, url)
            .prefix("bench")
            .policy("rb")
            .deadline(Duration::from_secs(1))
            .deny_cache(if cached || hot { 4096 } else { 0 });
        if mode == "hot-lease" {
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
        let per_task = checks / tasks;
        let started = Instant::now();
        let handles: Vec<_> = (0..tasks)
            .map(|t| {
                let lim = lim.clone();
                tokio::spawn(async move {
                    let mut lat = Vec::with_capacity(per_task);
                    let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ (t as u64);
                    let mut buf = String::new();
                    for _ in 0..per_task {
                        // xorshift: a customer out of 100,000.
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        buf.clear();
                        if cached || hot {
                            buf.push_str("hot");
                        } else {
                            buf.push_str(&(x % 100_000).to_string());
                        }
                        let s = Instant::now();
                        let v = lim.check_key(buf.as_str()).await;
                        lat.push(s.elapsed());
                        if v.is_err() {
                            return Err("check failed");
                        }
                    }
                    Ok(lat)
                })
            })
            .collect();
        let mut lat = Vec::with_capacity(checks);
        for h in handles {
            lat.extend(h.await?.map_err(|e| e.to_string())?);
        }
        let elapsed = started.elapsed();
        lat.sort();
        let s = lim.stats();
        let rate = lat.len() as f64 / elapsed.as_secs_f64();
        println!(
            "tollgate tasks={tasks} checks={} rps={rate:.0} p50_ms={:.3} p99_ms={:.3} \
             round_trips={} fallbacks={} cached_denials={}",
            lat.len(),
            percentile(&lat, 0.50).as_secs_f64() * 1e3,
            percentile(&lat, 0.99).as_secs_f64() * 1e3,
            s.round_trips,
            s.fallbacks(),
            s.denied_cached,
        );
        if hot {
            let admitted = s.allowed + s.leased_allowed;
            println!(
                "{mode}: admitted={admitted} bound={:.0} round_trips_per_check={:.4} leases={} \
                 cells_leased={} cells_lapsed={}",
                1000.0 + 10_000.0 * elapsed.as_secs_f64(),
                s.round_trips as f64 / lat.len() as f64,
                s.leases_taken,
                s.cells_leased,
                s.cells_lapsed,
            );
        }
        Ok::<_, Box<dyn std::error::Error>>(())
    })?;
    Ok(())
}

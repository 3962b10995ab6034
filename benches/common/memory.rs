//! Bytes per key, measured as resident-set growth in a fresh child process (so earlier
//! allocations and allocator caches of the bench itself do not blur it).
//!
//! The bench binary re-runs itself with [`PROBE_VAR`] set to one of [`PROBES`]; the child
//! generates its keys, reads `/proc/self/statm`, builds the limiter, inserts every key with one
//! check, reads `statm` again and prints one `MEMPROBE` line.

use std::fmt::Write as _;
use std::num::NonZeroU32;
use std::process::Command;

use governor::{Quota as GQuota, RateLimiter as GovernorLimiter};
use tollgate::{KeyedRateLimiter, Quota};

pub const PROBE_VAR: &str = "TOLLGATE_BENCH_MEM_PROBE";
const KEYS_VAR: &str = "TOLLGATE_BENCH_MEM_KEYS";
pub const PROBES: &[&str] = &[
    "tollgate-u64",
    "tollgate-u64-cap4M",
    "tollgate-u64-cap16M",
    "tollgate-u64-10keys",
    "governor-u64",
    "tollgate-string17",
    "governor-string17",
];
/// x86_64 Linux pages.
const PAGE: u64 = 4096;

/// Resident bytes, from the second field of `/proc/self/statm`.
fn rss() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("/proc/self/statm");
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|x| x.parse().ok())
        .expect("statm resident field");
    pages * PAGE
}

/// 17-byte string keys: `customer-` and 8 digits.
fn string_key(i: u64) -> String {
    format!("customer-{i:08}")
}

fn quota() -> (Quota, GQuota) {
    // Live keys (see keyed.rs): nothing is idle, so nothing is swept while inserting.
    let (one, burst) = (
        NonZeroU32::MIN,
        NonZeroU32::new(1_000_000_000).expect("non-zero"),
    );
    (
        Quota::per_second(one).with_burst(burst),
        GQuota::per_second(one).allow_burst(burst),
    )
}

/// The child side: measure one store and print the result.
pub fn probe(which: &str) {
    let n: u64 = std::env::var(KEYS_VAR)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let (tq, gq) = quota();
    let strings: Vec<String> = if which.ends_with("string17") {
        (0..n).map(string_key).collect()
    } else {
        Vec::new()
    };
    assert!(strings.iter().all(|s| s.len() == 17));
    if which == "tollgate-u64-10keys" {
        return probe_small(tq);
    }
    let before = rss();
    let (table, len) = match which {
        "tollgate-u64" | "tollgate-u64-cap4M" | "tollgate-u64-cap16M" => {
            let builder = KeyedRateLimiter::<u64>::builder(tq);
            let lim = match which {
                "tollgate-u64-cap4M" => builder.max_keys(4 << 20).build(),
                "tollgate-u64-cap16M" => builder.max_keys(16 << 20).build(),
                _ => builder.max_keys(n as usize).build(),
            };
            (0..n).for_each(|k| assert!(lim.check_key(&k).is_permitted()));
            // The whole limiter: its table and the struct itself.
            let out = (lim.table_bytes() + std::mem::size_of_val(&lim), lim.len());
            std::mem::forget(lim); // measured below, while still resident
            out
        }
        "tollgate-string17" => {
            let lim = KeyedRateLimiter::<String>::builder(tq)
                .max_keys(n as usize)
                .build();
            strings
                .iter()
                .for_each(|k| assert!(lim.check_key(k.as_str()).is_permitted()));
            let out = (lim.table_bytes(), lim.len());
            std::mem::forget(lim);
            out
        }
        "governor-u64" => {
            let lim = GovernorLimiter::keyed(gq);
            (0..n).for_each(|k| assert!(lim.check_key(&k).is_ok()));
            let out = (0, lim.len());
            std::mem::forget(lim);
            out
        }
        "governor-string17" => {
            let lim = GovernorLimiter::keyed(gq);
            strings
                .iter()
                .for_each(|k| assert!(lim.check_key(k).is_ok()));
            let out = (0, lim.len());
            std::mem::forget(lim);
            out
        }
        other => panic!("unknown probe {other}; one of {PROBES:?}"),
    };
    let grown = rss().saturating_sub(before);
    println!("MEMPROBE rss={grown} table={table} len={len} keys={n}");
}

/// Limiters from the default builder (a cap of 2^20 keys) holding 10 keys each: one built
/// first to pay the process's one-time costs (the clock's calibration, allocator arenas), then
/// 100 more, measured together; the line reports one of them.
fn probe_small(tq: Quota) {
    const LIMITERS: u64 = 100;
    let build = || {
        let lim = KeyedRateLimiter::<u64>::new(tq);
        (0..10u64).for_each(|k| assert!(lim.check_key(&k).is_permitted()));
        lim
    };
    let first = build();
    let before = rss();
    let lims: Vec<_> = (0..LIMITERS).map(|_| build()).collect();
    let grown = rss().saturating_sub(before) / LIMITERS;
    // The whole limiter: its table and the struct itself (its verdict counters, 9 KiB, are
    // in the RSS figure only).
    let table = first.table_bytes() + std::mem::size_of_val(&first);
    println!(
        "MEMPROBE rss={grown} table={table} len={} keys=10",
        first.len()
    );
    std::mem::forget((first, lims));
}

/// The parent side: run every probe for `keys` keys and render a markdown table.
pub fn run_all(keys: u64) -> String {
    let exe = std::env::current_exe().expect("current exe");
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n## keyed: bytes per key ({keys} keys, one fresh process per row)\n"
    );
    let _ = writeln!(
        out,
        "| store | key | keys | cap (`max_keys`) | (table_bytes() + limiter) / key | RSS growth / key | total | target |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|");
    for &which in PROBES {
        eprintln!("memory probe: {which}");
        let child = Command::new(&exe)
            .env(PROBE_VAR, which)
            .env(KEYS_VAR, keys.to_string())
            .output()
            .expect("run the memory probe");
        let stdout = String::from_utf8_lossy(&child.stdout);
        let Some(line) = stdout.lines().find(|l| l.starts_with("MEMPROBE")) else {
            let _ = writeln!(
                out,
                "| {which} | probe failed: {} | | | |",
                String::from_utf8_lossy(&child.stderr).trim()
            );
            continue;
        };
        let field = |name: &str| -> f64 {
            line.split_whitespace()
                .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
                .and_then(|v| v.parse().ok())
                .unwrap_or(f64::NAN)
        };
        let (rss, table, len) = (field("rss"), field("table"), field("len"));
        let (store, rest) = which.split_once('-').expect("store-key");
        let key = rest.split('-').next().unwrap_or(rest);
        let cap = match which {
            "tollgate-u64-cap4M" => "4 Mi",
            "tollgate-u64-cap16M" => "16 Mi",
            "tollgate-u64-10keys" => "2^20 (default)",
            _ if store == "tollgate" => "= keys",
            _ => "—",
        };
        let per_key = if table > 0.0 {
            format!("{:.1}", table / len)
        } else {
            "—".into()
        };
        let (total, target) = match which {
            "tollgate-u64-10keys" => (
                format!("{table:.0} B (RSS {rss:.0} B per limiter)"),
                "< 64 KiB in all",
            ),
            _ if store == "tollgate" && key == "u64" => (format!("{:.1} MB", rss / 1e6), "≤ 32"),
            _ => (format!("{:.1} MB", rss / 1e6), ""),
        };
        let _ = writeln!(
            out,
            "| {store} | {key} | {len:.0} | {cap} | {per_key} | {:.1} | {total} | {target} |",
            rss / len
        );
    }
    out
}

//! `tollgate replay --generate FILE`: a sample access log, seeded, in the CSV the replay
//! reads, matching `examples/limits/valid.toml`'s tiers, categories and routes.
//!
//! Ten minutes of traffic from 2026-03-14T08:00:00Z; a few busy keys and a long tail; about
//! 3 % of requests are retries.

use std::io::{BufWriter, Write};
use std::path::Path;

use crate::replay::sim::Rng;
use crate::replay::ReplayError;

/// 2026-03-14T08:00:00Z in epoch ms.
const START_MS: u64 = 1_773_475_200_000;
const SPAN_MS: u64 = 600_000;

/// Category, route and typical bytes; checkout twice as likely as the others.
const SHAPES: [(&str, &str, u64); 4] = [
    ("search", "/v1/search", 2_000),
    ("checkout", "/v1/checkout/pay", 1_800),
    ("checkout", "/v1/checkout/pay", 1_800),
    ("upload", "/v1/uploads/file", 400_000),
];

/// Keys of the hot set: busy integrations, across the tiers.
const HOT: u32 = 20;

/// The tier of a key: half free, four in ten paid, one in ten enterprise.
fn tier_of(key: u32) -> &'static str {
    match key % 10 {
        0..=4 => "free",
        5..=8 => "paid",
        _ => "enterprise",
    }
}

/// Writes `lines` requests from `keys` customers over ten minutes; returns the number
/// written. 30 % of requests come from 20 busy keys (a few requests a second each), the
/// rest evenly from all keys.
pub(crate) fn generate(path: &Path, lines: u64, keys: u32, seed: u64) -> Result<u64, ReplayError> {
    if keys == 0 {
        return Err(ReplayError::Input("--keys must be at least 1".to_owned()));
    }
    let file = std::fs::File::create(path).map_err(|e| ReplayError::io("create", path, e))?;
    let mut w = BufWriter::new(file);
    let io = |e| ReplayError::io("write", path, e);
    let mut rng = Rng::new(seed);
    writeln!(w, "timestamp,key,tier,category,route,status,bytes,attempt").map_err(io)?;
    for i in 0..lines {
        let t = START_MS + SPAN_MS * i / lines.max(1);
        let key = if rng.chance(0.3) {
            rng.below(u64::from(HOT.min(keys))) as u32
        } else {
            rng.below(u64::from(keys)) as u32
        };
        let tier = tier_of(key);
        let (category, route, bytes) = SHAPES[rng.below(SHAPES.len() as u64) as usize];
        let attempt = match rng.below(100) {
            0..=1 => 1,
            2 => 2,
            _ => 0,
        };
        let bytes = bytes / 2 + rng.below(bytes);
        writeln!(
            w,
            "{t},customer-{key:05},{tier},{category},{route},200,{bytes},{attempt}"
        )
        .map_err(io)?;
    }
    w.flush().map_err(io)?;
    Ok(lines)
}

#!/usr/bin/env bash
# Cold build time of a per-IP rate-limited axum app: tollgate (features `axum`, no default
# features) against tower_governor 0.8 (feature `axum` only).
#
#   benches/build_time.sh            # 2 rounds each, alternated: tollgate, governor, ...
#   ROUNDS=3 WORK=/tmp/bt benches/build_time.sh
#
# Two scratch projects are written under $WORK (default /tmp/tollgate-buildtime), outside
# the repository: the same axum 0.8 + tokio app, one with tollgate's layer keyed by
# `PeerIp`, one with tower_governor's `GovernorLayer` (its default key: the peer IP), both
# served with `into_make_service_with_connect_info::<SocketAddr>()`. tollgate is a path
# dependency on a snapshot of this repository's HEAD (`git archive`), so edits made while
# the script runs are not measured. `cargo fetch` runs first: downloads are not timed. Each
# round is `cargo build` (debug, the usual first build) in a fresh, empty target directory,
# timed by wall clock and by CPU (user + sys of cargo and every compiler it ran, from
# /usr/bin/time); the load average before each round is printed, because other work on the
# machine slows the wall clock (CPU seconds much less so).
#
# Prints a markdown table per round and the medians, and each app's crate count
# (`cargo tree -e normal --prefix none | sort -u | wc -l`).
set -euo pipefail

ROUNDS=${ROUNDS:-2}
WORK=${WORK:-/tmp/tollgate-buildtime}
REPO=$(cd "$(dirname "$0")/.." && pwd)
unset RUSTC_WRAPPER CARGO_TARGET_DIR CARGO_BUILD_TARGET_DIR
export CARGO_TERM_COLOR=never

rm -rf "$WORK"
mkdir -p "$WORK/tollgate-src" "$WORK/tollgate-app/src" "$WORK/governor-app/src"
git -C "$REPO" archive HEAD | tar -x -C "$WORK/tollgate-src"

cat >"$WORK/tollgate-app/Cargo.toml" <<EOF
[package]
name = "tollgate-app"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
axum = "0.8"
tokio = { version = "1", features = ["macros", "rt-multi-thread"] }
tollgate = { path = "$WORK/tollgate-src", default-features = false, features = ["axum"] }

[workspace]
EOF
cat >"$WORK/tollgate-app/src/main.rs" <<'EOF'
use std::net::SocketAddr;

use tollgate::http::{PeerIp, RateLimitLayer};
use tollgate::KeyedRateLimiter;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let layer = RateLimitLayer::builder()
        .key(PeerIp::new())
        .limit("per-ip", KeyedRateLimiter::<String>::new("100/min".parse()?))
        .build()?
        .own_body();
    let app = axum::Router::new().fallback(|| async { "ok" }).layer(layer);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
    axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await?;
    Ok(())
}
EOF

cat >"$WORK/governor-app/Cargo.toml" <<'EOF'
[package]
name = "governor-app"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
axum = "0.8"
tokio = { version = "1", features = ["macros", "rt-multi-thread"] }
# Its `axum` feature only: the default also builds tonic, which an HTTP app does not need.
tower_governor = { version = "0.8", default-features = false, features = ["axum"] }

[workspace]
EOF
cat >"$WORK/governor-app/src/main.rs" <<'EOF'
use std::net::SocketAddr;
use std::time::Duration;

use tower_governor::governor::GovernorConfigBuilder;
use tower_governor::GovernorLayer;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let config = GovernorConfigBuilder::default()
        .per_millisecond(600) // 100/min
        .burst_size(100)
        .finish()
        .ok_or("bad governor config")?;
    let limiter = config.limiter().clone();
    std::thread::spawn(move || loop {
        std::thread::sleep(Duration::from_secs(60));
        limiter.retain_recent();
    });
    let app = axum::Router::new()
        .fallback(|| async { "ok" })
        .layer(GovernorLayer::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
    axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await?;
    Ok(())
}
EOF

for app in tollgate governor; do
  (cd "$WORK/$app-app" && cargo generate-lockfile -q && cargo fetch -q)
done

crates() {
  (cd "$WORK/$1-app" && cargo tree -e normal --prefix none --locked | sort -u | wc -l)
}
echo "crates (cargo tree -e normal --prefix none | sort -u | wc -l):"
echo "  tollgate-app: $(crates tollgate)   governor-app: $(crates governor)"
echo "rustc: $(rustc --version)   cores: $(nproc)"
echo
echo "| round | app | wall s | CPU s (user+sys) | load before (1/5/15 min) |"
echo "|---|---|---|---|---|"
results="$WORK/results.txt"
: >"$results"
for round in $(seq 1 "$ROUNDS"); do
  for app in tollgate governor; do
    target="$WORK/target-$app-$round"
    rm -rf "$target"
    load=$(cut -d' ' -f1-3 /proc/loadavg)
    start=$(date +%s.%N)
    (cd "$WORK/$app-app" && CARGO_TARGET_DIR="$target" /usr/bin/time -f '%U %S' \
      -o "$WORK/time.txt" cargo build --locked --offline -q)
    end=$(date +%s.%N)
    wall=$(awk -v s="$start" -v e="$end" 'BEGIN { printf "%.1f", e - s }')
    cpu=$(awk '{ printf "%.1f", $1 + $2 }' "$WORK/time.txt")
    printf '| %d | %s | %.1f | %s | %s |\n' "$round" "$app" "$wall" "$cpu" "$load"
    echo "$app $wall $cpu" >>"$results"
    rm -rf "$target"
  done
done
echo
echo "medians:"
for app in tollgate governor; do
  wall=$(awk -v a="$app" '$1 == a { print $2 }' "$results" | sort -n |
    awk '{ v[NR] = $1 } END { printf "%.1f", (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }')
  cpu=$(awk -v a="$app" '$1 == a { print $3 }' "$results" | sort -n |
    awk '{ v[NR] = $1 } END { printf "%.1f", (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }')
  echo "  $app: wall $wall s, CPU $cpu s"
done

#!/usr/bin/env bash
# The stated minimum Rust versions on the real toolchains, the core on wasm32-unknown-unknown,
# and `cargo package` with its verify build. Called by .ci/run; runs alone as well.
#
#   1.85: the library with every feature but `redis` (rust-version in Cargo.toml)
#   1.88: every feature, and the tests, benches and examples (their dev-dependencies)
#   wasm32-unknown-unknown: the core without default features, and with `serde`
#
# Each toolchain builds in its own target dir; all use the committed Cargo.lock (--locked): a
# fresh resolve may pull newer crates that need a newer compiler (docs/msrv.md).
set -euo pipefail
cd "$(dirname "$0")/.."

rustup toolchain install 1.85 1.88 --profile minimal >/dev/null
rustup target add wasm32-unknown-unknown >/dev/null

t=$(date +%s)
CARGO_TARGET_DIR=target/msrv-1.85 cargo +1.85 check --locked --lib --no-default-features \
  --features serde,config,cli,metrics,tracing,tokio,tower,axum
echo "rust 1.85, every feature but redis: $(( $(date +%s) - t )) s"

t=$(date +%s)
CARGO_TARGET_DIR=target/msrv-1.88 cargo +1.88 check --locked --all-targets --all-features
echo "rust 1.88, every feature and target: $(( $(date +%s) - t )) s"

t=$(date +%s)
cargo check --locked --lib --target wasm32-unknown-unknown --no-default-features
cargo check --locked --lib --target wasm32-unknown-unknown --no-default-features --features serde
echo "wasm32-unknown-unknown: $(( $(date +%s) - t )) s"

t=$(date +%s)
cargo package --locked --allow-dirty
echo "cargo package (verified): $(( $(date +%s) - t )) s"

#!/usr/bin/env bash
# Load figures for the gateway layer (issue 11): requests per second through
# `benches/gateway_server.rs` with no layer ("bare") and with the layer ("keyed", "limits"),
# driven by wrk on loopback, 1 and 64 connections. Paired rounds: each round runs every mode
# once, in turn, for DURATION seconds; the figure is the median over rounds of
# layer ÷ bare. Bounded: ROUNDS × 3 modes × 2 connection counts × DURATION seconds.
#
#   benches/wrk.sh            # ROUNDS=5 DURATION=3 by default
#   ROUNDS=9 DURATION=5 benches/wrk.sh
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-5}
DURATION=${DURATION:-3}
command -v wrk >/dev/null || apt-get install -y wrk >/dev/null

cargo bench --no-run --features tower --bench gateway_server 2>/dev/null
SERVER=$(ls -t target/release/deps/gateway_server-* | grep -v '\.d$' | head -n1)

start() { # mode port
  "$SERVER" --listen "127.0.0.1:$2" --mode "$1" >/dev/null &
  echo $!
  for _ in $(seq 50); do
    curl -s -o /dev/null "http://127.0.0.1:$2/" && return 0
    sleep 0.1
  done
}

rps() { # port connections
  wrk -t1 -c"$2" -d"${DURATION}s" -H 'x-api-key: bench-key' -H 'x-tier: paid' \
    "http://127.0.0.1:$1/v1/search" | awk '/Requests\/sec/ {print $2}'
}

median() { sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
quartiles() { sort -g | awk '{v[NR]=$1} END {printf "%s-%s", v[int((NR+3)/4)], v[int((3*NR+1)/4)]}'; }
summary() { # file of "bare keyed limits" lines, one per round
  local f=$1
  printf 'median: bare %s req/s; keyed/bare %s (IQR %s); limits/bare %s (IQR %s)\n' \
    "$(cut -d' ' -f1 "$f" | median)" \
    "$(awk '{printf "%.3f\n", $2/$1}' "$f" | median)" "$(awk '{printf "%.3f\n", $2/$1}' "$f" | quartiles)" \
    "$(awk '{printf "%.3f\n", $3/$1}' "$f" | median)" "$(awk '{printf "%.3f\n", $3/$1}' "$f" | quartiles)"
}

declare -A PORT=([bare]=18301 [keyed]=18302 [limits]=18303)
PIDS=()
for m in bare keyed limits; do PIDS+=("$(start "$m" "${PORT[$m]}")"); done
trap 'kill "${PIDS[@]}" 2>/dev/null || true' EXIT

echo "machine: $(nproc) cores, $(uname -r); wrk 1 thread; server 1 worker thread"
for c in 1 64; do
  echo "== $c connection(s), $ROUNDS rounds of ${DURATION}s per mode"
  : > /tmp/tollgate-wrk-$c
  for r in $(seq "$ROUNDS"); do
    b=$(rps "${PORT[bare]}" "$c"); k=$(rps "${PORT[keyed]}" "$c"); l=$(rps "${PORT[limits]}" "$c")
    echo "round $r: bare $b  keyed $k  limits $l req/s"
    echo "$b $k $l" >> /tmp/tollgate-wrk-$c
  done
  summary "/tmp/tollgate-wrk-$c"
done

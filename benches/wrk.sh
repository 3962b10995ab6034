#!/usr/bin/env bash
# Load figures for the gateway layer: `benches/gateway_server.rs` with no layer
# ("bare") and with the layer ("keyed", "limits"), driven by wrk on loopback, 1 and 64
# connections. Two figures per run: requests per second (wall clock: on a shared machine
# other load moves it a lot), and the server's CPU time per request (the sum of its threads'
# on-CPU nanoseconds from /proc/PID/task/*/schedstat, divided by the requests wrk counted:
# much steadier under other load). Paired rounds: each round runs every mode once, in turn,
# for DURATION seconds; the figures are medians over rounds of layer ÷ bare.
# Bounded: ROUNDS × 3 modes × 2 connection counts × DURATION seconds.
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
  echo $! > "/tmp/tollgate-wrk-pid-$1"
  for _ in $(seq 50); do
    curl -s -o /dev/null "http://127.0.0.1:$2/" && return 0
    sleep 0.1
  done
}

cpu_ns() { # pid: on-CPU nanoseconds of all its threads
  cat /proc/"$1"/task/*/schedstat | awk '{s += $1} END {printf "%.0f", s}'
}

measure() { # mode connections -> "req/s cpu-ns-per-request"
  local pid; pid=$(cat "/tmp/tollgate-wrk-pid-$1")
  local before; before=$(cpu_ns "$pid")
  local out; out=$(wrk -t1 -c"$2" -d"${DURATION}s" -H 'x-api-key: bench-key' -H 'x-tier: paid' \
    "http://127.0.0.1:${PORT[$1]}/v1/search")
  local after; after=$(cpu_ns "$pid")
  local rps; rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
  local n; n=$(awk '/requests in/ {print $1}' <<<"$out")
  echo "$rps $(( (after - before) / n ))"
}

median() { sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
quartiles() { sort -g | awk '{v[NR]=$1} END {printf "%s-%s", v[int((NR+3)/4)], v[int((3*NR+1)/4)]}'; }
ratio() { awk -v a="$1" -v b="$2" '{printf "%.3f\n", $a/$b}' "$3"; }
summary() { # file of "bare keyed limits bare-ns keyed-ns limits-ns" lines, one per round
  local f=$1
  printf 'median req/s: bare %s; keyed/bare %s (IQR %s); limits/bare %s (IQR %s)\n' \
    "$(cut -d' ' -f1 "$f" | median)" \
    "$(ratio 2 1 "$f" | median)" "$(ratio 2 1 "$f" | quartiles)" \
    "$(ratio 3 1 "$f" | median)" "$(ratio 3 1 "$f" | quartiles)"
  printf 'median CPU ns/request: bare %s; keyed/bare %s (IQR %s); limits/bare %s (IQR %s)\n' \
    "$(cut -d' ' -f4 "$f" | median)" \
    "$(ratio 5 4 "$f" | median)" "$(ratio 5 4 "$f" | quartiles)" \
    "$(ratio 6 4 "$f" | median)" "$(ratio 6 4 "$f" | quartiles)"
}

declare -A PORT=([bare]=18301 [keyed]=18302 [limits]=18303)
for m in bare keyed limits; do start "$m" "${PORT[$m]}"; done
trap 'for m in bare keyed limits; do kill "$(cat /tmp/tollgate-wrk-pid-$m)" 2>/dev/null || true; done' EXIT

echo "machine: $(nproc) cores, $(uname -r); wrk 1 thread; server 1 worker thread"
for c in 1 64; do
  echo "== $c connection(s), $ROUNDS rounds of ${DURATION}s per mode"
  : > /tmp/tollgate-wrk-$c
  for r in $(seq "$ROUNDS"); do
    read -r b bc <<<"$(measure bare "$c")"
    read -r k kc <<<"$(measure keyed "$c")"
    read -r l lc <<<"$(measure limits "$c")"
    echo "round $r: req/s bare $b keyed $k limits $l; CPU ns/request bare $bc keyed $kc limits $lc"
    echo "$b $k $l $bc $kc $lc" >> /tmp/tollgate-wrk-$c
  done
  summary "/tmp/tollgate-wrk-$c"
done

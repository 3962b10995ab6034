#!/usr/bin/env bash
# SharedRateLimiter vs redis-benchmark running the same EVALSHA against the same server, in one
# run: checks per second and p50/p99 latency with 1 and 64 concurrent tasks (redis-benchmark:
# clients), denials answered from the deny cache (no round trip), and one hot customer
# (10000/s;burst=1000, 64 tasks on it) without and with lease(20): HOT_SECONDS (default 2)
# of checks after an untimed warm-up that makes the customer hot.
#
#   benches/redis.sh            # starts its own redis-server on a free port (persistence off)
#   REDIS_PORT=6390 benches/redis.sh   # or uses a running one
#   CHECKS=100000 ROUNDS=5 HOT_SECONDS=5 benches/redis.sh
#
# Both sides send the same command: EVALSHA <sha> 1 bench:rb:{<customer>} "" 1 0 10000 1000000
# (server TIME, charge, no TTL floor, w = T = 10 ms and τ = 1 s: the quota 100/s), customers
# drawn from 100,000. The ratio is tollgate's rate ÷ redis-benchmark's (target ≥ 0.8), per
# round with the two sides alternating who goes first; the median of the rounds is the figure.
# tollgate's round trips are counted too (one per check, plus one warm-up).
set -euo pipefail
cd "$(dirname "$0")/.."
CHECKS=${CHECKS:-50000}
HOT_SECONDS=${HOT_SECONDS:-2}
ROUNDS=${ROUNDS:-3}

if [ -z "${REDIS_PORT:-}" ]; then
  REDIS_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  PIDFILE=$(mktemp -u /tmp/tollgate-bench-redis.XXXXXX.pid)
  redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no \
    --daemonize yes --pidfile "$PIDFILE" --logfile /dev/null
  trap '[ -s "$PIDFILE" ] && kill "$(cat "$PIDFILE")"' EXIT
  for _ in $(seq 100); do redis-cli -p "$REDIS_PORT" ping 2>/dev/null | grep -q PONG && break; sleep 0.1; done
fi
URL="redis://127.0.0.1:$REDIS_PORT/"
SHA=$(redis-cli -p "$REDIS_PORT" SCRIPT LOAD "$(cat src/redis/gcra.lua)")
BIN=$(cargo bench --quiet --features redis --no-run --bench redis --message-format=json \
  | sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -n 1)

echo "redis-server $(redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p'), script $SHA, $CHECKS checks per row, $ROUNDS paired rounds"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"

redis_benchmark() { # tasks -> "rps p50 p99"
  redis-cli -p "$REDIS_PORT" FLUSHALL >/dev/null
  redis-benchmark -p "$REDIS_PORT" -c "$1" -n "$CHECKS" -r 100000 --csv \
    EVALSHA "$SHA" 1 'bench:rb:{__rand_int__}' '' 1 0 10000 1000000 | tail -n 1 |
    # "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
    awk -F, '{ gsub(/"/, ""); print $2, $5, $7 }'
}
tollgate() { # tasks -> "rps p50 p99"
  redis-cli -p "$REDIS_PORT" FLUSHALL >/dev/null
  "$BIN" "$URL" "$1" "$CHECKS" | sed -n 's/.*rps=\([0-9]*\) p50_ms=\([0-9.]*\) p99_ms=\([0-9.]*\) round_trips=\([0-9]*\).*/\1 \2 \3 \4/p'
}
for tasks in 1 64; do
  ratios=()
  for round in $(seq "$ROUNDS"); do
    # Alternate which side goes first, so a drift in the machine's load is shared.
    if [ $((round % 2)) -eq 1 ]; then rb=$(redis_benchmark "$tasks"); tg=$(tollgate "$tasks")
    else tg=$(tollgate "$tasks"); rb=$(redis_benchmark "$tasks"); fi
    read -r rb_rps rb_p50 rb_p99 <<<"$rb"
    read -r tg_rps tg_p50 tg_p99 tg_trips <<<"$tg"
    ratio=$(python3 -c "print(f'{$tg_rps/$rb_rps:.2f}')")
    ratios+=("$ratio")
    echo "tasks=$tasks round=$round redis-benchmark: rps=$rb_rps p50_ms=$rb_p50 p99_ms=$rb_p99 | tollgate: rps=$tg_rps p50_ms=$tg_p50 p99_ms=$tg_p99 round_trips=$tg_trips | ratio=$ratio"
  done
  echo "tasks=$tasks median ratio: $(printf '%s\n' "${ratios[@]}" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')"
done
"$BIN" "$URL" 64 "$CHECKS" cached | sed 's/^/cached denials: /'
# One hot customer at 10000/s;burst=1000, every task on it: without leases, then lease(20).
for mode in hot hot-lease; do
  for round in $(seq "$ROUNDS"); do
    redis-cli -p "$REDIS_PORT" FLUSHALL >/dev/null
    "$BIN" "$URL" 64 0 "$mode" "$HOT_SECONDS" | sed "s/^/$mode round=$round: /"
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"

#!/usr/bin/env bash
# SharedRateLimiter vs redis-benchmark running the same EVALSHA against the same server, in one
# run: checks per second and p50/p99 latency with 1 and 64 concurrent tasks (redis-benchmark:
# clients), and denials answered from the deny cache (no round trip).
#
#   benches/redis.sh            # starts its own redis-server on a free port (persistence off)
#   REDIS_PORT=6390 benches/redis.sh   # or uses a running one
#   CHECKS=100000 benches/redis.sh
#
# Both sides send the same command: EVALSHA <sha> 1 bench:rb:{<customer>} "" 1 0 10000 1000000
# (server TIME, charge, no TTL floor, w = T = 10 ms and τ = 1 s: the quota 100/s), customers
# drawn from 100,000. The ratio is tollgate's rate ÷ redis-benchmark's (target ≥ 0.8).
set -euo pipefail
cd "$(dirname "$0")/.."
CHECKS=${CHECKS:-100000}

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

echo "redis-server $(redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p'), script $SHA, $CHECKS checks per row"
for tasks in 1 64; do
  redis-cli -p "$REDIS_PORT" FLUSHALL >/dev/null
  rb=$(redis-benchmark -p "$REDIS_PORT" -c "$tasks" -n "$CHECKS" -r 100000 --csv \
    EVALSHA "$SHA" 1 'bench:rb:{__rand_int__}' '' 1 0 10000 1000000 | tail -n 1)
  # "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
  rb_rps=$(echo "$rb" | cut -d, -f2 | tr -d '"')
  rb_p50=$(echo "$rb" | cut -d, -f5 | tr -d '"')
  rb_p99=$(echo "$rb" | cut -d, -f7 | tr -d '"')
  redis-cli -p "$REDIS_PORT" FLUSHALL >/dev/null
  tg=$("$BIN" "$URL" "$tasks" "$CHECKS")
  tg_rps=$(echo "$tg" | sed -n 's/.*rps=\([0-9]*\).*/\1/p')
  ratio=$(python3 -c "print(f'{$tg_rps/$rb_rps:.2f}')")
  echo "tasks=$tasks redis-benchmark rps=$rb_rps p50_ms=$rb_p50 p99_ms=$rb_p99 | $tg | ratio=$ratio"
done
"$BIN" "$URL" 64 "$CHECKS" cached | sed 's/^/cached denials: /'

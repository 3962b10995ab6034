#!/usr/bin/env bash
# Instructions (Ir) per request through `benches/gateway_server.rs` under callgrind, in
# each mode: the server runs under valgrind, wrk warms it for 2 s, the counters are zeroed,
# wrk runs DURATION seconds on one connection, the counters are dumped; Ir per request is
# the dump's total over the requests wrk counted. Stable where wall-clock figures are not.
#
#   benches/callgrind_gateway.sh        # DURATION=5
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${DURATION:-5}
command -v wrk >/dev/null || apt-get install -y wrk >/dev/null
command -v valgrind >/dev/null || apt-get install -y valgrind >/dev/null
cargo bench --no-run --features tower --bench gateway_server 2>/dev/null
SERVER=$(ls -t target/release/deps/gateway_server-* | grep -v '\.d$' | head -n1)
OUT=$(mktemp -d)
port=18350
for mode in bare noop keyed keyed-off limits; do
  port=$((port + 1))
  valgrind --tool=callgrind --callgrind-out-file="$OUT/cg.$mode.%p" \
    "$SERVER" --listen "127.0.0.1:$port" --mode "$mode" >/dev/null 2>&1 &
  pid=$!
  for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$port/" && break; sleep 0.2; done
  args=(-t1 -c1 -H 'x-api-key: bench-key' -H 'x-tier: paid' "http://127.0.0.1:$port/v1/search")
  wrk -d2s "${args[@]}" >/dev/null
  callgrind_control -z "$pid" >/dev/null 2>&1
  n=$(wrk -d"${DURATION}s" "${args[@]}" | awk '/requests in/ {print $1}')
  callgrind_control -d "$pid" >/dev/null 2>&1
  kill "$pid"; wait "$pid" 2>/dev/null || true
  ir=$(grep -h '^totals:' "$OUT"/cg."$mode".*.1 | awk '{print $2}')
  echo "$mode: $n requests, $((ir / n)) Ir per request"
done
[ -n "${KEEP:-}" ] && echo "profiles kept in $OUT" || rm -rf "$OUT"

#!/usr/bin/env bash
# The gateway layer against tower_governor over real sockets: wrk on loopback
# against `benches/gateway_server.rs` in five modes — bare, tollgate as the README sets it up
# (`own`: IETF fields, `own_body()`), the same with `HeaderMode::Off` (`own-off`),
# tower_governor 0.8 keyed by the same header (`governor`) and with `use_headers()`
# (`governor-headers`) — one connection, 64 keys rotating (a wrk Lua script). Paired rounds:
# each round runs every mode once, in turn, for DURATION seconds. Two figures per mode and
# round: requests per second, and the server's CPU time per request (its threads' on-CPU ns
# from /proc/PID/task/*/schedstat over the requests wrk counted: steadier than wall time on a
# shared machine). Printed: the medians over rounds of each mode ÷ bare, and the overhead
# ratios (mode − bare) ÷ (governor's − bare) in CPU time per request.
#
#   benches/wrk_layer.sh               # ROUNDS=5 DURATION=3
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-5}
DURATION=${DURATION:-3}
command -v wrk >/dev/null || apt-get install -y wrk >/dev/null

cargo bench --no-run --features tower --bench gateway_server 2>/dev/null
SERVER=$(ls -t target/release/deps/gateway_server-* | grep -v '\.d$' | head -n1)
MODES=(bare own own-off governor governor-headers)
LUA=$(mktemp --suffix .lua)
cat > "$LUA" <<'LUA'
local i = 0
request = function()
  i = i + 1
  return wrk.format("GET", "/v1/search", { ["x-api-key"] = "key-" .. (i % 64) })
end
LUA
declare -A PORT PID
port=18400
for m in "${MODES[@]}"; do
  port=$((port + 1)); PORT[$m]=$port
  "$SERVER" --listen "127.0.0.1:$port" --mode "$m" >/dev/null &
  PID[$m]=$!
done
trap 'for m in "${MODES[@]}"; do kill "${PID[$m]}" 2>/dev/null || true; done; rm -f "$LUA"' EXIT
for m in "${MODES[@]}"; do
  for _ in $(seq 50); do curl -s -o /dev/null "http://127.0.0.1:${PORT[$m]}/" && break; sleep 0.1; done
done

cpu_ns() { cat /proc/"$1"/task/*/schedstat | awk '{s += $1} END {printf "%.0f", s}'; }
measure() { # mode -> "req/s cpu-ns-per-request"
  local before after out rps n
  before=$(cpu_ns "${PID[$1]}")
  out=$(wrk -t1 -c1 -d"${DURATION}s" -s "$LUA" "http://127.0.0.1:${PORT[$1]}/v1/search")
  after=$(cpu_ns "${PID[$1]}")
  rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
  n=$(awk '/requests in/ {print $1}' <<<"$out")
  echo "$rps $(( (after - before) / n ))"
}
median() { sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }

echo "machine: $(nproc) cores; wrk 1 thread, 1 connection; server 1 worker thread; $ROUNDS rounds of ${DURATION}s per mode"
declare -A RPS NS
for r in $(seq "$ROUNDS"); do
  line="round $r:"
  for m in "${MODES[@]}"; do
    read -r rps ns <<<"$(measure "$m")"
    RPS[$m]+="$rps "; NS[$m]+="$ns "
    line+=" $m $rps req/s ${ns} ns;"
  done
  echo "$line"
done
# Per-round ratios, then their medians.
ratios() { # mode field(RPS|NS) -> median of mode/bare over rounds
  local -n arr=$2
  paste <(tr ' ' '\n' <<<"${arr[$1]}" | sed '/^$/d') <(tr ' ' '\n' <<<"${arr[bare]}" | sed '/^$/d') \
    | awk '{printf "%.3f\n", $1/$2}' | median
}
over() { # a b -> median over rounds of (ns_a - ns_bare) / (ns_b - ns_bare)
  paste <(tr ' ' '\n' <<<"${NS[$1]}" | sed '/^$/d') <(tr ' ' '\n' <<<"${NS[$2]}" | sed '/^$/d') \
    <(tr ' ' '\n' <<<"${NS[bare]}" | sed '/^$/d') | awk '{printf "%.3f\n", ($1-$3)/($2-$3)}' | median
}
for m in own own-off governor governor-headers; do
  echo "$m: req/s ÷ bare $(ratios "$m" RPS); CPU ns/request ÷ bare $(ratios "$m" NS)"
done
echo "CPU overhead, own ÷ governor-headers: $(over own governor-headers)"
echo "CPU overhead, own-off ÷ governor: $(over own-off governor)"

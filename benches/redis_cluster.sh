#!/usr/bin/env bash
# SharedRateLimiter's checks per second on a Redis Cluster beside one server, in one run, with
# redis-benchmark's figure for the same EVALSHA on the one server (its --cluster mode routes a
# command by its first argument, which for EVALSHA is the SHA, not the key: it cannot run it).
#
#   benches/redis_cluster.sh                 # 3 masters (no replicas) + one server, free ports
#   CHECKS=100000 ROUNDS=5 benches/redis_cluster.sh
#   MODES=hot benches/redis_cluster.sh       # only the hot-customer rows (plain: only the first)
#
# Plain rows: customers drawn from 100,000 (hash tags spread them over every master), quota
# 100/s each: nearly every check is allowed, one round trip each. Hot rows (benches/redis.rs
# hot, hots): 64 tasks on one customer at 10000/s;burst=1000, then on twelve customers at
# 2000/s;burst=200 spread over the masters, each without and with lease(20): HOT_SECONDS
# (default 2) of checks per row after an untimed warm-up that makes every customer hot (rate
# · lease_time checks each). Script calls per check are the client's round trips in the timed
# part (the scripts are loaded beforehand: no EVAL after a NOSCRIPT); "admitted" is the share
# of rate·elapsed (the customers are saturated when the timing starts). On one machine the
# cluster's three servers share its cores with the client, so the figures say what routing
# costs the client, not what three machines would serve.
set -euo pipefail
cd "$(dirname "$0")/.."
CHECKS=${CHECKS:-50000}
HOT_SECONDS=${HOT_SECONDS:-2}
ROUNDS=${ROUNDS:-3}
MODES=${MODES:-plain hot}
DIR=$(mktemp -d /tmp/tollgate-bench-cluster.XXXXXX)
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$DIR" || true; }
trap cleanup EXIT

start() { # port [extra args...]
  local port=$1; shift
  mkdir -p "$DIR/$port"
  (cd "$DIR/$port" && exec redis-server --port "$port" --bind 127.0.0.1 --save '' \
    --appendonly no --logfile "$DIR/$port/log" "$@") &
  PIDS+=($!)
  for _ in $(seq 100); do redis-cli -p "$port" ping 2>/dev/null | grep -q PONG && return; sleep 0.1; done
  echo "redis-server on $port did not start" >&2; exit 1
}

SINGLE=$(free_port); start "$SINGLE"
NODES=()
for _ in 1 2 3; do
  p=$(free_port); bus=$(free_port)
  start "$p" --cluster-enabled yes --cluster-port "$bus" --cluster-node-timeout 2000 \
    --cluster-config-file nodes.conf
  NODES+=("127.0.0.1:$p")
done
redis-cli --cluster create "${NODES[@]}" --cluster-replicas 0 --cluster-yes >/dev/null
FIRST=${NODES[0]#127.0.0.1:}
for _ in $(seq 100); do
  ok=1
  for n in "${NODES[@]}"; do
    info=$(redis-cli -p "${n#127.0.0.1:}" cluster info)
    # Every node ok, knowing every node and every slot (else a client's first slot map may
    # come from a node that has not heard of all of them yet).
    grep -q 'cluster_state:ok' <<<"$info" && grep -q 'cluster_known_nodes:3' <<<"$info" \
      && grep -q 'cluster_slots_ok:16384' <<<"$info" || ok=0
  done
  [ "$ok" = 1 ] && break; sleep 0.1
done

BIN=$(cargo bench --quiet --features redis --no-run --bench redis --message-format=json \
  | sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -n 1)
SCRIPT="$(cat src/redis/gcra.lua)"
SHA=$(redis-cli -p "$SINGLE" SCRIPT LOAD "$SCRIPT")
for n in "${NODES[@]}"; do redis-cli -p "${n#127.0.0.1:}" SCRIPT LOAD "$SCRIPT" >/dev/null; done
echo "redis-server $(redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p'): one server on $SINGLE, a cluster of 3 masters from $FIRST; $CHECKS checks per row, $ROUNDS rounds"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"

flush() { redis-cli -p "$SINGLE" FLUSHALL >/dev/null; for n in "${NODES[@]}"; do redis-cli -p "${n#127.0.0.1:}" FLUSHALL >/dev/null; done; }
tollgate() { # url tasks -> rps
  flush
  "$BIN" "$1" "$2" "$CHECKS" | sed -n 's/.*rps=\([0-9]*\).*fallbacks=\([0-9]*\).*/\1 \2/p'
}
bench() { # port tasks -> rps
  flush
  redis-benchmark -p "$1" -c "$2" -n "$CHECKS" -r 100000 --csv \
    EVALSHA "$SHA" 1 'bench:rb:{__rand_int__}' '' 1 0 10000 1000000 | tail -n 1 |
    awk -F, '{ gsub(/"/, ""); print int($2) }'
}
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
if [[ " $MODES " == *" plain "* ]]; then
  for tasks in 1 64; do
    one=(); clu=(); rb1=()
    for round in $(seq "$ROUNDS"); do
      read -r a fa <<<"$(tollgate "redis://127.0.0.1:$SINGLE/" "$tasks")"
      read -r b fb <<<"$(tollgate "redis://127.0.0.1:$FIRST/" "$tasks")"
      c=$(bench "$SINGLE" "$tasks")
      [ "$fa" = 0 ] && [ "$fb" = 0 ] || { echo "fallbacks: one server $fa, cluster $fb" >&2; exit 1; }
      echo "tasks=$tasks round=$round tollgate: one server $a/s, cluster $b/s | redis-benchmark, one server: $c/s"
      one+=("$a"); clu+=("$b"); rb1+=("$c")
    done
    m1=$(printf '%s\n' "${one[@]}" | median); mc=$(printf '%s\n' "${clu[@]}" | median)
    r1=$(printf '%s\n' "${rb1[@]}" | median)
    echo "tasks=$tasks median: tollgate one server $m1/s, cluster $mc/s (cluster ÷ one $(python3 -c "print(f'{$mc/$m1:.2f}')")); redis-benchmark one server $r1/s"
  done
fi

# Hot customers, without and with lease(20), on one server and on the cluster.
hot_row() { # url mode -> "rps calls_per_check admitted_share"
  flush
  local out rps checks trips fb admitted steady
  out=$("$BIN" "$1" 64 0 "$2" "$HOT_SECONDS")
  rps=$(sed -n 's/.*rps=\([0-9]*\) .*/\1/p' <<<"$out")
  checks=$(sed -n 's/.* checks=\([0-9]*\) .*/\1/p' <<<"$out")
  trips=$(sed -n 's/.*round_trips=\([0-9]*\) .*/\1/p' <<<"$out")
  fb=$(sed -n 's/.*fallbacks=\([0-9]*\) .*/\1/p' <<<"$out")
  admitted=$(sed -n 's/.*admitted=\([0-9]*\) .*/\1/p' <<<"$out")
  steady=$(sed -n 's/.*rate_elapsed=\([0-9]*\) .*/\1/p' <<<"$out")
  [ "$fb" = 0 ] || { echo "$2 on $1: $fb fallbacks" >&2; exit 1; }
  python3 -c "print(f'$rps {$trips/$checks:.4f} {100*$admitted/$steady:.1f}')"
}
if [[ " $MODES " == *" hot "* ]]; then
  CLUSTER_PORTS=(); for n in "${NODES[@]}"; do CLUSTER_PORTS+=("${n#127.0.0.1:}"); done
  flush
  for i in $(seq 0 11); do redis-cli -c -p "$FIRST" SET "bench:rb:{hot$i}" 1 >/dev/null; done
  for p in "${CLUSTER_PORTS[@]}"; do echo "master $p holds $(redis-cli -p "$p" DBSIZE) of the twelve hot customers"; done
  for mode in hot hot-lease hots hots-lease; do
    one=(); clu=()
    for round in $(seq "$ROUNDS"); do
      # Alternate which side goes first, so a drift in the machine's load is shared.
      if [ $((round % 2)) -eq 1 ]; then
        a=$(hot_row "redis://127.0.0.1:$SINGLE/" "$mode")
        b=$(hot_row "redis://127.0.0.1:$FIRST/" "$mode")
      else
        b=$(hot_row "redis://127.0.0.1:$FIRST/" "$mode")
        a=$(hot_row "redis://127.0.0.1:$SINGLE/" "$mode")
      fi
      read -r a_rps a_cpc a_adm <<<"$a"; read -r b_rps b_cpc b_adm <<<"$b"
      echo "$mode round=$round one server: $a_rps/s, $a_cpc calls/check, admitted $a_adm % of rate·elapsed | cluster: $b_rps/s, $b_cpc calls/check, admitted $b_adm %"
      one+=("$a_rps"); clu+=("$b_rps")
    done
    m1=$(printf '%s\n' "${one[@]}" | median); mc=$(printf '%s\n' "${clu[@]}" | median)
    echo "$mode median: one server $m1/s, cluster $mc/s (cluster ÷ one $(python3 -c "print(f'{$mc/$m1:.2f}')"))"
    eval "M1_${mode//-/_}=$m1; MC_${mode//-/_}=$mc"
  done
  ratio() { python3 -c "print(f'{$1/$2:.1f}')"; }
  echo "with ÷ without leases, one customer: one server $(ratio "$M1_hot_lease" "$M1_hot")x, cluster $(ratio "$MC_hot_lease" "$MC_hot")x"
  echo "with ÷ without leases, twelve customers: one server $(ratio "$M1_hots_lease" "$M1_hots")x, cluster $(ratio "$MC_hots_lease" "$MC_hots")x"
fi
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"

#!/usr/bin/env bash
# Instructions (Ir) per request through the gateway layer and tower_governor's, in process, with
# callgrind: no sockets, no runtime, so the counts repeat where a server's do not.
#
#   benches/callgrind_layer.sh                     # every variant
#   benches/callgrind_layer.sh bare tollgate-off   # some (the table's ratios need all five)
#   N1=2000 N2=10000 benches/callgrind_layer.sh
#
# For each variant it runs benches/layer_ir.rs (feature `tower`; bench profile: release + no
# overflow checks, as `cargo bench`; one codegen unit, in its own target dir, so that edits
# elsewhere in the crate cannot move the partition boundaries and with them the inlining)
# under callgrind twice, with N1 and N2 requests, collecting only inside `measured` (the
# calls of an axum router as a tower `Service`, each future polled to completion with a no-op
# waker, and the dropping of the responses; the requests are built and the 64 keys warmed
# before it), and prints (Ir(N2) − Ir(N1)) / (N2 − N1): the instructions one more request
# costs. The overhead column is a variant's figure minus `bare`'s (`noop`, a layer that does
# nothing, is what axum charges for adding any layer).
set -euo pipefail
cd "$(dirname "$0")/.."

N1=${N1:-1000}
N2=${N2:-5000}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target/callgrind-layer} CARGO_PROFILE_BENCH_CODEGEN_UNITS=1
command -v valgrind >/dev/null || apt-get install -y valgrind >/dev/null
BIN=$(cargo bench --quiet --no-run --features tower --bench layer_ir --message-format=json \
  | sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -n 1)
OUT=$(mktemp -d)
[ -n "${KEEP:-}" ] || trap 'rm -rf "$OUT"' EXIT

if [ "$#" -gt 0 ]; then
  VARIANTS=("$@")
else
  VARIANTS=(bare noop tollgate-fields tollgate-off tollgate-settle tollgate-own-fields tollgate-own-off governor-keyed governor-headers)
fi

ir() { # variant n -> total Ir collected inside `measured`
  valgrind --tool=callgrind --callgrind-out-file="$OUT/cg.$1.$2" \
    --toggle-collect='*layer_ir::measured*' "$BIN" "$1" "$2" 2>"$OUT/log.$1.$2" >"$OUT/out.$1.$2"
  sed -n 's/^summary: *//p' "$OUT/cg.$1.$2"
}

declare -A PER
printf '| variant | Ir(%s) | Ir(%s) | Ir/request | overhead over bare |\n|---|---:|---:|---:|---:|\n' "$N1" "$N2"
for v in "${VARIANTS[@]}"; do
  a=$(ir "$v" "$N1")
  b=$(ir "$v" "$N2")
  PER[$v]=$(awk -v a="$a" -v b="$b" -v n1="$N1" -v n2="$N2" 'BEGIN { printf "%.2f", (b - a) / (n2 - n1) }')
  over=—
  [ "$v" != bare ] && [ -n "${PER[bare]:-}" ] \
    && over=$(awk -v x="${PER[$v]}" -v b="${PER[bare]}" 'BEGIN { printf "%.2f", x - b }')
  printf '| %s | %s | %s | %s | %s |\n' "$v" "$a" "$b" "${PER[$v]}" "$over"
done

ratio() { # label variant-a variant-b: (a − bare) / (b − bare)
  [ -n "${PER[bare]:-}" ] && [ -n "${PER[$2]:-}" ] && [ -n "${PER[$3]:-}" ] || return 0
  awk -v a="${PER[$2]}" -v b="${PER[$3]}" -v z="${PER[bare]}" -v l="$1" \
    'BEGIN { printf "%s: %.3f\n", l, (a - z) / (b - z) }'
}
echo
ratio "overhead, tollgate-fields / governor-headers" tollgate-fields governor-headers
ratio "overhead, tollgate-off / governor-keyed" tollgate-off governor-keyed
ratio "overhead, tollgate-own-fields / governor-headers" tollgate-own-fields governor-headers
ratio "overhead, tollgate-own-off / governor-keyed" tollgate-own-off governor-keyed
ratio "overhead, tollgate-settle / tollgate-fields (a settle callback vs none)" tollgate-settle tollgate-fields
[ -z "${KEEP:-}" ] || echo "profiles kept in $OUT"

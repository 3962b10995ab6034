#!/usr/bin/env bash
# Instructions (Ir) per check, with callgrind: exact and repeatable where wall time is not.
#
#   benches/callgrind.sh                 # every case
#   benches/callgrind.sh tollgate-keyed-10k floor-keyed-10k
#   benches/callgrind.sh tollgate-direct-allowed tollgate-direct-denied \
#       tollgate-direct-manual-allowed tollgate-direct-manual-denied loop-verdict
#                                        # the direct check, monotonic and manual clocks
#   benches/callgrind.sh tollgate-detector-direct-allowed tollgate-detector-direct-denied \
#       tollgate-detector-keyed-10k      # with a FaultDetector attached
#   benches/callgrind.sh tollgate-direct-check-with tollgate-priority-direct-class1 \
#       tollgate-budget-direct-original tollgate-budget-direct-retry floor-direct-check-n1
#                                        # check_with: priority classes, retry budget
#
# The case list is the one `ir_per_check` prints when run without arguments (its CASES).
#
# For each case it runs benches/ir_per_check.rs (bench profile: release + no overflow checks,
# as `cargo bench`; one codegen unit, in its own target dir, so that edits elsewhere in the
# crate cannot move the partition boundaries and with them the inlining of these loops)
# under callgrind twice, with N1 and N2 checks, collecting only inside
# `measured` (the timed loop), and prints (Ir(N2) − Ir(N1)) / (N2 − N1): the instructions one
# more check costs, loop bookkeeping included (the `loop-overhead` row is that bookkeeping
# alone; `loop-verdict` is the same loop handing on a verdict read through `black_box`, so a
# direct row less `loop-verdict` is what the call itself costs). N1, N2 are multiples of the
# 10k keys so the keyed rows cover whole passes.
set -euo pipefail
cd "$(dirname "$0")/.."

N1=${N1:-100000}
N2=${N2:-200000}
# FEATURES=metrics,tracing benches/callgrind.sh ... measures with those features on.
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target/callgrind} CARGO_PROFILE_BENCH_CODEGEN_UNITS=1
BIN=$(cargo bench --quiet --no-run --bench ir_per_check ${FEATURES:+--features "$FEATURES"} --message-format=json \
  | sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -n 1)
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

if [ "$#" -gt 0 ]; then
  CASES=("$@")
else
  mapfile -t CASES < <("$BIN" 2>&1 | sed -n 's/^cases: //p' | tr ' ' '\n')
fi

ir() { # case n -> total Ir collected inside `measured`
  valgrind --tool=callgrind --callgrind-out-file="$OUT/cg.$1.$2" \
    --toggle-collect='*ir_per_check::measured*' "$BIN" "$1" "$2" 2>"$OUT/log.$1.$2" >/dev/null
  sed -n 's/^summary: *//p' "$OUT/cg.$1.$2"
}

printf '| case | Ir(%s) | Ir(%s) | Ir per check |\n|---|---|---|---|\n' "$N1" "$N2"
for case in "${CASES[@]}"; do
  a=$(ir "$case" "$N1")
  b=$(ir "$case" "$N2")
  printf '| %s | %s | %s | %s |\n' "$case" "$a" "$b" \
    "$(awk -v a="$a" -v b="$b" -v n1="$N1" -v n2="$N2" 'BEGIN { printf "%.2f", (b - a) / (n2 - n1) }')"
done

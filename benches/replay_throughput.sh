#!/bin/sh
# Traffic replay throughput: lines per second of CPU time on a generated log of
# 2,000,000 lines, replayed against examples/limits/valid.toml with --against tightened.toml,
# open loop (--clients none, the default), then closed loop (--clients backoff) and with a
# fleet (--instances 4). CPU time (user + system) from /usr/bin/time, so a loaded machine
# does not make the replay look slower than it is; the best of 3 runs.
#
#   benches/replay_throughput.sh [path/to/tollgate]
#
# Without an argument it builds the binary (release, feature cli).
set -eu
cd "$(dirname "$0")/.."
bin=${1:-}
if [ -z "$bin" ]; then
    cargo build --release --features cli --bin tollgate >&2
    bin=${CARGO_TARGET_DIR:-target}/release/tollgate
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
lines=2000000
"$bin" replay --generate "$dir/log.csv" --lines $lines >&2
run() {
    best=
    for _ in 1 2 3; do
        /usr/bin/time -f "%U %S" -o "$dir/time" "$bin" replay --traffic "$dir/log.csv" \
            --limits examples/limits/valid.toml --against examples/limits/tightened.toml \
            --out "$dir/out" "$@" > /dev/null
        cpu=$(awk '{ print $1 + $2 }' "$dir/time")
        if [ -z "$best" ] || awk "BEGIN { exit !($cpu < $best) }"; then best=$cpu; fi
    done
    awk -v cpu="$best" -v n=$lines -v what="$*" \
        'BEGIN { printf "%-32s %6.2f s CPU  %8.0f lines/s\n", (what == "" ? "open loop" : what), cpu, n / cpu }'
}
run
run --clients backoff
run --clients naive
run --instances 4

#!/usr/bin/env bash
# Renders every chart the replay writes to PNG, to look at them as a person would.
#   scripts/render-charts.sh [DIR]   (default: replay-out; run `tollgate replay --out DIR` first)
# Needs rsvg-convert (Debian: apt-get install -y librsvg2-bin). Not run in CI: the charts are
# checked there as SVG; this is for eyes.
set -euo pipefail
dir=${1:-replay-out}
command -v rsvg-convert >/dev/null || { echo "rsvg-convert not found: apt-get install -y librsvg2-bin" >&2; exit 2; }
shopt -s nullglob
svgs=("$dir"/*.svg)
[ ${#svgs[@]} -gt 0 ] || { echo "no .svg in $dir: run tollgate replay --out $dir first" >&2; exit 2; }
for svg in "${svgs[@]}"; do
  png=${svg%.svg}.png
  rsvg-convert --background-color=white -o "$png" "$svg"
  echo "$png"
done

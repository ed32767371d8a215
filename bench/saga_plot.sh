#!/usr/bin/env bash
# Draws start-to-terminal latency (p50 and p99) against completed sagas/s from saga benchmark
# results: bench/saga_plot.sh OUT.png RESULT.json...  (gnuplot, Debian gnuplot-nox)
set -euo pipefail
out=$1
shift
data=$(mktemp)
trap 'rm -f "$data"' EXIT
python3 - "$@" >"$data" <<'PY'
import json, sys
for n, path in enumerate(sys.argv[1:]):
    phases = sorted(json.load(open(path))["phases"], key=lambda p: p["completed_per_second"])
    print(f"# run {n + 1}: {path}")
    for p in phases:
        print(p["completed_per_second"], p["p50_ms"], p["p99_ms"])
    print("\n")
PY
runs=$#
gnuplot <<GP
set terminal pngcairo size 900,560 font "DejaVu Sans,10"
set output "$out"
set title "sagaflow order-payment saga: start-to-terminal latency vs throughput (2-core machine, durable)"
set xlabel "completed sagas/s"
set ylabel "latency (ms)"
set key left top
set grid
plot for [i=0:$runs-1] "$data" index i using 1:3 with linespoints lw 2 title sprintf("p99, run %d", i+1), \
     for [i=0:$runs-1] "$data" index i using 1:2 with linespoints dt 2 title sprintf("p50, run %d", i+1)
GP
echo "$out"

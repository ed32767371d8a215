#!/usr/bin/env bash
# Draws the RSS of every process over a long closed-loop saga run (bench/run saga --phases closed
# --seconds 600): bench/saga_rss_plot.sh OUT.png RESULT.json  (gnuplot, Debian gnuplot-nox)
set -euo pipefail
out=$1
result=$2
data=$(mktemp)
trap 'rm -f "$data"' EXIT
python3 - "$result" >"$data" <<'PY'
import json, sys
series = json.load(open(sys.argv[1]))["rss_series"]
names = ["engine", "order-service", "payment-service", "bench-front-end"]
print("# seconds " + " ".join(names))
for s in series:
    print(s["seconds"], " ".join(str(s[n + "_rss_kb"] / 1024) for n in names))
PY
gnuplot <<GP
set terminal pngcairo size 900,480 font "DejaVu Sans,10"
set output "$out"
set title "sagaflow: resident memory over a closed-loop run (64 sagas in flight, 2-core machine)"
set xlabel "seconds"
set ylabel "RSS (MiB)"
set yrange [0:*]
set key right bottom
set grid
plot "$data" using 1:2 with lines lw 2 title "engine (sagaflow run)", \
     "$data" using 1:3 with lines lw 2 title "order service", \
     "$data" using 1:4 with lines lw 2 title "payment service", \
     "$data" using 1:5 with lines lw 2 dt 2 title "bench front end"
GP
echo "$out"

#!/usr/bin/env bash
# Where PostgreSQL's CPU goes per saga: one saga benchmark run (closed loop; saga_bench options
# pass through) on a private PostgreSQL and broker, with `perf record` sampling every PostgreSQL
# process (cpu-clock, 499 Hz) for SECONDS (rounded up to tens) of the loop, from its 10th second.
# Prints PostgreSQL's CPU per saga and its samples grouped by what the function does (reading SQL
# text, starting the executor, reading values, B-trees, heap, WAL, memory, the kernel: switches,
# sockets, writes), then the hottest functions. Own time only: some of the server's functions keep
# no frame pointer (Debian's build: e.g. _bt_compare), so its call chains break and time under a
# function cannot be summed.
#   bench/pg_cpu_profile.sh [BUILD] [SECONDS] [saga_bench options...]   (BUILD: build/release, SECONDS: 20)
# e.g. bench/pg_cpu_profile.sh build/release 20 --seconds 40 --warmup 20
# Needs perf with the right to sample other processes (root, or kernel.perf_event_paranoid <= 1).
# The run's JSON goes to bench/results/ as usual.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
source scripts/lib/common.sh
source bench/lib.sh
build=${1:-build/release}
shift $(($# < 1 ? $# : 1))
seconds=${1:-20}
shift $(($# < 1 ? $# : 1))
command -v perf >/dev/null || sf_die "perf is not installed" "install it: apt-get install linux-perf"
bench_require_saga_build "$build"
bench_start_servers "$build"
mkdir -p bench/results
out="bench/results/saga-pgprofile-$(date -u +%Y%m%dT%H%M%SZ).json"
log=$(mktemp)
data=$(mktemp -d)/perf.data
"$build/bench/saga_bench" "$url" "$brokers" --json "$out" --cli "$build/tools/cli/sagaflow" \
    --services-dir "$build/examples/order-payment" --saga sagas/order-payment.yaml --phases closed "$@" \
    >/dev/null 2>"$log" &
bench=$!
# The window runs from the loop's progress line at 10 s to the one SECONDS later: the sagas
# between them are read from those lines (a psql here could take the connection slot the benchmark
# is about to open).
seconds=$(((seconds + 9) / 10 * 10))
progress() { sed -n "s/^saga_bench: $1 s, \([0-9]*\) sagas.*/\1/p" "$log"; }
sf_log "waiting for the closed loop's first 10 s (after the limits and the warm-up)"
until [[ -n "$(progress 10)" ]]; do
    kill -0 "$bench" 2>/dev/null || { cat "$log" >&2; sf_die "saga_bench ended before its loop's 10th second" "see its log above"; }
    sleep 0.05
done
sf_log "sampling PostgreSQL for $seconds s"
perf record -F 499 -o "$data" -p "$(pgrep -d, -x postgres)" -- sleep "$seconds" >/dev/null 2>&1
wait "$bench"
before=$(progress 10) after=$(progress $((10 + seconds)))
[[ -n "$after" ]] || sf_die "the loop ended before $((10 + seconds)) s" "give saga_bench --seconds above $((10 + seconds))"
perf script -i "$data" -F ip,sym,dso 2>/dev/null | python3 bench/pg_cpu_groups.py "$((after - before))" 499

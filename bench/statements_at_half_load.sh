#!/usr/bin/env bash
# What PostgreSQL runs per saga at half of the maximum: one saga benchmark run (closed loop, then
# 25/50/75 %) on a private PostgreSQL with pg_stat_statements loaded (tracking top-level
# statements) and a private broker; the counters are reset when the 50 % phase starts and read when
# it ends, and printed per saga of that phase, dearest-by-count first, beside the context switches
# and CPU per saga by process group and thread name (bench/context_switches.py over 25 s of the phase).
#   bench/statements_at_half_load.sh [BUILD] [saga_bench options...]   (BUILD: build/release)
# e.g. bench/statements_at_half_load.sh build/release --seconds 30 --warmup 20
# A simple query of several statements (`BEGIN; EXECUTE …`, `EXECUTE …; COMMIT`, the participant's
# `SELECT set_config(…); SAVEPOINT …`) is one round trip but counts once per statement; with perf
# installed, the round trips are counted too (PostgreSQL's sends). Output goes to stdout; the run's JSON to bench/results/.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
source scripts/lib/common.sh
source bench/lib.sh
build=${1:-build/release}
shift $(($# < 1 ? $# : 1))
bench_require_saga_build "$build"
# As bench/run, plus the statement counters.
bench_start_servers "$build" shared_preload_libraries=pg_stat_statements
psql "$url" -qc "ALTER SYSTEM SET pg_stat_statements.track = 'top'" -c "SELECT pg_reload_conf()" >/dev/null
psql "$url" -qc "CREATE EXTENSION pg_stat_statements"
mkdir -p bench/results
out="bench/results/saga-statements-$(date -u +%Y%m%dT%H%M%SZ).json"
log=$(mktemp)
cli="$build/tools/cli/sagaflow"
"$build/bench/saga_bench" "$url" "$brokers" --json "$out" --cli "$cli" --services-dir "$build/examples/order-payment" \
    --saga sagas/order-payment.yaml --broker-gc-log "$kafka_state/gc.log" "$@" >/dev/null 2>"$log" &
bench=$!
wait_line() {
    until grep -q "$1" "$log"; do
        kill -0 "$bench" 2>/dev/null || { cat "$log" >&2; sf_die "saga_bench ended before '$1'" "see its log above"; }
        sleep 0.2
    done
}
sf_log "waiting for the 50 % phase (after the warm-up, the closed loop and the 25 % phase)"
wait_line "open-25%"
psql "$url" -qAtc "SELECT pg_stat_statements_reset()" >/dev/null
python3 bench/context_switches.py --threads "$url" 25 >"$log.cs" 2>&1 &
# Round trips, counted exactly: PostgreSQL answers each with one send (its ReadyForQuery flush), so
# the sends of its processes over the same window are the round trips (plus the few notifications).
# A process that ends as perf attaches (a short session) fails the count: it is tried again. The
# front end's own sends count its round trips: the starts' and the driver's polls (it runs no relay
# and no consumer).
count_sends() {  # OUT PIDS-COMMAND
    for _ in 1 2 3; do
        perf stat -e syscalls:sys_enter_sendto -x, -o "$1" -p "$($2)" -- sleep 25 >/dev/null 2>&1 && return
    done
}
if command -v perf >/dev/null; then
    count_sends "$log.sends" "pgrep -d, -x postgres" &
    count_sends "$log.front" "echo $bench" &
fi
wait_line "open-50%"
psql "$url" -qc "CREATE TABLE bench_statements AS SELECT query, calls, total_exec_time FROM pg_stat_statements
    WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())"
wait
grep "saga_bench: open-50%" "$log"
sagas=$(psql "$url" -qAtc "SELECT count(*) FROM saga_instance WHERE idempotency_key LIKE 'open50-%'")
echo "sagas in the 50 % phase: $sagas"
psql "$url" -qAtF $'\t' -c "SELECT 'all statements', round(sum(calls)::numeric / $sagas, 2), 'transactions',
    round(sum(calls) FILTER (WHERE query IN ('BEGIN', 'COMMIT'))::numeric / 2 / $sagas, 2) FROM bench_statements"
echo -e "calls/saga\tms/call\tstatement"
psql "$url" -qAtF $'\t' -c "SELECT round(sum(calls)::numeric / $sagas, 2), round((sum(total_exec_time) / sum(calls))::numeric, 3),
    left(regexp_replace(query, '\s+', ' ', 'g'), 100) FROM bench_statements GROUP BY 3 ORDER BY 1 DESC, 3"
cat "$log.cs"
if [[ -s "$log.sends" ]]; then
    window_sagas=$(sed -n 's/^\([0-9]*\) sagas in .*/\1/p' "$log.cs")
    sends=$(grep sys_enter_sendto "$log.sends" | cut -d, -f1) || true
    [[ -z "$window_sagas" || -z "$sends" ]] ||
        echo "round trips (PostgreSQL's sends, perf): $(python3 -c "print(round($sends / $window_sagas, 2))") per saga"
    front=$(grep sys_enter_sendto "$log.front" | cut -d, -f1) || true
    [[ -z "$window_sagas" || -z "$front" ]] ||
        echo "the front end's sends (its starts and the driver's polls): $(python3 -c "print(round($front / $window_sagas, 2))") per saga"
fi
sf_log "results: $out"

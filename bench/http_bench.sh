#!/usr/bin/env bash
# The HTTP API under wrk: new sagas (a new Idempotency-Key each), replays (one key), and /healthz
# (a trivial endpoint of the same server: the limit of the HTTP layer itself), in one run against
# one engine with the durable defaults. Usage (through bench/run): http_bench.sh DB_URL BROKERS
# --json OUT [--seconds S] [--connections C]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$root/scripts/lib/common.sh"
url=$1 brokers=$2
shift 2
out="" seconds=10 connections=16
while [[ $# -gt 0 ]]; do
    case "$1" in
    --json) out=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --connections) connections=$2; shift 2 ;;
    *) sf_die "unknown option $1" "see the usage at the top of bench/http_bench.sh" ;;
    esac
done
source "$root/bench/http_engine.sh"

# wrk prints "Requests/sec: N" and, with --latency, "99% Xms"; both go to JSON.
measure() {
    local name=$1 script=$2 path=$3
    sf_log "wrk: $name (${seconds}s, $connections connections)"
    local text
    text=$(wrk -t2 -c"$connections" -d"${seconds}s" --latency ${script:+-s "$script"} "http://127.0.0.1:$port$path")
    local rps p99 p50 non2xx
    rps=$(awk '/Requests\/sec/ {print $2}' <<<"$text")
    p50=$(awk '$1 == "50%" {print $2}' <<<"$text")
    p99=$(awk '$1 == "99%" {print $2}' <<<"$text")
    non2xx=$(awk '/Non-2xx/ {print $5}' <<<"$text")
    printf '{"name":"%s","requests_per_second":%s,"p50":"%s","p99":"%s","non_2xx":%s}' \
        "$name" "$rps" "$p50" "$p99" "${non2xx:-0}"
}
trivial=$(measure healthz "" /healthz)
fresh=$(measure new_sagas "$root/bench/wrk/new_sagas.lua" /v1/sagas/order-payment)
# The replayed key's first request before wrk: sent by 16 connections at once, it would be in
# flight while the others ask (409 request-in-progress), and the run is about the replays.
curl -fsS -o /dev/null -X POST "http://127.0.0.1:$port/v1/sagas/order-payment" -H 'Content-Type: application/json' \
    -H 'Idempotency-Key: bench-replay' -d '{"orderId":"bench-replay","customerId":7,"amount":"49.90"}'
replays=$(measure replays "$root/bench/wrk/replays.lua" /v1/sagas/order-payment)
printf '{"benchmark":"http","connections":%s,"seconds":%s,"results":[%s,%s,%s]}\n' \
    "$connections" "$seconds" "$trivial" "$fresh" "$replays" | tee "$out"

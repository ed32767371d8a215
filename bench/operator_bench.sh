#!/usr/bin/env bash
# The operator endpoints with a long history: ROWS sagas (synthetic rows, as 30 days of traffic
# leave them) in saga_instance, then each list page, the console's requests and a /metrics scrape
# REQUESTS times, beside /healthz of the same server (the floor of an HTTP round trip here). Usage (through
# bench/run): operator_bench.sh DB_URL BROKERS --json OUT [--rows N] [--requests R]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$root/scripts/lib/common.sh"
url=$1 brokers=$2
shift 2
out="" rows=1000000 requests=50
while [[ $# -gt 0 ]]; do
    case "$1" in
    --json) out=$2; shift 2 ;;
    --rows) rows=$2; shift 2 ;;
    --requests) requests=$2; shift 2 ;;
    *) sf_die "unknown option $1" "see the usage at the top of bench/operator_bench.sh" ;;
    esac
done
source "$root/bench/http_engine.sh"

# Finished sagas of two types, created one every 30 days / ROWS up to now, with UUID v7 ids of their
# creation time (as the engine mints them: the console's age filters read that time) and an
# idempotency key each: half completed, half compensated, one in 7,000 parked (failed), one in
# 5,000 still running. Loaded in slices of 100,000 with progress.
psql "$url" -qc "INSERT INTO saga_definition (saga_type, version, hash, canonical)
                 VALUES ('bulk-a', 1, 'bulk-a', '{}'), ('bulk-b', 1, 'bulk-b', '{}') ON CONFLICT DO NOTHING"
now_ms=$(psql "$url" -Atc "SELECT (extract(epoch FROM now()) * 1000)::bigint")
slice=100000
for ((from = 1; from <= rows; from += slice)); do
    to=$((from + slice - 1 < rows ? from + slice - 1 : rows))
    psql "$url" -qc "INSERT INTO saga_instance (saga_id, saga_type, definition_version, definition_hash, status, input,
                                                idempotency_key, created_at, updated_at)
        SELECT (substr(h, 1, 8) || '-' || substr(h, 9, 4) || '-7000-8000-' || lpad(to_hex(i), 12, '0'))::uuid,
               CASE WHEN i % 3 = 0 THEN 'bulk-b' ELSE 'bulk-a' END, 1,
               CASE WHEN i % 3 = 0 THEN 'bulk-b' ELSE 'bulk-a' END,
               CASE WHEN i % 5000 = 0 THEN 'running' WHEN i % 7000 = 0 THEN 'failed'
                    WHEN i % 2 = 0 THEN 'completed' ELSE 'compensated' END, '{}',
               'key-' || i, to_timestamp(ms / 1000.0), to_timestamp(ms / 1000.0)
        FROM generate_series($from, $to) i,
             LATERAL (SELECT $now_ms - ($rows - i) * (2592000000 / $rows)) AS t(ms),
             LATERAL (SELECT lpad(to_hex(ms), 12, '0')) AS x(h)"
    sf_log "loaded $to of $rows sagas"
done
psql "$url" -qc "VACUUM ANALYZE saga_instance"
total=$(psql "$url" -Atc "SELECT count(*) FROM saga_instance")
sf_log "saga_instance holds $total rows"

# A cursor from the middle of the history, as an operator paging back reaches it.
middle=$(psql "$url" -Atc "SELECT saga_id FROM saga_instance ORDER BY saga_id OFFSET $((rows / 2)) LIMIT 1")

# Times REQUESTS requests of one path (curl's time_total, a new connection each): median and p95 in ms.
measure() {
    local name=$1 path=$2 status
    status=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port$path")
    [[ "$status" == 200 ]] || sf_die "$path answered $status" "read the engine's log: $log"
    local times
    times=$(for ((i = 0; i < requests; i++)); do
        curl -s -o /dev/null -w '%{time_total}\n' "http://127.0.0.1:$port$path"
    done | sort -n)
    local p50 p95
    p50=$(awk -v n="$requests" 'NR == int((n + 1) / 2) {printf "%.2f", $1 * 1000}' <<<"$times")
    p95=$(awk -v n="$requests" 'NR == int(n * 0.95 + 0.999) {printf "%.2f", $1 * 1000}' <<<"$times")
    sf_log "$name: median $p50 ms, p95 $p95 ms ($path)"
    printf '{"name":"%s","path":"%s","median_ms":%s,"p95_ms":%s}' "$name" "$path" "$p50" "$p95"
}
# How many sagas a list request answers (the filters must find what the data holds, or their
# timings would be of empty pages).
expect_items() {
    local path=$1 want=$2 got
    got=$(curl -s "http://127.0.0.1:$port$path" | python3 -c 'import json, sys; print(len(json.load(sys.stdin)["items"]))')
    [[ "$got" == "$want" ]] || sf_die "$path listed $got sagas, expected $want" "the bench's data or the filter is wrong"
}
key_saga=$((rows / 2 + 1))  # bulk-b when divisible by 3, else bulk-a
key_type=$([[ $((key_saga % 3)) == 0 ]] && echo bulk-b || echo bulk-a)
expect_items "/v1/sagas?key=key-$key_saga&limit=50" 1
expect_items "/v1/sagas?type=$key_type&key=key-$key_saga&limit=50" 1
expect_items "/v1/sagas?idPrefix=${middle:0:7}&limit=50" 50
expect_items "/v1/sagas?minAge=604800&limit=50" 50
expect_items "/v1/sagas?status=compensated&minAge=604800&limit=50" 50
[[ $(curl -s "http://127.0.0.1:$port/v1/sagas?status=failed&maxAge=86400&limit=50" |
    python3 -c 'import json, sys; print(len(json.load(sys.stdin)["items"]))') -gt 0 ]] ||
    sf_die "no parked saga of the last day listed" "the bench's data or the filter is wrong"
results=()
results+=("$(measure healthz /healthz)")
results+=("$(measure metrics /metrics)")
results+=("$(measure list /v1/sagas?limit=50)")
results+=("$(measure list_completed '/v1/sagas?status=completed&limit=50')")
results+=("$(measure list_compensated_page '/v1/sagas?status=compensated&limit=50&cursor='"$middle")")
results+=("$(measure list_failed '/v1/sagas?status=failed&limit=50')")
results+=("$(measure list_running '/v1/sagas?status=running&limit=50')")
results+=("$(measure list_type '/v1/sagas?type=bulk-b&limit=50')")
results+=("$(measure list_type_status_page '/v1/sagas?type=bulk-a&status=completed&limit=50&cursor='"$middle")")
results+=("$(measure list_page '/v1/sagas?limit=50&cursor='"$middle")")
# The console: its page, its overview, and the filters it adds to the list.
results+=("$(measure console_page /ui/)")
results+=("$(measure overview /v1/overview)")
results+=("$(measure list_key "/v1/sagas?key=key-$key_saga&limit=50")")
results+=("$(measure list_type_key "/v1/sagas?type=$key_type&key=key-$key_saga&limit=50")")
results+=("$(measure list_prefix "/v1/sagas?idPrefix=${middle:0:7}&limit=50")")
results+=("$(measure list_older_week '/v1/sagas?minAge=604800&limit=50')")
results+=("$(measure list_failed_last_day '/v1/sagas?status=failed&maxAge=86400&limit=50')")
results+=("$(measure list_compensated_older_week '/v1/sagas?status=compensated&minAge=604800&limit=50')")
results+=("$(measure saga "/v1/sagas/$middle")")
joined=$(IFS=,; echo "${results[*]}")
printf '{"benchmark":"operator","rows":%s,"requests":%s,"limit_ms":100,"results":[%s]}\n' \
    "$total" "$requests" "$joined" | tee "$out"

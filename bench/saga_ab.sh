#!/usr/bin/env bash
# A/B of the saga benchmark in one sitting: two release build trees (e.g. a worktree of the
# commit before a change, and this one), alternating, against one private PostgreSQL (2 GB of
# shared buffers and commit timestamps, as bench/run) and one private broker, a fresh database per run.
#   bench/saga_ab.sh BEFORE_BUILD AFTER_BUILD [ROUNDS] [saga_bench options...]
# e.g. git worktree add /tmp/before REV && (cd /tmp/before && cmake --preset release &&
#      cmake --build --preset release --target saga_bench sagaflow sagaflow-order-service
#      sagaflow-payment-service sagaflow_kafka_probe)
#      bench/saga_ab.sh /tmp/before/build/release build/release 2 --phases closed --seconds 30 --warmup 30
# The JSON of each run goes to bench/results/saga-ab-{before,after}-<round>-<time>.json.
# SAGAFLOW_AB_BEFORE_ARGS / SAGAFLOW_AB_AFTER_ARGS: more saga_bench options for one side only, e.g.
# one build both sides and SAGAFLOW_AB_AFTER_ARGS="--databases per-service".
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
source scripts/lib/common.sh
source bench/lib.sh
before=${1:?usage: bench/saga_ab.sh BEFORE_BUILD AFTER_BUILD [ROUNDS] [saga_bench options]}
after=${2:?usage: bench/saga_ab.sh BEFORE_BUILD AFTER_BUILD [ROUNDS] [saga_bench options]}
rounds=${3:-2}
shift $(($# < 3 ? $# : 3))
cli_of() { [[ -x "$1/tools/cli/sagaflow" ]] && echo "$1/tools/cli/sagaflow" || echo "$1/engine/cli/sagaflow"; }
bench_require_saga_build "$before"
bench_require_saga_build "$after"
bench_start_servers "$after"
stamp=$(date -u +%Y%m%dT%H%M%SZ)
for ((round = 1; round <= rounds; round++)); do
    for side in before after; do
        build=${!side}
        side_args=()
        if [[ $side == before ]]; then read -ra side_args <<<"${SAGAFLOW_AB_BEFORE_ARGS:-}"; fi
        if [[ $side == after ]]; then read -ra side_args <<<"${SAGAFLOW_AB_AFTER_ARGS:-}"; fi
        db="ab_${side}_${round}"
        psql "$url" -qc "CREATE DATABASE $db"
        out="bench/results/saga-ab-$side-$round-$stamp.json"
        sf_log "round $round of $rounds: $side ($build)"
        "$build/bench/saga_bench" "${url%/*}/$db" "$brokers" --json "$out" --cli "$(cli_of "$build")" \
            --services-dir "$build/examples/order-payment" --saga sagas/order-payment.yaml \
            --broker-gc-log "$kafka_state/gc.log" "$@" "${side_args[@]}" >/dev/null
        python3 -c "import json,sys; d=json.load(open(sys.argv[1])); s=d['servers']; p=d['phases'][0]; \
print(f\"{sys.argv[2]}: {p['completed_per_second']:.1f} sagas/s, ratio {d['ratio_sagas_per_commit']:.4f}, \
WAL records/saga {s['postgres_wal_records_per_saga_closed_loop']:.1f}, commits/saga {s['postgres_commits_per_saga_closed_loop']:.2f}\")" \
            "$out" "$side $round" >&2
    done
done

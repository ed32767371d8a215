# Shared by the benchmark scripts. Sourced, never executed.

# bench_pg_settings STATE_DIR [SETTING=VALUE...]: gives the private PostgreSQL of STATE_DIR the
# benchmarks' settings, plus any given, restarts it and prints its URL.
# - A buffer cache sized like a production server's rather than the 128 MB default (which the test
#   clusters keep): 2 GB holds every table of a run, so backends stop evicting dirty pages. Measured
#   on the saga benchmark: 508 against 437 sagas/s, p99 at half load 66-72 against 82-104 ms
#   (bench/README.md). Durability is untouched; the JSON records the setting.
# - Commit timestamps: the saga benchmark's hops are measured between transactions' commits.
bench_pg_settings() {
    local state=$1 url setting
    shift
    url=$(scripts/pg url "$state")
    local statements=(-c "ALTER SYSTEM SET shared_buffers = '2GB'" -c "ALTER SYSTEM SET track_commit_timestamp = on")
    for setting in "$@"; do
        statements+=(-c "ALTER SYSTEM SET ${setting%%=*} = '${setting#*=}'")
    done
    psql "$url" -q "${statements[@]}"
    scripts/pg restart "$state" >/dev/null
    scripts/pg url "$state"
}

# bench_require_saga_build BUILD: stops with the command that builds them unless BUILD holds the saga
# benchmark's programs.
bench_require_saga_build() {
    [[ -x "$1/bench/saga_bench" ]] || sf_die "no $1/bench/saga_bench" \
        "build it: cmake --preset release && cmake --build --preset release --target saga_bench sagaflow sagaflow-order-service sagaflow-payment-service sagaflow_kafka_probe"
}

# bench_start_servers PROBE_BUILD [SETTING=VALUE...]: starts a private PostgreSQL with the
# benchmarks' settings (bench_pg_settings, plus any given) and a private Kafka broker (its probe
# from PROBE_BUILD), both stopped when the script exits. Sets `url`, `brokers`, and `kafka_state`
# (the broker's folder: its GC log is `$kafka_state/gc.log`). Call it directly, not in $(...).
bench_start_servers() {
    local probe_build=$1
    shift
    pg_state=$(mktemp -d)/pg kafka_state=$(mktemp -d)/kafka
    scripts/pg start "$pg_state" >/dev/null
    trap 'scripts/pg stop "$pg_state"; [[ -z "${kafka_started:-}" ]] || scripts/kafka/run stop "$kafka_state"' EXIT
    url=$(bench_pg_settings "$pg_state" "$@")
    brokers=$(scripts/kafka/run start "$kafka_state" --probe "$probe_build/tests/sagaflow_kafka_probe")
    kafka_started=1
}

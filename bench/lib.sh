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

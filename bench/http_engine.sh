# Sourced by the HTTP benchmarks: starts `sagaflow run --http` (release build) on a free loopback
# port with the sample saga against $url and $brokers, waits for /healthz, and stops it on exit.
# Sets `port` and `log`. SAGAFLOW_BENCH_CLI: another build's `sagaflow` (an A/B of two commits).
port=$(sf_free_port)
log=$(mktemp)
"${SAGAFLOW_BENCH_CLI:-$root/build/release/tools/cli/sagaflow}" run --db "$url" --brokers "$brokers" --saga "$root/sagas/order-payment.yaml" \
    --http "127.0.0.1:$port" --kafka-property log_level=3 2>"$log" &
engine=$!
trap 'kill $engine 2>/dev/null; wait $engine 2>/dev/null; rm -f "$log"' EXIT
sf_wait_for 60 "the engine's HTTP API" curl -fsS "http://127.0.0.1:$port/healthz" >/dev/null ||
    { cat "$log" >&2; sf_die "the engine did not start" "read its log above"; }

#!/usr/bin/env bash
# Where a saga's WAL goes: runs the saga benchmark (bench/saga_bench, release build) against a
# private PostgreSQL and broker, then reads the WAL it wrote with pg_walinspect and prints records
# per saga by table (its indexes listed with it) and by record type. The benchmark's own reference
# tables (bench_*: the write-only limit) are left out. Exact counts, unlike CPU on a shared machine:
# the guide for cutting PostgreSQL's work per saga.
#   bench/wal_breakdown.sh [saga_bench options...]    (default: --phases closed --seconds 20 --warmup 5)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
source scripts/lib/common.sh
build=build/release
[[ -x $build/bench/saga_bench ]] || sf_die "$build/bench/saga_bench is missing" \
    "cmake --preset release && cmake --build --preset release --target saga_bench sagaflow sagaflow-order-service sagaflow-payment-service sagaflow_kafka_probe"
(($# > 0)) || set -- --phases closed --seconds 20 --warmup 5
work=$(mktemp -d)
state=$work/pg kstate=$work/kafka
url=$(scripts/pg start "$state")
trap 'scripts/kafka/run stop "$kstate" >/dev/null 2>&1 || true; scripts/pg stop "$state" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
brokers=$(scripts/kafka/run start "$kstate" --probe $build/tests/sagaflow_kafka_probe)
db="${url%/*}/walb"
psql "$url" -qc "CREATE DATABASE walb"
psql "$db" -qc "CREATE EXTENSION pg_walinspect"
start=$(psql "$url" -Atc "SELECT pg_current_wal_lsn()")
sf_log "running the saga benchmark: $*"
$build/bench/saga_bench "$db" "$brokers" --json "$work/saga.json" --cli $build/tools/cli/sagaflow \
    --services-dir $build/examples/order-payment --saga sagas/order-payment.yaml "$@" >/dev/null 2>&1
end=$(psql "$url" -Atc "SELECT pg_current_wal_lsn()")
sagas=$(psql "$db" -Atc "SELECT count(*) FROM saga_instance")
# Every record's type and first block's file, and which relation (and table, for an index) each
# file is.
psql "$db" -At -F'|' -c "SELECT resource_manager, record_type, coalesce(substring(block_ref from 'rel \d+/\d+/(\d+)'), ''), xid
    FROM pg_get_wal_records_info('$start', '$end')" >"$work/records"
psql "$db" -At -F'|' -c "SELECT pg_relation_filenode(c.oid), n.nspname || '.' || c.relname,
    coalesce((SELECT tn.nspname || '.' || t.relname FROM pg_index i JOIN pg_class t ON t.oid = i.indrelid
              JOIN pg_namespace tn ON tn.oid = t.relnamespace WHERE i.indexrelid = c.oid), n.nspname || '.' || c.relname)
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE pg_relation_filenode(c.oid) IS NOT NULL" \
    >"$work/relations"
python3 - "$work" "$sagas" <<'PY'
import collections, sys
work, sagas = sys.argv[1], int(sys.argv[2])
relation, table = {}, {}
for line in open(f"{work}/relations"):
    node, name, owner = line.rstrip("\n").split("|")
    relation[node], table[node] = name, owner
by_table, by_relation, by_type = collections.Counter(), collections.Counter(), collections.Counter()
by_table_type = collections.Counter()
tables_of, commits = collections.defaultdict(set), []
total = 0
for line in open(f"{work}/records"):
    rm, kind, node, xid = line.rstrip("\n").split("|")
    owner = table.get(node, "(no relation)" if not node else "(other)")
    if node:
        tables_of[xid].add(owner)
    if kind == "COMMIT":
        commits.append(xid)
    if owner.startswith("public.bench_"):
        continue  # the benchmark's write-only reference, not sagaflow's work
    total += 1
    by_table[owner] += 1
    by_relation[relation.get(node, owner)] += 1
    by_type[f"{rm} {kind}"] += 1
    by_table_type[(owner, f"{rm} {kind}")] += 1
print(f"{sagas} sagas, {total / sagas:.1f} WAL records per saga (the bench_* tables left out; commits include the benchmark's own)")
print("\nby table (its indexes included), then each relation:")
for name, n in by_table.most_common():
    if n / sagas < 0.05:
        continue
    print(f"  {n / sagas:7.2f}  {name}")
    for rel, m in by_relation.most_common():
        if rel != name and table.get(next((k for k, v in relation.items() if v == rel), ""), "") == name and m / sagas >= 0.05:
            print(f"  {m / sagas:7.2f}      {rel}")
print("\nby record type:")
for kind, n in by_type.most_common(15):
    print(f"  {n / sagas:7.2f}  {kind}")
# Each commit record by the tables its transaction wrote (the bench_* reference's left out).
by_writes = collections.Counter()
for xid in commits:
    written = tables_of.get(xid, set())
    if any(t.startswith("public.bench_") for t in written):
        continue
    by_writes[" + ".join(sorted(written)) or "(nothing but the commit)"] += 1
print(f"\ncommit records per saga: {sum(by_writes.values()) / sagas:.2f}, by the tables their transaction wrote:")
for kind, n in by_writes.most_common(15):
    if n / sagas >= 0.02:
        print(f"  {n / sagas:7.2f}  {kind}")
print("\nby table and record type (indexes included):")
for (owner, kind), n in by_table_type.most_common(30):
    if n / sagas >= 0.2:
        print(f"  {n / sagas:7.2f}  {owner}  {kind}")
PY

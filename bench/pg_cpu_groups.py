#!/usr/bin/env python3
"""Groups PostgreSQL's perf samples (`perf script -F ip,sym,dso` on stdin) by what the function does.

    perf script -i perf.data -F ip,sym,dso | bench/pg_cpu_groups.py SAGAS HZ

SAGAS: sagas finished while sampling; HZ: the sampling frequency. Prints the CPU per saga, the
share of each group (first matching rule wins) and the hottest functions. Used by
bench/pg_cpu_profile.sh."""
import collections
import re
import sys

GROUPS = [
    ("kernel: scheduling (context switches, wake-ups)",
     r"^\[k\] (finish_task_switch|__schedule|schedule|_raw_spin_unlock_irq|try_to_wake_up|ttwu|irqentry|"
     r"enqueue|dequeue|update_curr|pick_next|psi_)"),
    ("kernel: other (sockets, files, the WAL's writes, interrupts)", r"^\[k\] "),
    ("reading SQL text (lexer, grammar, analysis)",
     r"(base_yyparse|core_yylex|scanner_|raw_parser|^transform|parse_analyze|pg_analyze|addRangeTable|"
     r"makeA_Expr|makeColumnRef|expand_|exprType|exprTypmod|exprCollation|expression_tree_walker|"
     r"raw_expression_tree_walker)"),
    ("plans: revalidation and executor start and end",
     r"(CheckExprStillValid|RevalidateCachedQuery|CheckCachedPlan|GetCachedPlan|^ExecInit|ExprEvalPushStep|"
     r"ExecReadyExpr|ExecBuildProjectionInfo|MakeTupleTableSlot|TupleDescInitEntry|CreateTemplateTupleDesc|"
     r"CreateExecutorState|FreeExecutorState|^ExecEnd|standard_Executor|ExecAssign|ExecCheckPermissions|"
     r"ExecConditionalAssign|ExecTypeFromTL|ExecCreateScanSlot|ExecOpenIndices|ExecCloseIndices|"
     r"AcquireExecutorLocks|ScanQueryForLocks|check_stack_depth)"),
    ("node trees from text (stringToNode)", r"(pg_strtok|nodeRead|^_read|readDatum|stringToNode|nodeTokenType)"),
    ("values in and out (arrays, uuid, json, numbers)",
     r"(array_in|array_out|ReadArrayStr|uuid_in|uuid_out|jsonb_|json_lex|escape_json|JsonbValue|pushJsonbValue|"
     r"convertJsonb|int8in|int4in|textin|pg_strtoint|strtoull|strtol|record_in|numeric_in|timestamptz_|"
     r"escape_|pq_sendtext|printtup|textout|boolout|int4out|int8out|OutputFunctionCall|InputFunctionCall)"),
    ("B-tree indexes", r"(^_bt_|^bt|_bt_compare|index_|IndexScan|ExecIndex)"),
    ("heap (tuples, pages, visibility)",
     r"(^heap|^Heap|nocachegetattr|heap_compute_data_size|heap_fill_tuple|slot_|tts_|ExecStore|ExecFetch|"
     r"PageAdd|PageGet|PageRepair|RelationGetBufferForTuple|ReadBuffer|ReleaseBuffer|Buffer|StrategyGetBuffer|"
     r"XidInMVCCSnapshot|TransactionIdIsInProgress|TransactionIdDidCommit|HeapTupleSatisfies)"),
    ("WAL records and commit", r"(XLog|CopyXLogRecordToWAL|ReserveXLog|RecordTransactionCommit|CommitTransaction|"
                                r"TransactionLogFetch|pg_comp_crc32c|crc32)"),
    ("memory (palloc, contexts, malloc)",
     r"(palloc|pfree|repalloc|AllocSet|MemoryContext|GenerationAlloc|SlabAlloc|_int_malloc|_int_free|malloc|"
     r"^free$|cfree|__libc_calloc|unlink_chunk|malloc_consolidate)"),
    ("lookups: hash tables, catalog and lock caches",
     r"(hash_search|hash_bytes|hash_any|tag_hash|string_hash|SearchCatCache|SearchSysCache|RelationIdGetRelation|"
     r"LockAcquire|LockRelease|LWLock|GrantLock|FastPath|ResourceOwner|SetupLockInTable|RelationClose|"
     r"LockReleaseAll|get_hash_value|CatalogCache)"),
    ("snapshots and transaction bookkeeping",
     r"(GetSnapshotData|AtEOXact|AtStart|StartTransaction|AbortTransaction|GetNewTransactionId|ProcArray|"
     r"CleanupTransaction|AssignTransactionId|PushActiveSnapshot|PopActiveSnapshot|RegisterSnapshot)"),
    ("PL/pgSQL (the outbox trigger, the saga lock function)", r"plpgsql"),
    ("libc: copying and comparing memory and strings", r"(^__mem|^mem|^__str|^str|__GI_)"),
]
RULES = [(name, re.compile(pattern)) for name, pattern in GROUPS]


def main():
    sagas, hz = int(sys.argv[1]), float(sys.argv[2])
    groups, functions = collections.Counter(), collections.Counter()
    for line in sys.stdin:
        # "IP SYMBOL (DSO)", one line per sample (recorded without call chains).
        m = re.match(r"^\s*[0-9a-f]+\s+(.*?)\s+\((.*)\)\s*$", line)
        if not m:
            continue
        symbol, dso = m.group(1), m.group(2)
        if "kernel" in dso:
            symbol = "[k] " + symbol
        if "plpgsql" in dso:
            symbol = "plpgsql " + symbol
        name = "postgres: other named functions" if "postgres" in dso else "other libraries"
        if re.match(r"^\[unknown\]$|^0x", symbol) and "postgres" in dso:
            name = "postgres: static functions without a symbol"
        else:
            for group, rule in RULES:
                if rule.search(symbol):
                    name = group
                    break
        groups[name] += 1
        functions[symbol + "  (" + dso.rsplit("/", 1)[-1] + ")"] += 1
    total = sum(groups.values())
    if total == 0:
        sys.exit("no samples: is perf allowed to sample PostgreSQL's processes?")
    cpu_ms = total / hz * 1000
    print(f"PostgreSQL: {total} samples at {hz:g} Hz = {cpu_ms / 1000:.1f} s of CPU for {sagas} sagas: "
          f"{cpu_ms / max(sagas, 1):.2f} ms per saga")
    print("share of PostgreSQL's CPU, by what the sampled function does:")
    for name, count in groups.most_common():
        print(f"  {100 * count / total:5.1f} %  {cpu_ms * count / total / max(sagas, 1):6.3f} ms/saga  {name}")
    print("hottest functions:")
    for name, count in functions.most_common(25):
        print(f"  {100 * count / total:5.1f} %  {name}")


if __name__ == "__main__":
    main()

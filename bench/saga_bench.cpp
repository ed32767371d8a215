// End-to-end saga throughput and latency: order-payment sagas through the engine (`sagaflow run`)
// and both example services, real PostgreSQL and Kafka, durability on. Beside it, in the same run,
// the limit: pgbench single-row-insert commits/s at 16 clients on the same PostgreSQL, and DTM's
// baseline, sysbench-style write-only transactions/s.
//
//   saga_bench DB_URL BROKERS --json OUT --cli SAGAFLOW --services-dir DIR --saga FILE
//              [--seconds S] [--inflight N] [--warmup S] [--phases all|closed] [--pgbench PATH]
//              [--consumer-property K=V]... [--databases shared|per-service]
//
// Closed loop first (N sagas kept in flight: the maximum), then open loop at 25 %, 50 % and 75 %
// of that maximum (`--phases closed`: the closed loop only, e.g. 600 s for the flat-memory run).
// Latency is start-to-terminal from the database's own timestamps
// (saga_instance.created_at .. updated_at of the terminal write). CPU seconds per saga and RSS come
// from /proc for every process.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <pqxx/pqxx>
#include <set>
#include <sstream>
#include <thread>
#include <utility>
#include <vector>

#include <atomic>
#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>

#include "engine/engine.hpp"
#include "outbox/detail/rdkafka.hpp"
#include "store/prepared.hpp"
#include "tools/child_process.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using sagaflow::detail::ChildProcess;

struct Args {
    std::string db, brokers, json, cli, services, saga, pgbench = "/usr/lib/postgresql/15/bin/pgbench";
    int seconds = 15;
    int inflight = 64;
    bool closed_only = false;  // --phases closed: the long flat-memory run
    // --consumer-property K=V (repeatable): librdkafka properties for the consumers of the engine
    // and of both services (tuning experiments; recorded in the JSON).
    std::vector<std::string> consumer_properties;
    std::string broker_gc_log;  // --broker-gc-log: the broker's GC log, for its pauses per phase
    int warmup = 60;            // seconds of closed loop before measuring: the broker's JIT compiles meanwhile
    // --databases per-service: the order and payment services each in a database of their own on the
    // same server (as services are usually deployed), not in schemas of the engine's database.
    bool service_databases = false;
};

// `url` naming database `name` instead (the path after the authority).
std::string WithDatabase(const std::string& url, const std::string& name) {
    const auto authority = url.find("://");
    const auto slash = url.find('/', authority == std::string::npos ? 0 : authority + 3);
    const auto query = url.find('?', slash);
    return url.substr(0, slash) + "/" + name + (query == std::string::npos ? "" : url.substr(query));
}

struct Usage {
    double cpu_seconds = 0;
    long rss_kb = 0;
};

// A process's command name and CPU seconds from its /proc/<pid>/stat: utime + stime, plus the
// children it reaped (cutime + cstime) with `with_children`. Empty name if the process is gone.
struct ProcStat {
    std::string comm;
    double cpu_seconds = 0;
};

ProcStat ReadProcStat(const std::filesystem::path& dir, bool with_children) {
    ProcStat result;
    std::ifstream stat(dir / "stat");
    std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    const auto open = text.find('(');
    const auto close = text.rfind(')');
    if (open == std::string::npos || close == std::string::npos) return result;
    result.comm = text.substr(open + 1, close - open - 1);
    std::istringstream rest(text.substr(close + 2));
    std::string field;
    unsigned long long ticks = 0;
    const int last = with_children ? 17 : 15;
    for (int i = 3; i <= last && rest >> field; ++i) {
        if (i >= 14) ticks += std::stoull(field);
    }
    result.cpu_seconds = static_cast<double>(ticks) / static_cast<double>(sysconf(_SC_CLK_TCK));
    return result;
}

Usage Measure(pid_t pid) {
    Usage u;
    u.cpu_seconds = ReadProcStat("/proc/" + std::to_string(pid), false).cpu_seconds;
    std::ifstream status("/proc/" + std::to_string(pid) + "/status");
    std::string line;
    while (std::getline(status, line)) {
        if (line.rfind("VmRSS:", 0) == 0) u.rss_kb = std::stol(line.substr(6));
    }
    return u;
}

// CPU seconds of every local process whose command name is `comm` (e.g. "postgres": the postmaster
// and its backends) or whose command line contains `cmdline_part` (the broker's main class), with
// the children they reaped (a backend that exited still counts through its postmaster).
double GroupCpuSeconds(const std::string& comm, const std::string& cmdline_part) {
    double total = 0;
    for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
        const std::string pid = entry.path().filename();
        if (pid.empty() || !std::all_of(pid.begin(), pid.end(), [](char c) { return c >= '0' && c <= '9'; })) continue;
        const ProcStat stat = ReadProcStat(entry.path(), true);
        if (stat.comm.empty()) continue;
        bool member = stat.comm == comm;
        if (!member && !cmdline_part.empty()) {
            std::ifstream cmdline(entry.path() / "cmdline");
            std::string args((std::istreambuf_iterator<char>(cmdline)), std::istreambuf_iterator<char>());
            member = args.find(cmdline_part) != std::string::npos;
        }
        if (member) total += stat.cpu_seconds;
    }
    return total;
}

// The whole machine, from /proc/stat: CPU seconds busy (every state but idle and iowait) over all
// cores, of them in the kernel (system, irq, softirq), and context switches since boot.
struct Machine {
    double busy = 0, kernel = 0, context_switches = 0;
};

Machine MeasureMachine() {
    std::ifstream stat("/proc/stat");
    std::string word;
    unsigned long long value = 0, busy = 0, kernel = 0;
    stat >> word;
    for (int i = 0; i < 8 && stat >> value; ++i) {
        if (i != 3 && i != 4) busy += value;  // user nice system idle iowait irq softirq steal
        if (i == 2 || i == 5 || i == 6) kernel += value;
    }
    Machine m;
    const auto tick = static_cast<double>(sysconf(_SC_CLK_TCK));
    m.busy = static_cast<double>(busy) / tick;
    m.kernel = static_cast<double>(kernel) / tick;
    while (stat >> word) {
        if (word == "ctxt" && stat >> value) m.context_switches = static_cast<double>(value);
    }
    return m;
}

struct ServerCpu {
    double postgres = 0, broker = 0;
    Machine machine;
};

ServerCpu MeasureServers() {
    return {GroupCpuSeconds("postgres", ""), GroupCpuSeconds("", "kafka.Kafka"), MeasureMachine()};
}

// Runs pgbench with `script` at 16 clients for 10 s on the same server after `setup`. Returns the
// transactions (commits) per second it reports.
double Pgbench(const Args& a, const std::string& setup, const std::string& script_text) {
    {
        pqxx::connection conn{a.db};
        pqxx::work tx{conn};
        tx.exec(setup);
        tx.commit();
    }
    const std::string script = "/tmp/sagaflow-pgbench-" + std::to_string(getpid()) + ".sql";
    std::ofstream(script) << script_text;
    const std::string command = a.pgbench + " -n -c 16 -j 2 -T 10 -f " + script + " '" + a.db + "' 2>&1";
    FILE* pipe = popen(command.c_str(), "r");
    std::string out;
    std::array<char, 512> buffer{};
    while (pipe != nullptr && fgets(buffer.data(), buffer.size(), pipe) != nullptr) out += buffer.data();
    if (pipe != nullptr) pclose(pipe);
    std::remove(script.c_str());
    const auto at = out.find("tps = ");
    if (at == std::string::npos) throw std::runtime_error("pgbench gave no tps:\n" + out);
    if (out.find("aborted") != std::string::npos) throw std::runtime_error("a pgbench client failed:\n" + out);
    return std::stod(out.substr(at + 6));
}

// The limit: one single-row INSERT per transaction.
double PgbenchInserts(const Args& a) {
    return Pgbench(a,
                   "CREATE TABLE IF NOT EXISTS bench_insert (id bigserial PRIMARY KEY, v int NOT NULL)",
                   "INSERT INTO bench_insert (v) VALUES (1);\n");
}

// The limit DTM's published comparison divides by (en.dtm.pub/other/performance: its saga with
// the barrier at 531 global transactions/s against 2,006 sysbench `oltp_write_only` transactions/s
// of the same MySQL, "about a quarter"): sysbench's write-only transaction on a table shaped like
// sysbench's (`id` key, an index on `k`, `c` char(120), `pad` char(60)) of 100,000 rows — an
// update of an indexed column, an update of an unindexed one, a delete and the re-insert of that
// row, in one transaction. Each of the 16 clients keeps to its own 6,250 ids: two clients deleting
// and re-inserting one id would end one of them on a duplicate key (sysbench ignores those errors;
// pgbench stops the client).
double PgbenchWriteOnly(const Args& a) {
    const std::string c(119, 'c'), pad(59, 'p');
    return Pgbench(a,
                   "DROP TABLE IF EXISTS bench_sbtest; "
                   "CREATE TABLE bench_sbtest (id int PRIMARY KEY, k int NOT NULL DEFAULT 0, "
                   "c char(120) NOT NULL DEFAULT '', pad char(60) NOT NULL DEFAULT ''); "
                   "INSERT INTO bench_sbtest SELECT i, (random() * 100000)::int, '" +
                       c + "', '" + pad +
                       "' FROM generate_series(1, 100000) i; "
                       "CREATE INDEX bench_sbtest_k ON bench_sbtest (k); ANALYZE bench_sbtest",
                   "\\set id :client_id * 6250 + random(1, 6250)\n"
                   "\\set k random(1, 100000)\n"
                   "BEGIN;\n"
                   "UPDATE bench_sbtest SET k = k + 1 WHERE id = :id;\n"
                   "UPDATE bench_sbtest SET c = '" +
                       c +
                       "' WHERE id = :id;\n"
                       "DELETE FROM bench_sbtest WHERE id = :id;\n"
                       "INSERT INTO bench_sbtest (id, k, c, pad) VALUES (:id, :k, '" +
                       c + "', '" + pad +
                       "');\n"
                       "COMMIT;\n");
}

struct Phase {
    std::string name;
    double offered_rate = 0;  // 0: closed loop
    int started = 0;
    double seconds = 0;
    double completed_per_second = 0;
    double p50_ms = 0, p95_ms = 0, p99_ms = 0;
    nlohmann::json hops;  // where a saga's time went: all sagas against the slowest 1 %
    std::chrono::system_clock::time_point wall_start, wall_end;  // for the broker's GC log
};

// The broker's stop-the-world GC pauses, as (when logged, ms), from its unified JVM log
// (-Xlog:gc:file=...:time,...: "[2026-12-06T11:07:46.809+0000][210.513s] GC(59) Pause Young ... 11.648ms");
// the rotated files (gc.log.0, .1) are read too. A paused broker holds every produce and fetch.
using GcPause = std::pair<std::chrono::system_clock::time_point, double>;
std::vector<GcPause> BrokerGcPauses(const std::string& log) {
    std::vector<GcPause> pauses;
    for (const std::string& path : {log + ".1", log + ".0", log}) {
        std::ifstream in(path);
        for (std::string line; std::getline(in, line);) {
            if (line.find(" Pause ") == std::string::npos || line.back() != 's') continue;
            std::tm tm{};
            int millis = 0;
            if (std::sscanf(line.c_str(),
                            "[%d-%d-%dT%d:%d:%d.%d",
                            &tm.tm_year,
                            &tm.tm_mon,
                            &tm.tm_mday,
                            &tm.tm_hour,
                            &tm.tm_min,
                            &tm.tm_sec,
                            &millis) != 7) {
                continue;
            }
            tm.tm_year -= 1900;
            tm.tm_mon -= 1;
            pauses.emplace_back(std::chrono::system_clock::from_time_t(timegm(&tm)) + std::chrono::milliseconds(millis),
                                std::strtod(line.c_str() + line.rfind(' ') + 1, nullptr));
        }
    }
    return pauses;
}

// The pauses logged within [from, to]: their number, total and longest.
nlohmann::json PausesWithin(const std::vector<GcPause>& pauses,
                            std::chrono::system_clock::time_point from,
                            std::chrono::system_clock::time_point to) {
    int count = 0;
    double total_ms = 0, longest_ms = 0;
    for (const auto& [at, ms] : pauses) {
        if (at < from || at > to) continue;
        ++count;
        total_ms += ms;
        longest_ms = std::max(longest_ms, ms);
    }
    return {{"pauses", count}, {"pause_ms", total_ms}, {"longest_ms", longest_ms}};
}

// When the relays handed each record to their producers: the records' own timestamps
// (CreateTime, set by librdkafka at the produce call), read back after a phase from the offsets the
// topics had before it, so reading them costs the phase nothing. They split a hop into the relay
// (commit -> produce) and the delivery (produce -> the consumer's transaction start); both clocks
// are this machine's.
class RecordTimes {
  public:
    explicit RecordTimes(const std::string& brokers) {
        namespace kd = sagaflow::outbox::detail;
        client_ = kd::MakeClient(RD_KAFKA_CONSUMER,
                                 kd::MakeConf({{"bootstrap.servers", brokers},
                                               {"group.id", "saga-bench-record-times"},
                                               {"enable.auto.commit", "false"},
                                               {"enable.partition.eof", "true"},
                                               {"log_level", "3"}}));
        const rd_kafka_metadata_t* metadata = nullptr;
        if (rd_kafka_metadata(client_.get(), 1, nullptr, &metadata, 10000) != RD_KAFKA_RESP_ERR_NO_ERROR) {
            throw std::runtime_error("saga_bench: cannot read the broker's topics");
        }
        for (int t = 0; t < metadata->topic_cnt; ++t) {
            const std::string topic = metadata->topics[t].topic;
            if (topic.starts_with("__") || topic.ends_with(".dlq")) continue;
            for (int p = 0; p < metadata->topics[t].partition_cnt; ++p) ends_[{topic, p}] = 0;
        }
        rd_kafka_metadata_destroy(metadata);
    }
    using Offsets = std::map<std::pair<std::string, std::int32_t>, std::int64_t>;
    // Every partition's end now.
    Offsets Ends() {
        for (auto& [partition, end] : ends_) {
            std::int64_t low = 0;
            rd_kafka_query_watermark_offsets(
                client_.get(), partition.first.c_str(), partition.second, &low, &end, 10000);
        }
        return ends_;
    }
    // The records from `from` to the ends now into the session's temporary table bench_record
    // (created by main before anything is measured).
    void Load(pqxx::connection& conn, const Offsets& from) {
        namespace kd = sagaflow::outbox::detail;
        const Offsets to = Ends();
        kd::TopicPartitionListPtr list{rd_kafka_topic_partition_list_new(static_cast<int>(from.size()))};
        std::size_t open = 0;
        for (const auto& [partition, offset] : from) {
            if (to.at(partition) <= offset) continue;
            rd_kafka_topic_partition_list_add(list.get(), partition.first.c_str(), partition.second)->offset = offset;
            ++open;
        }
        std::vector<std::optional<std::string>> ids, produced_ms;
        std::set<std::pair<std::string, std::int32_t>> done;
        rd_kafka_assign(client_.get(), list.get());
        const auto deadline = Clock::now() + std::chrono::seconds(60);
        while (open > 0 && Clock::now() < deadline) {
            kd::MessagePtr message{rd_kafka_consumer_poll(client_.get(), 1000)};
            if (!message) continue;
            const std::pair<std::string, std::int32_t> partition{rd_kafka_topic_name(message->rkt), message->partition};
            if ((message->err == RD_KAFKA_RESP_ERR__PARTITION_EOF || message->offset + 1 >= to.at(partition)) &&
                done.insert(partition).second) {
                --open;
            }
            if (message->err != RD_KAFKA_RESP_ERR_NO_ERROR || message->offset >= to.at(partition)) continue;
            rd_kafka_timestamp_type_t type;
            const std::int64_t at = rd_kafka_message_timestamp(message.get(), &type);
            for (const auto& [name, value] : kd::MessageHeaders(message.get())) {
                if (name == "sagaflow-event-id" && type == RD_KAFKA_TIMESTAMP_CREATE_TIME) {
                    ids.emplace_back(value);
                    produced_ms.emplace_back(std::to_string(at));
                }
            }
        }
        rd_kafka_assign(client_.get(), nullptr);
        pqxx::work tx{conn};
        tx.exec("TRUNCATE bench_record");
        sagaflow::store::ExecArrays(tx,
                                    "INSERT INTO bench_record SELECT unnest($1::text[])::uuid, "
                                    "to_timestamp(unnest($2::text[])::float8 / 1000)",
                                    {ids, produced_ms});
        tx.exec("ANALYZE bench_record");
        tx.commit();
    }

  private:
    sagaflow::outbox::detail::ClientPtr client_;
    Offsets ends_;
};

// Per saga, where its time went (ms, summed over its steps), as means over all the phase's sagas and
// over those at or above its p99: which part the tail waits in. Every boundary is a clock of the
// database that decided it — a transaction's start (`now()`, stored by the inbox as
// processed_event.processed_at) and its commit (`pg_xact_commit_timestamp` of a row it inserted,
// so bench/run turns on track_commit_timestamp):
//   start_tx:       the saga's start, to its commit (which holds the first dispatch)
//   command_hop:    a dispatch's commit -> the participant's transaction start (the relay's claim and
//                   produce, the broker, the participant's consumer and the batch before)
//   participant_tx: the participant's transaction (inbox, step row, reply in its outbox, commit)
//   reply_hop:      its commit -> the engine's transaction start on the reply
//   engine_tx:      the engine's transaction on the reply (the next dispatch or the end, commit)
// In the open phases each hop splits in two by the record's timestamp (RecordTimes): the relay
// (command_relay, reply_relay: the commit -> the produce call) and the delivery (command_delivery,
// reply_delivery: the produce call -> the consumer's transaction start).
// Also: how the slowest 1 % spread over time (the share of them that started within the phase's
// worst second), which tells one stall from a tail every second shares.
// With --databases per-service the participants' tables are in other databases: no hops then.
bool g_hops_readable = true;

nlohmann::json Hops(pqxx::connection& conn, const std::string& prefix, double p99_ms) {
    if (!g_hops_readable) return {{"unavailable", "the services run in databases of their own"}};
    pqxx::read_transaction tx{conn};
    if (tx.exec1("SHOW track_commit_timestamp")[0].as<std::string>() != "on") {
        return {{"unavailable", "the server does not track commit timestamps (track_commit_timestamp = on)"}};
    }
    const auto rows = tx.exec_params(
        "WITH s AS (SELECT saga_id, created_at, extract(epoch FROM updated_at - created_at) * 1000 AS ms "
        "  FROM saga_instance WHERE idempotency_key LIKE $1 AND status IN ('completed', 'compensated', 'failed')), "
        "d AS (SELECT st.saga_id, st.step_name, st.phase, st.command_event_id, "
        "  pg_xact_commit_timestamp(e.xmin) AS committed FROM s JOIN saga_step st USING (saga_id) "
        "  JOIN saga_timeline t ON t.event_id = st.command_event_id AND t.kind = 'dispatched' "
        "  JOIN saga_event e ON e.id = t.id), "
        "i AS (SELECT event_id, processed_at, pg_xact_commit_timestamp(xmin) AS committed FROM orders.processed_event "
        "  UNION ALL SELECT event_id, processed_at, pg_xact_commit_timestamp(xmin) FROM payments.processed_event), "
        "p AS (SELECT saga_id, step_name, phase, reply_event_id FROM orders.participant_step "
        "  UNION ALL SELECT saga_id, step_name, phase, reply_event_id FROM payments.participant_step), "
        "h AS (SELECT d.saga_id, min(d.committed) AS first_dispatch, "
        "  sum(extract(epoch FROM i.processed_at - d.committed)) * 1000 AS command_hop, "
        "  sum(extract(epoch FROM i.committed - i.processed_at)) * 1000 AS participant_tx, "
        "  sum(extract(epoch FROM r.processed_at - i.committed)) * 1000 AS reply_hop, "
        "  sum(extract(epoch FROM pg_xact_commit_timestamp(r.xmin) - r.processed_at)) * 1000 AS engine_tx, "
        "  sum(extract(epoch FROM c.produced_at - d.committed)) * 1000 AS command_relay, "
        "  sum(extract(epoch FROM i.processed_at - c.produced_at)) * 1000 AS command_delivery, "
        "  sum(extract(epoch FROM y.produced_at - i.committed)) * 1000 AS reply_relay, "
        "  sum(extract(epoch FROM r.processed_at - y.produced_at)) * 1000 AS reply_delivery, "
        "  count(c.produced_at) + count(y.produced_at) AS records, count(*) * 2 AS messages "
        "  FROM d JOIN i ON i.event_id = d.command_event_id "
        "  JOIN p ON p.saga_id = d.saga_id AND p.step_name = d.step_name AND p.phase = d.phase "
        "  JOIN processed_event r ON r.event_id = p.reply_event_id "
        "  LEFT JOIN bench_record c ON c.event_id = d.command_event_id "
        "  LEFT JOIN bench_record y ON y.event_id = p.reply_event_id GROUP BY d.saga_id), "
        "f AS (SELECT s.created_at, s.ms, extract(epoch FROM h.first_dispatch - s.created_at) * 1000 AS start_tx, "
        "  h.command_hop, h.participant_tx, h.reply_hop, h.engine_tx, h.command_relay, h.command_delivery, "
        "  h.reply_relay, h.reply_delivery, h.records, h.messages FROM s JOIN h USING (saga_id)), "
        "g AS (SELECT 'all' AS g, * FROM f UNION ALL SELECT 'p99', * FROM f WHERE ms >= $2) "
        "SELECT g, count(*), avg(ms), avg(start_tx), avg(command_hop), avg(participant_tx), avg(reply_hop), "
        "avg(engine_tx), (SELECT max(n) FROM (SELECT count(*) AS n FROM g g2 WHERE g2.g = g.g "
        "  GROUP BY date_trunc('second', created_at)) w), avg(command_relay), avg(command_delivery), "
        "avg(reply_relay), avg(reply_delivery), sum(records)::float8 / sum(messages) FROM g GROUP BY g ORDER BY g",
        prefix + "%",
        p99_ms);
    nlohmann::json hops = nlohmann::json::object();
    for (const auto& row : rows) {
        const auto ms = [&](int i) { return row[i].is_null() ? 0.0 : std::round(row[i].as<double>() * 10) / 10; };
        const auto sagas = row[1].as<long long>();
        hops[row[0].as<std::string>()] = {
            {"sagas", sagas},
            {"total_ms", ms(2)},
            {"start_tx_ms", ms(3)},
            {"command_hop_ms", ms(4)},
            {"participant_tx_ms", ms(5)},
            {"reply_hop_ms", ms(6)},
            {"engine_tx_ms", ms(7)},
            {"share_in_worst_second",
             std::round(row[8].as<double>() / static_cast<double>(std::max(1LL, sagas)) * 100) / 100}};
        // The split by the records' timestamps, where they were read (RecordTimes) for every message.
        if (!row[13].is_null() && row[13].as<double>() == 1.0) {
            auto& phase = hops[row[0].as<std::string>()];
            phase["command_relay_ms"] = ms(9);
            phase["command_delivery_ms"] = ms(10);
            phase["reply_relay_ms"] = ms(11);
            phase["reply_delivery_ms"] = ms(12);
        }
    }
    return hops;
}

// Start-to-terminal latency percentiles of the sagas whose key starts with `prefix`.
void Latencies(pqxx::connection& conn, const std::string& prefix, Phase& phase) {
    {
        pqxx::read_transaction tx{conn};
        const auto row = tx.exec_params1(
            "SELECT coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY ms), 0), "
            "coalesce(percentile_cont(0.95) WITHIN GROUP (ORDER BY ms), 0), "
            "coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY ms), 0) FROM (SELECT "
            "extract(epoch FROM updated_at - created_at) * 1000 AS ms FROM saga_instance WHERE idempotency_key LIKE $1 "
            "AND status IN ('completed', 'compensated', 'failed')) d",
            prefix + "%");
        phase.p50_ms = row[0].as<double>();
        phase.p95_ms = row[1].as<double>();
        phase.p99_ms = row[2].as<double>();
    }
    phase.hops = Hops(conn, prefix, phase.p99_ms);
}

// Checkpoints the server has made so far (timed and requested): each one is followed by a burst of
// full-page writes into the WAL, a suspect for latency stalls.
long long Checkpoints(pqxx::connection& conn) {
    pqxx::read_transaction tx{conn};
    return tx.exec1("SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter")[0].as<long long>();
}

// PostgreSQL's own counters over a phase: per saga they are exact where CPU seconds are noisy
// (WAL records and bytes, commits in every database of the server).
struct PgCounters {
    double wal_records = 0, wal_bytes = 0, commits = 0;
};

PgCounters ReadPgCounters(pqxx::connection& conn) {
    pqxx::nontransaction tx{conn};
    const auto row = tx.exec1(
        "SELECT wal_records::float8, wal_bytes::float8, (SELECT sum(xact_commit)::float8 FROM pg_stat_database) "
        "FROM pg_stat_wal");
    return {row[0].as<double>(), row[1].as<double>(), row[2].as<double>()};
}

// The benchmark's own transactions (its polls for finished sagas): left out of the commits per saga,
// which count the sagas' work. Each poll is one statement, one transaction.
std::atomic<long long> harness_transactions{0};

long long Terminal(pqxx::connection& conn, const std::string& prefix) {
    ++harness_transactions;
    pqxx::read_transaction tx{conn};
    return tx
        .exec_params1(
            "SELECT count(*) FROM saga_instance WHERE idempotency_key LIKE $1 AND status IN "
            "('completed', 'compensated', 'failed')",
            prefix + "%")[0]
        .as<long long>();
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 3) {
        std::cerr << "usage: saga_bench DB_URL BROKERS --json OUT --cli SAGAFLOW --services-dir DIR --saga FILE\n";
        return 2;
    }
    Args a;
    a.db = argv[1];
    a.brokers = argv[2];
    for (int i = 3; i + 1 < argc; i += 2) {
        const std::string k = argv[i], v = argv[i + 1];
        if (k == "--json")
            a.json = v;
        else if (k == "--cli")
            a.cli = v;
        else if (k == "--services-dir")
            a.services = v;
        else if (k == "--saga")
            a.saga = v;
        else if (k == "--seconds")
            a.seconds = std::stoi(v);
        else if (k == "--inflight")
            a.inflight = std::stoi(v);
        else if (k == "--warmup")
            a.warmup = std::stoi(v);
        else if (k == "--phases")
            a.closed_only = v == "closed";
        else if (k == "--pgbench")
            a.pgbench = v;
        else if (k == "--consumer-property")
            a.consumer_properties.push_back(v);
        else if (k == "--broker-gc-log")
            a.broker_gc_log = v;
        else if (k == "--databases") {  // shared (default) | per-service
            a.service_databases = v == "per-service";
            g_hops_readable = !a.service_databases;
        }
    }
    std::cerr << "saga_bench: pgbench single-row inserts, 16 clients, 10 s ..." << std::endl;
    const double limit = PgbenchInserts(a);
    std::cerr << "saga_bench: limit " << limit << " commits/s" << std::endl;
    std::cerr << "saga_bench: pgbench sysbench-style write-only transactions (DTM's baseline), 16 clients, 10 s ..."
              << std::endl;
    const double write_only = PgbenchWriteOnly(a);
    std::cerr << "saga_bench: write-only limit " << write_only << " transactions/s" << std::endl;

    const std::string logs = "/tmp/sagaflow-saga-bench-" + std::to_string(getpid());
    std::filesystem::create_directories(logs);
    std::vector<std::string> engine_args{
        "run", "--db", a.db, "--brokers", a.brokers, "--saga", a.saga, "--kafka-property", "log_level=3"};
    std::vector<std::string> common{"--db", a.db, "--brokers", a.brokers};
    for (const auto& property : a.consumer_properties) {
        engine_args.insert(engine_args.end(), {"--kafka-property", property});
        common.insert(common.end(), {"--consumer-property", property});
    }
    ChildProcess engine_process{a.cli, engine_args, logs + "/engine.log"};
    auto order_args = common;
    auto payment_args = common;
    if (a.service_databases) {
        pqxx::connection admin{a.db};
        for (const char* name : {"bench_orders", "bench_payments"}) {
            pqxx::nontransaction{admin}.exec(std::string("DROP DATABASE IF EXISTS ") + name);
            pqxx::nontransaction{admin}.exec(std::string("CREATE DATABASE ") + name);
        }
        order_args[1] = WithDatabase(a.db, "bench_orders");
        payment_args[1] = WithDatabase(a.db, "bench_payments");
    }
    ChildProcess order{a.services + "/sagaflow-order-service", order_args, logs + "/order.log"};
    payment_args.insert(payment_args.end(), {"--limit", "1000000"});
    ChildProcess payment{a.services + "/sagaflow-payment-service", payment_args, logs + "/payment.log"};

    sagaflow::EngineConfig config;
    config.database_url = a.db;
    config.kafka_brokers = a.brokers;
    config.process_sagas = false;
    config.run_relay = false;
    config.create_topics = false;
    config.database_pool_size = 8;
    sagaflow::Engine front{config};
    front.RegisterDefinitionFile(a.saga);
    front.Start();
    pqxx::connection conn{a.db};
    // Where the open phases' record timestamps go (RecordTimes): created before anything is measured.
    pqxx::nontransaction{conn}.exec("CREATE TEMP TABLE bench_record (event_id uuid, produced_at timestamptz)");

    // Starts run on 8 threads, so the driver is never the bottleneck (a start is one transaction).
    std::atomic<int> serial{0};
    boost::asio::thread_pool starters{8};
    std::atomic<int> pending{0};
    // The sagas of the closed loop that were started and not yet seen terminal.
    std::mutex open_mutex;
    std::vector<std::string> open_ids;
    const auto start_one = [&](const std::string& prefix) {
        ++pending;
        boost::asio::post(starters, [&, prefix] {
            const std::string id = prefix + std::to_string(serial++);
            const auto started =
                front.StartSaga("order-payment", {{"orderId", id}, {"customerId", 7}, {"amount", "10.00"}}, id);
            {
                const std::lock_guard lock{open_mutex};
                open_ids.push_back(started.saga_id);
            }
            --pending;
        });
    };
    // How many of the open sagas turned terminal since the last call: primary-key lookups of the
    // few open ids, so the driver's polling costs the database next to nothing (a count over the
    // phase's rows every 5 ms was a sequential scan that grew with the table: seen with perf).
    // Prepared and planned once, as sagaflow's own statements are: unprepared, its planning was
    // 40 us of PostgreSQL's time per saga (pg_stat_statements with track_planning, session 11).
    // On a session of its own: the report's queries below keep PostgreSQL's defaults.
    pqxx::connection poll_conn{a.db};
    sagaflow::store::UseOwnStatementPlans(poll_conn);
    const auto newly_terminal = [&] {
        std::vector<std::string> ids;
        {
            const std::lock_guard lock{open_mutex};
            ids = open_ids;
        }
        if (ids.empty()) return 0;
        ++harness_transactions;
        pqxx::nontransaction tx{poll_conn};  // one statement: no BEGIN, SET TRANSACTION, COMMIT round trips
        const auto rows = sagaflow::store::Exec(
            tx,
            "SELECT saga_id::text FROM saga_instance WHERE saga_id = ANY($1::uuid[]) AND status IN "
            "('completed', 'compensated', 'failed')",
            sagaflow::store::UuidArray(ids));
        std::set<std::string> done;
        for (const auto& row : rows) done.insert(row[0].as<std::string>());
        const std::lock_guard lock{open_mutex};
        std::erase_if(open_ids, [&](const std::string& id) { return done.count(id) != 0; });
        return static_cast<int>(done.size());
    };
    // Warm up: every process connected, every topic's partitions assigned.
    for (int i = 0; i < 50; ++i) start_one("warm-");
    while (pending.load() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    const auto warm_deadline = Clock::now() + std::chrono::seconds(120);
    while (Terminal(conn, "warm-") < 50 && Clock::now() < warm_deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    std::map<std::string, pid_t> pids{{"engine", engine_process.Pid()},
                                      {"order-service", order.Pid()},
                                      {"payment-service", payment.Pid()},
                                      {"bench-front-end", getpid()}};
    // RSS of every process every 10 s of the measured closed loop: flat memory is a requirement.
    nlohmann::json rss_series = nlohmann::json::array();
    bool sample_rss = false;
    // Closed loop: keep `inflight` sagas with keys starting with `prefix` open until `end`.
    // Returns the number of sagas terminal at `end`.
    int closed_started = 0;
    const auto closed_loop = [&](const std::string& prefix, Clock::time_point end) {
        closed_started = 0;
        const auto t0 = Clock::now();
        auto next_sample = t0;
        {
            const std::lock_guard lock{open_mutex};
            open_ids.clear();
        }
        long long done = 0;
        while (Clock::now() < end) {
            done += newly_terminal();
            const long long open = closed_started - done;
            for (long long k = open; k < a.inflight; ++k, ++closed_started) start_one(prefix);
            if (sample_rss && Clock::now() >= next_sample) {
                nlohmann::json sample{{"seconds", std::chrono::duration<double>(Clock::now() - t0).count()},
                                      {"terminal", done}};
                for (const auto& [name, pid] : pids) sample[name + "_rss_kb"] = Measure(pid).rss_kb;
                rss_series.push_back(sample);
                next_sample += std::chrono::seconds(10);
                std::cerr << "saga_bench: " << static_cast<int>(sample["seconds"].get<double>()) << " s, " << done
                          << " sagas, engine RSS " << sample["engine_rss_kb"] << " KiB" << std::endl;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
        return Terminal(conn, prefix);
    };
    // Steady state before measuring: a cold broker spends about a fifth of the machine's CPU in
    // its JIT compiler for the first tens of seconds (measured with perf).
    const long long warm_done = closed_loop("warmloop-", Clock::now() + std::chrono::seconds(a.warmup));
    std::cerr << "saga_bench: warmed up (" << a.warmup << " s closed loop, " << warm_done << " sagas)" << std::endl;
    while (pending.load() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    const auto drained_by = Clock::now() + std::chrono::seconds(60);
    while (Terminal(conn, "warmloop-") < closed_started && Clock::now() < drained_by) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    // Statistics for the tables the warm-up filled, before measuring. The processes' prepared
    // statements keep the generic plans PostgreSQL chose when the tables were nearly empty (a
    // sequential scan for a lookup by key) until the tables are next analysed, which invalidates
    // them. autovacuum does that once per minute at best: a run with a 30 s warm-up measured the
    // participants' step lookup at 3.8 ms a call (436 pages read), 0.03 ms after.
    {
        pqxx::nontransaction tx{conn};
        tx.exec("ANALYZE");
    }

    std::map<std::string, Usage> before;
    for (const auto& [name, pid] : pids) before[name] = Measure(pid);
    const ServerCpu servers_before = MeasureServers();
    const PgCounters pg_before = ReadPgCounters(conn);
    const long long harness_before = harness_transactions.load();

    const long long checkpoints_before = Checkpoints(conn);
    std::vector<Phase> phases;
    // Closed loop: keep `inflight` sagas open.
    {
        Phase p;
        p.name = "closed-loop";
        const std::string prefix = "closed-";
        const auto t0 = Clock::now();
        p.wall_start = std::chrono::system_clock::now();
        const auto end = t0 + std::chrono::seconds(a.seconds);
        sample_rss = true;
        const long long at_end = closed_loop(prefix, end);
        sample_rss = false;
        p.started = closed_started;
        p.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
        p.wall_end = std::chrono::system_clock::now();
        while (pending.load() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
        p.completed_per_second = static_cast<double>(at_end) / p.seconds;
        while (Terminal(conn, prefix) < p.started && Clock::now() < end + std::chrono::seconds(60)) {
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
        phases.push_back(p);
    }
    // The closed loop's costs end with its last saga, before the report's own queries below.
    std::map<std::string, Usage> after_closed;
    for (const auto& [name, pid] : pids) after_closed[name] = Measure(pid);
    const ServerCpu servers_after = MeasureServers();
    const PgCounters pg_after = ReadPgCounters(conn);
    const long long harness_closed = harness_transactions.load() - harness_before;
    Latencies(conn, "closed-", phases[0]);
    std::cerr << "saga_bench: closed loop " << phases[0].completed_per_second << " sagas/s, p99 " << phases[0].p99_ms
              << " ms" << std::endl;
    const int closed_completed = phases[0].started;

    // Open loop at fractions of the maximum.
    RecordTimes records{a.brokers};
    for (const double fraction : a.closed_only ? std::vector<double>{} : std::vector<double>{0.25, 0.5, 0.75}) {
        Phase p;
        p.offered_rate = std::max(1.0, phases[0].completed_per_second * fraction);
        p.name = "open-" + std::to_string(static_cast<int>(fraction * 100)) + "%";
        const std::string prefix = "open" + std::to_string(static_cast<int>(fraction * 100)) + "-";
        const auto from = records.Ends();
        const auto t0 = Clock::now();
        p.wall_start = std::chrono::system_clock::now();
        const auto end = t0 + std::chrono::seconds(a.seconds);
        while (Clock::now() < end) {
            const double elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
            while (p.started < static_cast<int>(elapsed * p.offered_rate)) {
                start_one(prefix);
                ++p.started;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(2));
        }
        p.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
        p.wall_end = std::chrono::system_clock::now();
        while (pending.load() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
        while (Terminal(conn, prefix) < p.started && Clock::now() < end + std::chrono::seconds(60)) {
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
        p.completed_per_second = static_cast<double>(Terminal(conn, prefix)) / p.seconds;
        records.Load(conn, from);
        Latencies(conn, prefix, p);
        phases.push_back(p);
        std::cerr << "saga_bench: " << p.name << " offered " << p.offered_rate << "/s, p99 " << p.p99_ms << " ms"
                  << std::endl;
    }

    nlohmann::json out{{"benchmark", "saga"},
                       {"limit_pgbench_insert_commits_per_second", limit},
                       {"ratio_sagas_per_commit", phases[0].completed_per_second / limit},
                       {"limit_pgbench_write_only_transactions_per_second", write_only},
                       {"ratio_sagas_per_write_only_transaction", phases[0].completed_per_second / write_only},
                       {"seconds_per_phase", a.seconds},
                       {"warmup_seconds", a.warmup},
                       {"rss_series", rss_series},
                       {"inflight", a.inflight},
                       {"phases", nlohmann::json::array()},
                       {"processes", nlohmann::json::object()}};
    const auto gc_pauses = a.broker_gc_log.empty() ? std::vector<GcPause>{} : BrokerGcPauses(a.broker_gc_log);
    for (const auto& p : phases) {
        out["phases"].push_back({{"name", p.name},
                                 {"offered_rate", p.offered_rate},
                                 {"started", p.started},
                                 {"completed_per_second", p.completed_per_second},
                                 {"p50_ms", p.p50_ms},
                                 {"p95_ms", p.p95_ms},
                                 {"p99_ms", p.p99_ms},
                                 {"hops", p.hops}});
        if (!a.broker_gc_log.empty()) {
            out["phases"].back()["broker_gc"] = PausesWithin(gc_pauses, p.wall_start, p.wall_end);
        }
    }
    for (const auto& [name, pid] : pids) {
        out["processes"][name] = {
            {"cpu_seconds_per_saga_closed_loop",
             (after_closed[name].cpu_seconds - before[name].cpu_seconds) / std::max(1, closed_completed)},
            {"rss_kb_start", before[name].rss_kb},
            {"rss_kb_end", Measure(pid).rss_kb}};
    }
    // The servers' share and the whole machine's, per saga of the closed loop: what a saga costs
    // beyond sagaflow's own processes (local servers only: 0 for a server on another machine).
    const double per_saga = 1.0 / std::max(1, closed_completed);
    out["servers"] = {
        {"postgres_cpu_seconds_per_saga_closed_loop", (servers_after.postgres - servers_before.postgres) * per_saga},
        {"kafka_broker_cpu_seconds_per_saga_closed_loop", (servers_after.broker - servers_before.broker) * per_saga},
        {"machine_busy_cpu_seconds_per_saga_closed_loop",
         (servers_after.machine.busy - servers_before.machine.busy) * per_saga},
        {"machine_kernel_cpu_seconds_per_saga_closed_loop",
         (servers_after.machine.kernel - servers_before.machine.kernel) * per_saga},
        {"machine_context_switches_per_saga_closed_loop",
         (servers_after.machine.context_switches - servers_before.machine.context_switches) * per_saga},
        {"cores", std::thread::hardware_concurrency()},
        {"postgres_commits_per_saga_closed_loop",
         (pg_after.commits - pg_before.commits - static_cast<double>(harness_closed)) * per_saga},
        {"benchmark_poll_transactions_per_saga_closed_loop", static_cast<double>(harness_closed) * per_saga},
        {"postgres_wal_records_per_saga_closed_loop", (pg_after.wal_records - pg_before.wal_records) * per_saga},
        {"postgres_wal_bytes_per_saga_closed_loop", (pg_after.wal_bytes - pg_before.wal_bytes) * per_saga}};
    const long long checkpoints = Checkpoints(conn) - checkpoints_before;
    {
        pqxx::read_transaction tx{conn};
        out["settings"] = {{"fsync", tx.exec1("SHOW fsync")[0].as<std::string>()},
                           {"synchronous_commit", tx.exec1("SHOW synchronous_commit")[0].as<std::string>()},
                           {"max_wal_size", tx.exec1("SHOW max_wal_size")[0].as<std::string>()},
                           {"shared_buffers", tx.exec1("SHOW shared_buffers")[0].as<std::string>()},
                           {"track_commit_timestamp", tx.exec1("SHOW track_commit_timestamp")[0].as<std::string>()},
                           {"checkpoints_during_phases", checkpoints},
                           {"acks", "all (enforced by the relay)"},
                           {"consumer_properties", a.consumer_properties},
                           {"service_databases", a.service_databases}};
    }
    std::ofstream(a.json) << out.dump(2) << "\n";
    std::cout << out.dump(2) << std::endl;
    starters.join();
    front.Stop();
    order.KillAndWait(SIGTERM);
    payment.KillAndWait(SIGTERM);
    engine_process.KillAndWait(SIGTERM);
    std::filesystem::remove_all(logs);
    return 0;
}

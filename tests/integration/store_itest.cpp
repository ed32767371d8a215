// Storage floor on the real PostgreSQL: migrations, the pool, the inbox under races, the sweeper.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <pqxx/pqxx>
#include <random>
#include <set>
#include <thread>

#include "outbox/uuid.hpp"
#include "store/errors.hpp"
#include "store/inbox.hpp"
#include "store/migrations.hpp"
#include "store/pool.hpp"
#include "store/prepared.hpp"
#include "store/sweeper.hpp"
#include "store/transaction.hpp"
#include "store/url.hpp"
#include "tests/support/services.hpp"

using namespace sagaflow::store;
using sagaflow::testing::Count;
using sagaflow::testing::Execute;
using sagaflow::testing::ScratchDatabase;

namespace {

std::vector<std::string> BuiltinNames() {
    std::vector<std::string> names;
    for (const auto& m : BuiltinMigrations()) names.push_back(m.name);
    return names;
}

// A migration numbered after every built-in one.
Migration Later(const std::string& suffix, const std::string& sql) {
    const int version = BuiltinMigrations().back().version + 1;
    char name[64];
    std::snprintf(name, sizeof name, "%03d_%s.sql", version, suffix.c_str());
    return {version, name, sql};
}

const long long kBuiltin = static_cast<long long>(BuiltinMigrations().size());

}  // namespace

TEST_CASE("migrations apply to an empty database once, and the second run is a no-op") {
    ScratchDatabase db;
    const auto first = MigrateBlocking(db.Url(), BuiltinMigrations());
    CHECK(first.applied == BuiltinNames());
    CHECK(first.already_applied.empty());
    for (const char* table : {"saga_instance", "saga_step", "outbox", "processed_event", "idempotency_record"}) {
        CAPTURE(table);
        CHECK(Count(db.Url(),
                    std::string("SELECT count(*) FROM information_schema.tables WHERE table_name = '") + table + "'") ==
              1);
    }
    const auto second = MigrateBlocking(db.Url(), BuiltinMigrations());
    CHECK(second.applied.empty());
    CHECK(second.already_applied == BuiltinNames());
    CHECK(Count(db.Url(), "SELECT count(*) FROM sagaflow_migration") == kBuiltin);
}

TEST_CASE("the migrations compiled in are the files in sql/") {
    const char* source = std::getenv("SAGAFLOW_SOURCE_DIR");
    REQUIRE(source != nullptr);
    const auto from_dir = MigrationsFromDir(std::string(source) + "/sql");
    REQUIRE(from_dir.size() == BuiltinMigrations().size());
    for (std::size_t i = 0; i < from_dir.size(); ++i) {
        CHECK(from_dir[i].name == BuiltinMigrations()[i].name);
        CHECK(from_dir[i].sql == BuiltinMigrations()[i].sql);
    }
}

TEST_CASE("a migration changed after it was applied is refused, and nothing else is applied") {
    ScratchDatabase db;
    MigrateBlocking(db.Url(), BuiltinMigrations());
    auto tampered = BuiltinMigrations();
    tampered[0].sql += "\n-- an innocent edit\n";
    tampered.push_back(Later("more", "CREATE TABLE must_not_exist (id int);"));
    std::string error;
    try {
        MigrateBlocking(db.Url(), tampered);
    } catch (const MigrationError& e) {
        error = e.what();
    }
    CHECK(error.rfind("migration 001_core.sql was changed after it was applied", 0) == 0);
    CHECK(error.find("Hint: never edit an applied migration") != std::string::npos);
    CHECK(Count(db.Url(), "SELECT count(*) FROM information_schema.tables WHERE table_name = 'must_not_exist'") == 0);

    // A database migrated by a newer sagaflow is refused by an older one.
    auto newer = BuiltinMigrations();
    newer.push_back(Later("newer", "CREATE TABLE newer (id int);"));
    MigrateBlocking(db.Url(), newer);
    CHECK_THROWS_WITH_AS(
        MigrateBlocking(db.Url(), BuiltinMigrations()),
        doctest::Contains(
            ("the database has migration " + newer.back().name + " that this sagaflow does not know").c_str()),
        MigrationError);
}

TEST_CASE("a failing migration is rolled back whole") {
    ScratchDatabase db;
    auto broken = BuiltinMigrations();
    broken.push_back(Later("broken", "CREATE TABLE half (id int); SELECT no_such_function();"));
    CHECK_THROWS_WITH_AS(MigrateBlocking(db.Url(), broken),
                         doctest::Contains(("migration " + broken.back().name + " failed").c_str()),
                         MigrationError);
    CHECK(Count(db.Url(), "SELECT count(*) FROM information_schema.tables WHERE table_name = 'half'") == 0);
    CHECK(Count(db.Url(), "SELECT count(*) FROM sagaflow_migration") == kBuiltin);
}

TEST_CASE("concurrent migrators end with one applied set") {
    ScratchDatabase db;
    constexpr int kMigrators = 6;
    std::vector<MigrateReport> reports(kMigrators);
    std::atomic<int> failures{0};
    std::vector<std::thread> threads;
    for (int i = 0; i < kMigrators; ++i) {
        threads.emplace_back([&, i] {
            try {
                reports[static_cast<std::size_t>(i)] = MigrateBlocking(db.Url(), BuiltinMigrations());
            } catch (const std::exception&) {
                ++failures;
            }
        });
    }
    for (auto& t : threads) t.join();
    CHECK(failures.load() == 0);
    const auto appliers =
        std::count_if(reports.begin(), reports.end(), [](const auto& r) { return !r.applied.empty(); });
    CHECK(appliers == 1);
    CHECK(Count(db.Url(), "SELECT count(*) FROM sagaflow_migration") == kBuiltin);
}

namespace {

// `count` new event ids, each with a row in a new table `effect` that counts its applications.
std::vector<std::string> EffectRows(const std::string& url, int count) {
    std::vector<std::string> ids;
    for (int i = 0; i < count; ++i) ids.push_back(sagaflow::outbox::NewUuidV7());
    pqxx::connection conn{url};
    pqxx::work tx{conn};
    tx.exec("CREATE TABLE effect (event_id uuid PRIMARY KEY, applied int NOT NULL DEFAULT 0)");
    for (const auto& id : ids) tx.exec_params("INSERT INTO effect (event_id) VALUES ($1)", id);
    tx.commit();
    return ids;
}

void ApplyEffect(pqxx::work& tx, const std::string& id) {
    tx.exec_params("UPDATE effect SET applied = applied + 1 WHERE event_id = $1", id);
}

// Runs `threads` deliverers at once, each on a connection of its own with the ids in an order of
// its own, and waits for them.
template <typename Deliver>
void RaceDeliveries(const std::string& url, int threads, const std::vector<std::string>& ids, Deliver deliver) {
    std::vector<std::thread> running;
    for (int t = 0; t < threads; ++t) {
        running.emplace_back([&, t] {
            pqxx::connection conn{url};
            PrepareInbox(conn);
            auto order = ids;
            std::shuffle(order.begin(), order.end(), std::mt19937_64(static_cast<unsigned long>(t)));
            deliver(conn, order);
        });
    }
    for (auto& t : running) t.join();
}

}  // namespace

TEST_CASE("inbox race: 16 threads deliver the same 1,000 ids; every effect happens exactly once") {
    ScratchDatabase db;
    MigrateBlocking(db.Url(), BuiltinMigrations());
    constexpr int kEvents = 1000;
    constexpr int kThreads = 16;
    const std::vector<std::string> ids = EffectRows(db.Url(), kEvents);
    std::atomic<int> first_times{0};
    RaceDeliveries(db.Url(), kThreads, ids, [&](pqxx::connection& conn, const std::vector<std::string>& order) {
        for (const auto& id : order) {
            pqxx::work tx{conn};
            if (InboxFirstTime(tx, "race-consumer", id)) {
                ApplyEffect(tx, id);
                ++first_times;
            }
            tx.commit();
        }
    });
    CHECK(first_times.load() == kEvents);
    CHECK(Count(db.Url(), "SELECT count(*) FROM effect WHERE applied = 1") == kEvents);
    CHECK(Count(db.Url(), "SELECT count(*) FROM effect WHERE applied <> 1") == 0);
    CHECK(Count(db.Url(), "SELECT count(*) FROM processed_event") == kEvents);
}

TEST_CASE("batched inbox returns exactly the fresh ids; consumers are independent") {
    ScratchDatabase db;
    MigrateBlocking(db.Url(), BuiltinMigrations());
    std::vector<std::string> ids;
    for (int i = 0; i < 10; ++i) ids.push_back(sagaflow::outbox::NewUuidV7());
    pqxx::connection conn{db.Url()};
    PrepareInbox(conn);
    {
        pqxx::work tx{conn};
        const auto fresh = InboxFreshIds(tx, "a", {ids[0], ids[1], ids[2], ids[2]});
        CHECK(std::set<std::string>(fresh.begin(), fresh.end()) == std::set<std::string>{ids[0], ids[1], ids[2]});
        CHECK(fresh.size() == 3);
        tx.commit();
    }
    {
        pqxx::work tx{conn};
        const auto fresh = InboxFreshIds(tx, "a", {ids[1], ids[3], ids[4]});
        CHECK(std::set<std::string>(fresh.begin(), fresh.end()) == std::set<std::string>{ids[3], ids[4]});
        CHECK(InboxFirstTime(tx, "b", ids[1]));  // another consumer has not seen it
        CHECK_FALSE(InboxFirstTime(tx, "a", ids[4]));
        tx.abort();  // a rolled-back transaction records nothing
    }
    {
        pqxx::work tx{conn};
        CHECK(InboxFirstTime(tx, "a", ids[3]));
        CHECK_THROWS_AS(InboxFreshIds(tx, "a", {"not-a-uuid'); DROP TABLE outbox; --"}), std::invalid_argument);
    }
}

TEST_CASE("batched inbox under concurrent deliveries: each id recorded and applied once, a lost race is an error") {
    // Consumers that overlap (a rebalance) deliver the same ids at once. InboxFreshIds lets the
    // primary key decide: the loser's statement throws unique_violation and, as the consumer does,
    // retries its batch id by id through InboxFirstTime.
    ScratchDatabase db;
    MigrateBlocking(db.Url(), BuiltinMigrations());
    constexpr int kEvents = 200;
    constexpr int kThreads = 8;
    const std::vector<std::string> ids = EffectRows(db.Url(), kEvents);
    std::atomic<int> lost_races{0};
    RaceDeliveries(db.Url(), kThreads, ids, [&](pqxx::connection& conn, const std::vector<std::string>& order) {
        for (std::size_t at = 0; at < order.size(); at += 10) {
            const std::vector<std::string> batch(order.begin() + static_cast<long>(at),
                                                 order.begin() + static_cast<long>(at + 10));
            try {
                pqxx::work tx{conn};
                for (const auto& id : InboxFreshIds(tx, "race-batch", batch)) ApplyEffect(tx, id);
                tx.commit();
            } catch (const pqxx::unique_violation&) {
                ++lost_races;
                for (const auto& id : batch) {
                    pqxx::work tx{conn};
                    if (InboxFirstTime(tx, "race-batch", id)) ApplyEffect(tx, id);
                    tx.commit();
                }
            }
        }
    });
    CHECK(Count(db.Url(), "SELECT count(*) FROM effect WHERE applied = 1") == kEvents);
    CHECK(Count(db.Url(), "SELECT count(*) FROM effect WHERE applied <> 1") == 0);
    CHECK(Count(db.Url(), "SELECT count(*) FROM processed_event WHERE consumer_name = 'race-batch'") == kEvents);
    MESSAGE("batches that lost a race and went id by id: " << lost_races.load());
}

TEST_CASE("array parameters arrive as the values sent, whatever their characters") {
    ScratchDatabase db;
    pqxx::connection conn{db.Url()};
    pqxx::work tx{conn};
    // Texts that break a naive array literal: quotes, backslashes, braces, commas, spaces, the
    // word NULL, an empty text, JSON with escapes, non-ASCII; and a real NULL.
    const std::vector<std::optional<std::string>> texts{"plain",
                                                        "with \"quotes\"",
                                                        "back\\slash\\",
                                                        "{braces},commas",
                                                        "  spaced  ",
                                                        "NULL",
                                                        "",
                                                        R"({"k": "v \"q\" \\ \u00e9", "n": [1, 2]})",
                                                        "\xc3\xa9t\xc3\xa9 \xe2\x82\xac",
                                                        std::nullopt};
    const auto rows = tx.exec_params(
        "SELECT t, t IS NULL FROM unnest($1::text[]) WITH ORDINALITY AS a(t, n) ORDER BY n", TextArray(texts));
    REQUIRE(rows.size() == texts.size());
    for (std::size_t i = 0; i < texts.size(); ++i) {
        if (texts[i]) {
            CHECK(rows[i][0].as<std::string>() == *texts[i]);
        } else {
            CHECK(rows[i][1].as<bool>());
        }
    }
    CHECK(tx.exec_params("SELECT cardinality($1::text[])", TextArray({}))[0][0].as<int>() == 0);
    CHECK(tx.exec_params("SELECT ($1::text[])[8]::jsonb ->> 'k'", TextArray(texts))[0][0].as<std::string>() ==
          "v \"q\" \\ \u00e9");
    const std::vector<long long> numbers{1, -2, 9007199254740993LL};
    CHECK(tx.exec_params("SELECT array_to_string($1::bigint[], ' ')", BigintArray(numbers))[0][0].as<std::string>() ==
          "1 -2 9007199254740993");
    const std::string id = sagaflow::outbox::NewUuidV7();
    CHECK(tx.exec_params("SELECT ($1::uuid[])[1]::text", UuidArray({id}))[0][0].as<std::string>() == id);
}

TEST_CASE("a Transaction's BEGIN rides with its first statement, its last write with the COMMIT; never reconnects") {
    ScratchDatabase db;
    pqxx::connection conn{db.Url()};
    pqxx::nontransaction{conn}.exec("CREATE TABLE t (k text PRIMARY KEY, n int)");
    const Statement insert{"INSERT INTO t (k, n) VALUES ($1, $2::int) RETURNING n, txid_current()::text",
                           {"it's", "1"}};
    // One simple query: BEGIN, then the statement prepared by name, its parameters as literals.
    CHECK(BeginWith(conn, insert) == "BEGIN; EXECUTE " + PreparedName(conn, insert.sql) + "('it''s', '1')");
    {
        Transaction tx{conn, insert};
        CHECK(tx.First()[0][0].as<int>() == 1);
        // The first statement ran in the block the later ones run in.
        CHECK(tx.Work().exec1("SELECT txid_current()::text")[0].as<std::string>() ==
              tx.First()[0][1].as<std::string>());
    }  // not committed
    CHECK(Count(db.Url(), "SELECT count(*) FROM t") == 0);
    {
        Transaction tx{conn, insert};
        tx.Work().exec("INSERT INTO t VALUES ('second', 2)");
        tx.Commit();
    }
    CHECK(Count(db.Url(), "SELECT count(*) FROM t WHERE (k, n) IN (('it''s', 1), ('second', 2))") == 2);

    // The first statement fails: the error pqxx::work would give, and no block is left open (the
    // next transaction's statements would fail as "current transaction is aborted").
    CHECK_THROWS_AS(Transaction(conn, insert), pqxx::unique_violation);
    {
        pqxx::work tx{conn};
        CHECK(tx.exec1("SELECT count(*) FROM t")[0].as<int>() == 2);
        tx.commit();
    }
    {
        Transaction tx{conn, std::nullopt};  // a bare BEGIN
        CHECK(tx.First().empty());
        tx.Work().exec("INSERT INTO t VALUES ('bare', 3)");
    }
    CHECK(Count(db.Url(), "SELECT count(*) FROM t") == 2);

    // The last write rides with the COMMIT: both or neither.
    {
        Transaction tx{conn, std::nullopt};
        tx.Work().exec("INSERT INTO t VALUES ('before-last', 5)");
        CHECK(ExecuteQuery(conn, insert).rfind("EXECUTE " + PreparedName(conn, insert.sql) + "(", 0) == 0);
        tx.Commit(Statement{insert.sql, {"last", "6"}});
    }
    CHECK(Count(db.Url(), "SELECT count(*) FROM t WHERE k IN ('before-last', 'last')") == 2);
    {
        Transaction tx{conn, std::nullopt};
        tx.Work().exec("INSERT INTO t VALUES ('lost-with-last', 7)");
        CHECK_THROWS_AS(tx.Commit(insert), pqxx::unique_violation);  // 'it''s' is there
    }
    CHECK(Count(db.Url(), "SELECT count(*) FROM t WHERE k = 'lost-with-last'") == 0);
    {
        pqxx::work tx{conn};  // no block was left open
        CHECK(tx.exec1("SELECT count(*) FROM t")[0].as<int>() == 4);
        tx.commit();
    }

    // The session is lost in the block: later statements fail rather than run on a new session,
    // outside any transaction, and the commit's outcome is reported unknown.
    {
        Transaction tx{conn, Statement{"SELECT pg_backend_pid()", {}}};
        const auto pid = tx.First()[0][0].as<std::string>();
        Execute(db.Url(), "SELECT pg_terminate_backend(" + pid + ")");
        while (Count(db.Url(), "SELECT count(*) FROM pg_stat_activity WHERE pid = " + pid) != 0) {
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        CHECK_THROWS_AS(tx.Work().exec("INSERT INTO t VALUES ('after-loss', 4)"), pqxx::broken_connection);
        CHECK_THROWS_AS(tx.Work().exec("INSERT INTO t VALUES ('after-loss', 4)"), pqxx::broken_connection);
        CHECK_THROWS_AS(tx.Commit(), pqxx::in_doubt_error);
    }
    CHECK(Count(db.Url(), "SELECT count(*) FROM t WHERE k = 'after-loss'") == 0);
}

TEST_CASE("a COMMIT that fails itself is reported, and the rollback sent after it warns of nothing") {
    ScratchDatabase db;
    pqxx::connection conn{db.Url()};
    pqxx::nontransaction{conn}.exec("CREATE TABLE d (k int, CONSTRAINT d_k UNIQUE (k) DEFERRABLE INITIALLY DEFERRED)");
    // What PostgreSQL tells the connection besides results (libpqxx prints it to stderr otherwise).
    struct Notices final : pqxx::errorhandler {
        using pqxx::errorhandler::errorhandler;
        std::vector<std::string> seen;
        bool operator()(const char message[]) noexcept override {
            seen.emplace_back(message);
            return false;
        }
    } notices{conn};
    {
        Transaction tx{conn, std::nullopt};
        tx.Work().exec("INSERT INTO d VALUES (1)");
        // The duplicate is found at COMMIT (the constraint is deferred): the COMMIT itself fails.
        CHECK_THROWS_AS(tx.Commit(Statement{"INSERT INTO d VALUES ($1::int)", {"1"}}), pqxx::unique_violation);
    }
    CHECK_MESSAGE(notices.seen.empty(), (notices.seen.empty() ? std::string() : notices.seen.front()));
    pqxx::work after{conn};  // no block was left open
    CHECK(after.exec1("SELECT count(*) FROM d")[0].as<int>() == 0);
    // A notice of another kind still reaches the connection's handlers.
    after.exec("DO $$ BEGIN RAISE WARNING 'still heard'; END $$");
    CHECK(notices.seen.size() == 1);
}

TEST_CASE("a session of sagaflow's own statements plans an array statement once, on an index") {
    ScratchDatabase db;
    MigrateBlocking(db.Url(), BuiltinMigrations());
    {
        pqxx::connection conn{db.Url()};
        pqxx::nontransaction{conn}.exec(
            "CREATE TABLE plan_probe AS SELECT g AS id FROM generate_series(1, 10000) g; "
            "ALTER TABLE plan_probe ADD PRIMARY KEY (id); ANALYZE plan_probe; "
            "CREATE TABLE plan_small AS SELECT g AS id FROM generate_series(1, 20) g; "
            "ALTER TABLE plan_small ADD PRIMARY KEY (id); ANALYZE plan_small");
    }
    // A batch lookup as the relay's mark and the engine's reads do it, two ids at a time.
    const std::string lookup = "SELECT id FROM plan_probe WHERE id = ANY($1::bigint[])";
    // On a table analysed while it was small (a new deployment): the plan made then must still use
    // the index, which it needs once the table has grown.
    const std::string fresh = "SELECT id FROM plan_small WHERE id = ANY($1::bigint[])";
    for (const bool own : {false, true}) {
        CAPTURE(own);
        pqxx::connection conn{db.Url()};
        if (own) UseOwnStatementPlans(conn);
        pqxx::work tx{conn};
        for (long long i = 0; i < 10; ++i) CHECK(Exec(tx, lookup, BigintArray({2 * i + 1, 2 * i + 2})).size() == 2);
        const auto plans =
            tx.exec_params1("SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE name = $1",
                            PreparedName(conn, lookup));
        if (own) {
            CHECK(plans[0].as<int>() == 10);  // planned once, reused nine times
            CHECK(plans[1].as<int>() == 0);
            CHECK(Exec(tx, fresh, BigintArray({1})).size() == 1);
            std::string plan;
            for (const auto& row : tx.exec("EXPLAIN EXECUTE " + PreparedName(conn, fresh) + "('{}')")) {
                plan += row[0].as<std::string>() + "\n";
            }
            CAPTURE(plan);
            CHECK(plan.find("Index") != std::string::npos);
            CHECK(plan.find("Seq Scan") == std::string::npos);
            // A participant's handler gets the server's settings back for its transaction (kept
            // through a rollback to a savepoint taken after them); the session keeps sagaflow's.
            const auto settings = [](pqxx::transaction_base& t) {
                return t
                    .exec1("SELECT current_setting('plan_cache_mode') || ' ' || current_setting('enable_seqscan')")[0]
                    .as<std::string>();
            };
            CHECK(settings(tx) == "force_generic_plan off");
            tx.exec(std::string(kUserStatementPlans) + "SAVEPOINT handler");
            tx.exec("ROLLBACK TO SAVEPOINT handler");
            CHECK(settings(tx) == "auto on");
            tx.commit();
            pqxx::work next{conn};
            CHECK(settings(next) == "force_generic_plan off");
        } else {
            // PostgreSQL's default, for contrast: a new plan on every call (why the setting exists).
            CHECK(plans[1].as<int>() == 10);
        }
    }
}

TEST_CASE("sagaflow_lock_and_read_sagas reads after its locks: it sees the last holder's commit") {
    ScratchDatabase db;
    MigrateBlocking(db.Url(), BuiltinMigrations());
    const std::string saga = sagaflow::outbox::NewUuidV7();
    const std::string key = "('x' || right(replace('" + saga + "', '-', ''), 16))::bit(64)::bigint";
    Execute(db.Url(),
            "INSERT INTO saga_instance (saga_id, saga_type, definition_version, definition_hash, status, input, "
            "data) VALUES ('" +
                saga + "', 't', 1, 'h', 'running', '{}', '{\"v\": 0}')");
    // The holder: takes the saga's lock, changes the saga, and commits while two others wait.
    pqxx::connection holder_conn{db.Url()};
    pqxx::work holder{holder_conn};
    holder.exec("SELECT pg_advisory_xact_lock(" + key + ")");
    holder.exec("UPDATE saga_instance SET data = '{\"v\": 1}' WHERE saga_id = '" + saga + "'");
    std::string by_function, by_one_statement;
    std::thread function_reader([&] {
        pqxx::connection conn{db.Url()};
        pqxx::work tx{conn};
        by_function = tx.exec1("SELECT data FROM sagaflow_lock_and_read_sagas(ARRAY[" + key + "], ARRAY['" + saga +
                               "']::uuid[])")[0]
                          .as<std::string>();
        tx.commit();
    });
    // For contrast, why it is a function: one statement that waits for the lock and then reads
    // reads in the snapshot it took before it waited.
    std::thread statement_reader([&] {
        pqxx::connection conn{db.Url()};
        pqxx::work tx{conn};
        by_one_statement = tx.exec1("SELECT i.data::text FROM (SELECT pg_advisory_xact_lock(" + key +
                                    ") OFFSET 0) l, saga_instance i WHERE i.saga_id = '" + saga + "'")[0]
                               .as<std::string>();
        tx.commit();
    });
    const auto waiting = [&] {
        return Count(db.Url(), "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted");
    };
    for (int i = 0; i < 500 && waiting() < 2; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    CHECK(waiting() == 2);
    holder.commit();
    function_reader.join();
    statement_reader.join();
    CHECK(by_function == "{\"v\": 1}");
    CHECK(by_one_statement == "{\"v\": 0}");
}

TEST_CASE("the pool runs jobs, passes errors on, and survives a killed connection") {
    ScratchDatabase db;
    MigrateBlocking(db.Url(), BuiltinMigrations());
    std::atomic<int> after_jobs{0};
    ConnectionPool pool{{.url = db.Url(),
                         .size = 2,
                         .on_connect = [](pqxx::connection& c) { PrepareInbox(c); },
                         .on_disconnect = {},
                         .after_job = [&] { ++after_jobs; }}};
    CHECK(pool.RunBlocking([](pqxx::connection& c) {
        pqxx::work tx{c};
        return tx.exec1("SELECT 40 + 2")[0].as<int>();
    }) == 42);
    CHECK(after_jobs == 1);  // before the caller has the result (the relay's wake after a commit)
    CHECK_THROWS_AS(pool.RunBlocking([](pqxx::connection& c) {
        pqxx::work tx{c};
        tx.exec("SELECT * FROM no_such_table");
    }),
                    pqxx::undefined_table);
    CHECK(after_jobs == 2);

    // Kill every backend of the pool from outside; the next jobs reconnect transparently.
    {
        pqxx::connection admin{db.Url()};
        pqxx::nontransaction tx{admin};
        tx.exec(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND pid <> "
            "pg_backend_pid()");
    }
    std::vector<std::future<int>> results;
    for (int i = 0; i < 8; ++i) {
        results.push_back(pool.Submit([](pqxx::connection& c) {
            pqxx::work tx{c};
            return tx.exec1("SELECT 1")[0].as<int>();
        }));
    }
    int sum = 0;
    for (auto& r : results) sum += r.get();
    CHECK(sum == 8);
    pool.Stop();
    CHECK_THROWS_AS(pool.RunBlocking([](pqxx::connection&) { return 0; }), PoolStopped);
}

TEST_CASE("an OwnConnection runs jobs on the caller's thread, like the pool's, and survives a killed connection") {
    ScratchDatabase db;
    std::atomic<int> connects{0}, disconnects{0}, after_jobs{0};
    ConnectionPool pool{{.url = db.Url(),
                         .size = 1,
                         .on_connect = [&](pqxx::connection&) { ++connects; },
                         .on_disconnect = [&](pqxx::connection&) { ++disconnects; },
                         .after_job = [&] { ++after_jobs; }}};
    const auto backend = [](pqxx::connection& c) {
        pqxx::work tx{c};
        return std::pair{tx.exec1("SELECT pg_backend_pid()")[0].as<int>(), std::this_thread::get_id()};
    };
    const int pool_backend = pool.RunBlocking(backend).first;
    CHECK(connects == 1);
    {
        OwnConnection own{pool, "test connection"};
        const auto [first, thread] = own.Run(backend);
        CHECK(thread == std::this_thread::get_id());
        CHECK(first != pool_backend);  // a connection on top of the pool's
        CHECK(connects == 2);
        CHECK(after_jobs == 2);  // as for a pool job: before the caller has the result
        CHECK_THROWS_AS(own.Run([](pqxx::connection& c) {
            pqxx::work tx{c};
            tx.exec("SELECT * FROM no_such_table");
        }),
                        pqxx::undefined_table);
        CHECK(after_jobs == 3);
        CHECK(own.Run(backend).first == first);  // kept between jobs

        pool.RunBlocking([&](pqxx::connection& c) {
            pqxx::nontransaction{c}.exec("SELECT pg_terminate_backend(" + std::to_string(first) + ")");
        });
        const auto [second, again] = own.Run(backend);  // reconnects and runs the job
        CHECK(second != first);
        CHECK(again == std::this_thread::get_id());
        CHECK(connects == 3);
        CHECK(disconnects == 1);

        pool.BeginStop();  // a live connection still runs jobs; a lost one is not replaced
        CHECK(own.Run(backend).first == second);
        pool.RunBlocking([&](pqxx::connection& c) {
            pqxx::nontransaction{c}.exec("SELECT pg_terminate_backend(" + std::to_string(second) + ")");
        });
        CHECK_THROWS_AS(own.Run(backend), PoolStopped);
    }
    CHECK(disconnects == 2);
    CHECK(connects == 3);
}

TEST_CASE("a pool's job is not left queued while an OwnConnection waits between connection attempts") {
    ScratchDatabase db;
    std::atomic<int> connects{0};
    // The pool's worker connects; every later connection (the OwnConnection's) fails in on_connect,
    // so the OwnConnection waits in backoff while jobs are queued for the worker.
    ConnectionPool pool{{.url = db.Url(),
                         .size = 1,
                         .initial_backoff = std::chrono::milliseconds(30'000),
                         .max_backoff = std::chrono::milliseconds(30'000),
                         .on_connect =
                             [&](pqxx::connection&) {
                                 if (++connects > 1) throw std::runtime_error("refused by the test");
                             },
                         .on_disconnect = {},
                         .after_job = {}}};
    REQUIRE(pool.RunBlocking([](pqxx::connection&) { return 1; }) == 1);
    std::thread waiting([&] {
        OwnConnection own{pool, "test connection"};
        CHECK_THROWS_AS(own.Run([](pqxx::connection&) { return 0; }), PoolStopped);
    });
    while (connects < 2) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // in its backoff wait now
    int answered = 0;
    for (int i = 0; i < 20; ++i) {
        auto result = pool.Submit([](pqxx::connection&) { return 1; });
        if (result.wait_for(std::chrono::seconds(5)) != std::future_status::ready) break;
        answered += result.get();
    }
    CHECK(answered == 20);
    pool.BeginStop();  // ends the backoff wait
    waiting.join();
    pool.Stop();
}

TEST_CASE("a password never appears in errors or redacted URLs") {
    CHECK(RedactUrl("postgresql://app:hunter2@db.example:5432/orders") ==
          "postgresql://app:***@db.example:5432/orders");
    CHECK(RedactUrl("host=db user=app password=hunter2 dbname=x") == "host=db user=app password=*** dbname=x");
    CHECK(RedactUrl("postgresql://app@db/x?password=hunter2&sslmode=require") ==
          "postgresql://app@db/x?password=***&sslmode=require");
    CHECK(RedactUrl("host=db password = 'sec ret' user=x") == "host=db password = '***' user=x");
    CHECK(RedactUrl("host=db mypassword=x") == "host=db mypassword=x");  // another key
    // A megabyte of URL (std::regex, which this replaced, overflowed its stack on it).
    CHECK(RedactUrl("postgresql://app:" + std::string(1'000'000, 'p') + "@db/x") == "postgresql://app:***@db/x");
    std::string error;
    try {
        ConnectOnce("postgresql://app:hunter2@127.0.0.1:1/x?connect_timeout=2");
    } catch (const pqxx::broken_connection& e) {
        error = e.what();
    }
    CHECK(error.find("cannot connect to PostgreSQL at postgresql://app:***@127.0.0.1:1/") == 0);
    CHECK(error.find("hunter2") == std::string::npos);
    CHECK(error.find("Hint:") != std::string::npos);
}

TEST_CASE("the TTL must lie in 24-72 hours") {
    using std::chrono::hours;
    CHECK_THROWS_WITH_AS(
        ValidateTtl(hours(23)), doctest::Contains("must lie in 24-72 h (rule R-DIST-IDEM-5)"), std::invalid_argument);
    CHECK_THROWS_AS(ValidateTtl(hours(73)), std::invalid_argument);
    CHECK(ValidateTtl(hours(24)) == hours(24));
    CHECK(ValidateTtl(hours(72)) == hours(72));
}

TEST_CASE("the sweeper deletes only rows past their TTL, in batches, and keeps the outbox rows resends need") {
    ScratchDatabase db;
    MigrateBlocking(db.Url(), BuiltinMigrations());
    {
        pqxx::connection conn{db.Url()};
        pqxx::work tx{conn};
        tx.exec(
            "INSERT INTO processed_event (consumer_name, event_id, processed_at) "
            "SELECT 'c', gen_random_uuid(), now() - interval '49 hours' FROM generate_series(1, 25)");
        tx.exec(
            "INSERT INTO processed_event (consumer_name, event_id, processed_at) "
            "SELECT 'c', gen_random_uuid(), now() - interval '47 hours' FROM generate_series(1, 5)");
        tx.exec(
            "INSERT INTO idempotency_record (scope, idempotency_key, command_hash, state, expires_at) "
            "SELECT 't', 'k' || g, 'h', 'completed', now() - interval '1 minute' FROM generate_series(1, 9) g");
        tx.exec(
            "INSERT INTO idempotency_record (scope, idempotency_key, command_hash, state, expires_at) "
            "VALUES ('t', 'live', 'h', 'completed', now() + interval '1 hour')");
        // Outbox rows: 'gone-*' must go, the others stay.
        const std::string kSaga = "00000000-0000-7000-8000-000000000001";
        tx.exec(
            "INSERT INTO saga_definition (saga_type, version, hash, canonical) VALUES ('t', 1, 'h', '{}'); "
            "INSERT INTO saga_instance (saga_id, saga_type, definition_version, definition_hash, status, input) "
            "VALUES ('00000000-0000-7000-8000-000000000001', 't', 1, 'h', 'running', '{}')");
        const auto row = [&](const std::string& key,
                             const std::string& published,
                             const std::string& created,
                             const std::string& payload = "{}") {
            tx.exec_params(
                "INSERT INTO outbox (event_id, topic, message_key, payload, created_at, published_at) VALUES "
                "(gen_random_uuid(), 't', $1, $4::jsonb, now() - $3::interval, now() - $2::interval)",
                key,
                published,
                created,
                payload);
        };
        for (int i = 0; i < 12; ++i) row("gone-published-49h", "49 hours", "49 hours");
        row("kept-published-47h", "47 hours", "47 hours");
        tx.exec(
            "INSERT INTO outbox (event_id, topic, message_key, payload, created_at) VALUES (gen_random_uuid(), 't', "
            "'kept-unpublished-49h', '{}', now() - interval '49 hours')");
        // Commands of steps: one ended 49 h ago (its row goes), one ended 1 h ago and one still open
        // (resends re-arm their rows: kept).
        for (const auto& [name, completed] :
             std::vector<std::pair<std::string, std::string>>{{"gone-step-ended-49h", "now() - interval '49 hours'"},
                                                              {"kept-step-ended-1h", "now() - interval '1 hour'"},
                                                              {"kept-step-open", "NULL"}}) {
            // A command as the engine writes it: keyed by its saga, naming its step phase.
            row(kSaga, "50 hours", "50 hours", R"({"stepname": ")" + name + R"(", "phase": "action"})");
            tx.exec_params(
                "INSERT INTO saga_step (saga_id, step_name, phase, status, command_event_id, completed_at) SELECT "
                "'00000000-0000-7000-8000-000000000001', $1, 'action', CASE WHEN " +
                    completed + " IS NULL THEN 'dispatched' ELSE 'succeeded' END, event_id, " + completed +
                    " FROM outbox WHERE payload->>'stepname' = $1",
                name);
        }
        tx.commit();
    }
    pqxx::connection conn{db.Url()};
    const auto report = SweepOnce(conn, std::chrono::hours(48), 7);
    CHECK(report.processed_events == 25);
    CHECK(report.idempotency_records == 9);
    CHECK(report.outbox_rows == 13);
    CHECK(Count(db.Url(), "SELECT count(*) FROM processed_event") == 5);
    CHECK(Count(db.Url(), "SELECT count(*) FROM idempotency_record") == 1);
    const std::string name = "coalesce(payload->>'stepname', message_key)";
    CHECK(Count(db.Url(), "SELECT count(*) FROM outbox WHERE " + name + " LIKE 'gone-%'") == 0);
    CHECK(Count(db.Url(), "SELECT count(*) FROM outbox WHERE " + name + " LIKE 'kept-%'") == 4);
    const auto again = SweepOnce(conn, std::chrono::hours(48));
    CHECK(again.processed_events == 0);
    CHECK(again.outbox_rows == 0);
}

TEST_CASE("database errors are told apart: the environment's wait and retry, the work's do not") {
    ScratchDatabase db;
    pqxx::connection conn{db.Url()};
    // Runs `sql` and returns what it threw.
    const auto thrown = [&](const std::string& sql, bool read_only = false) -> std::exception_ptr {
        try {
            pqxx::work tx{conn};
            if (read_only) tx.exec("SET TRANSACTION READ ONLY");
            tx.exec(sql);
            tx.commit();
        } catch (...) {
            return std::current_exception();
        }
        FAIL("no error from: " << sql);
        return nullptr;
    };
    const auto check = [](const std::exception_ptr& error, bool transient, const std::string& explained) {
        try {
            std::rethrow_exception(error);
        } catch (const std::exception& e) {
            INFO(std::string(e.what()));
            CHECK(IsTransientDatabaseError(e) == transient);
            CHECK(ExplainDatabaseError(e).find(explained) != std::string::npos);
        }
    };
    Execute(db.Url(), "CREATE TABLE t (id int PRIMARY KEY)");
    // The server's own errors, raised as PostgreSQL raises them (SQLSTATE and text).
    check(thrown("DO $$ BEGIN RAISE EXCEPTION 'could not extend file \"base/1/2\": No space left on device' "
                 "USING ERRCODE = 'disk_full'; END $$"),
          true,
          "the database is out of disk space (SQLSTATE 53100: could not extend file \"base/1/2\": No space left on "
          "device): free space on PostgreSQL's volume");
    check(thrown("INSERT INTO t VALUES (1)", true),
          true,
          "the database is read-only (a standby, or after a failover) (SQLSTATE 25006: cannot execute INSERT in a "
          "read-only transaction): point db.url at the primary");
    check(thrown("DO $$ BEGIN RAISE EXCEPTION 'deadlock detected' USING ERRCODE = 'deadlock_detected'; END $$"),
          true,
          "a transaction lost a serialization or deadlock race");
    // The work's own errors: not transient, explained by their own text.
    Execute(db.Url(), "INSERT INTO t VALUES (1)");
    check(thrown("INSERT INTO t VALUES (1)"), false, "duplicate key value violates unique constraint");
    check(thrown("SELECT 1 / 0"), false, "division by zero");
    check(thrown("SELECT * FROM no_such_table"), false, "does not exist");
    // A connection that breaks under the work.
    pqxx::connection victim{db.Url()};
    const int pid = victim.backendpid();
    Execute(db.Url(), "SELECT pg_terminate_backend(" + std::to_string(pid) + ")");
    try {
        pqxx::work tx{victim};
        tx.exec("SELECT 1");
        FAIL("the terminated connection still answered");
    } catch (const std::exception& e) {
        CHECK(IsTransientDatabaseError(e));
        CHECK(ExplainDatabaseError(e).find("the connection to the database broke") == 0);
    }
    CHECK(ServerMessage("ERROR:  relation \"x\" does not exist\nLINE 1: SELECT * FROM x\n") ==
          "relation \"x\" does not exist");
}

TEST_CASE("foreign statements: prepared up to the bound, and prepared afresh after their table changed") {
    ScratchDatabase db;
    Execute(db.Url(), "CREATE TABLE f (a int); INSERT INTO f VALUES (1)");
    pqxx::connection conn{db.Url()};
    const auto run = [&](const std::string& sql, std::size_t limit = kMaxForeignStatements) {
        pqxx::work tx{conn};
        const std::string one = "1";
        auto result = ExecForeign(tx, sql, {one.c_str()}, limit);
        tx.commit();
        return result;
    };
    const auto prepared = [&] {
        pqxx::work tx{conn};
        return tx.exec1("SELECT count(*) FROM pg_prepared_statements WHERE name LIKE 'sfu\\_%'")[0].as<int>();
    };
    // Two texts prepared, the third run unprepared: the bound holds, the answers are right.
    CHECK(run("SELECT a FROM f WHERE a = $1::int", 2).size() == 1);
    CHECK(run("SELECT a + 1 FROM f WHERE a = $1::int", 2)[0][0].as<int>() == 2);
    CHECK(run("SELECT a + 2 FROM f WHERE a = $1::int", 2)[0][0].as<int>() == 3);
    CHECK(prepared() == 2);
    CHECK(run("SELECT a FROM f WHERE a = $1::int", 2).size() == 1);  // reused
    CHECK(prepared() == 2);

    // A column added under a prepared SELECT *: PostgreSQL refuses the old statement once; the
    // next transaction prepares it afresh and sees the new column.
    CHECK(run("SELECT * FROM f WHERE a = $1::int")[0].size() == 1);
    Execute(db.Url(), "ALTER TABLE f ADD COLUMN b int DEFAULT 7");
    CHECK_THROWS_AS(run("SELECT * FROM f WHERE a = $1::int"), pqxx::feature_not_supported);
    const auto afresh = run("SELECT * FROM f WHERE a = $1::int");
    REQUIRE(afresh[0].size() == 2);
    CHECK(afresh[0][1].as<int>() == 7);
}

TEST_CASE("a foreign statement after statements of sagaflow's: values, NULLs and errors as when run alone") {
    ScratchDatabase db;
    Execute(db.Url(), "CREATE TABLE h (a int, b text)");
    pqxx::connection conn{db.Url()};
    const std::string quoted = R"(O'Brien \ "x")";
    // Prepared (as EXECUTE after the savepoint, one simple query) and unprepared (limit 0: a round
    // trip each) alike.
    for (const std::size_t limit : {kMaxForeignStatements, std::size_t{0}}) {
        CAPTURE(limit);
        pqxx::work tx{conn};
        const std::string seven = "7";
        const auto inserted = ExecForeign(tx,
                                          "INSERT INTO h VALUES ($1, $2), ($1, $3) RETURNING a, b",
                                          {seven.c_str(), quoted.c_str(), nullptr},
                                          limit,
                                          "SAVEPOINT s; ");
        REQUIRE(inserted.size() == 2);
        CHECK(inserted.affected_rows() == 2);
        CHECK(inserted[0][0].as<int>() == 7);
        CHECK(inserted[0][1].as<std::string>() == quoted);
        CHECK(inserted[1][1].is_null());
        tx.exec0("ROLLBACK TO SAVEPOINT s");  // the savepoint ran first: the rows are gone with it
        CHECK(tx.exec1("SELECT count(*) FROM h")[0].as<int>() == 0);
        tx.commit();
    }
    // An error in the statement reaches the caller as one would alone.
    pqxx::work tx{conn};
    const std::string text = "not a number";
    CHECK_THROWS_AS(ExecForeign(tx, "SELECT $1::int", {text.c_str()}, kMaxForeignStatements, "SAVEPOINT s; "),
                    pqxx::data_exception);
}

TEST_CASE("foreign statements are forgotten with their connections: the map does not grow as connections come and go") {
    ScratchDatabase db;
    Execute(db.Url(), "CREATE TABLE g (a int); INSERT INTO g VALUES (1)");
    const std::size_t before = ForeignStatementConnections();
    for (int round = 0; round < 5; ++round) {
        PoolOptions options;
        options.url = db.Url();
        options.size = 3;
        options.on_connect = [](pqxx::connection& conn) { ForgetForeignStatements(conn); };
        options.on_disconnect = [](pqxx::connection& conn) { ForgetForeignStatements(conn); };
        ConnectionPool pool{options};
        for (int i = 0; i < 6; ++i) {
            pool.RunBlocking([](pqxx::connection& conn) {
                pqxx::work tx{conn};
                const std::string one = "1";
                CHECK(ExecForeign(tx, "SELECT a FROM g WHERE a = $1", {one.c_str()}).size() == 1);
                tx.commit();
            });
        }
        CHECK(ForeignStatementConnections() > before);
        pool.Stop();
        CHECK(ForeignStatementConnections() == before);
    }
}

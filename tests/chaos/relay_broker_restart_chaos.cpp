// The broker goes away for 10 seconds in the middle of a stream: the relay waits, resumes by
// itself when the broker is back, and nothing is lost or reordered per key. PostgreSQL crashes
// under the relay: nothing is lost either.
#include <doctest/doctest.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <pqxx/pqxx>
#include <set>
#include <thread>

#include "outbox/relay.hpp"
#include "outbox/writer.hpp"
#include "store/migrations.hpp"
#include "tests/support/kafka_read.hpp"
#include "tests/support/own_services.hpp"
#include "tests/support/services.hpp"

using namespace sagaflow;

namespace {

long long Unpublished(pqxx::connection& conn) {
    pqxx::read_transaction tx{conn};
    return tx.exec1("SELECT count(*) FROM outbox WHERE published_at IS NULL")[0].as<long long>();
}

// A relay of `url`'s outbox to `brokers`, logging warnings and errors only.
outbox::RelayOptions RelayTo(const std::string& url, const std::string& brokers) {
    outbox::RelayOptions options;
    options.db_url = url;
    options.brokers = brokers;
    options.properties = {{"log_level", "2"}};
    return options;
}

// An event carrying its key's sequence number (testing::AuditEventStream checks per-key order).
outbox::CloudEvent SeqEvent(int seq) {
    outbox::CloudEvent event;
    event.type = "Test.v1";
    event.source = "sagaflow/chaos";
    event.data = {{"seq", seq}};
    return event;
}

}  // namespace

TEST_CASE("the broker stopped for 10 s mid-stream: the relay resumes by itself and loses nothing") {
    testing::OwnBroker broker;
    testing::ScratchDatabase db;
    store::MigrateBlocking(db.Url(), store::BuiltinMigrations());
    const std::string topic = "restart-stream";
    testing::CreateTopic(broker.Brokers(), topic, 4);

    outbox::Relay relay{RelayTo(db.Url(), broker.Brokers())};
    relay.Start();

    constexpr int kKeys = 16;
    std::atomic<bool> writing{true};
    std::atomic<int> written{0};
    std::thread writer([&] {
        pqxx::connection conn{db.Url()};
        std::map<int, int> seq;
        const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(22);
        while (std::chrono::steady_clock::now() < end) {
            pqxx::work tx{conn};
            for (int j = 0; j < 32; ++j) {
                outbox::Enqueue(tx, topic, "k" + std::to_string(j % kKeys), SeqEvent(seq[j % kKeys]++));
            }
            tx.commit();
            written += 32;
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
        writing = false;
    });
    std::this_thread::sleep_for(std::chrono::seconds(4));
    REQUIRE(broker.Run("halt " + broker.State()) == 0);
    std::this_thread::sleep_for(std::chrono::seconds(10));
    pqxx::connection check{db.Url()};
    const long long backlog_during_outage = Unpublished(check);
    // Nothing waits on the broker inside a transaction: the relay keeps none open while its
    // deliveries are outstanding, so an outage does not hold back vacuum (the writer's
    // transactions last milliseconds).
    const long long open_transactions = testing::Count(
        db.Url(),
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() "
        "AND xact_start < now() - interval '2 seconds'");
    REQUIRE(broker.Run("resume " + broker.State()) == 0);
    writer.join();

    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (Unpublished(check) > 0 && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    relay.Stop();
    MESSAGE("rows written: " << written.load() << ", unpublished while the broker was down: " << backlog_during_outage);
    CHECK(backlog_during_outage > 0);  // the outage really held publishing back
    CHECK(open_transactions == 0);
    CHECK(Unpublished(check) == 0);

    const auto records = testing::ReadTopic(broker.Brokers(), topic, 0, std::chrono::seconds(120));
    const auto stream = testing::AuditEventStream(records);
    CHECK(stream.changed_duplicates == 0);
    CHECK(stream.value_of.size() == static_cast<std::size_t>(written.load()));
    CHECK(stream.out_of_order == 0);
}

// The relay commits its marks without waiting for the WAL flush (outbox/README.md): a crash of
// PostgreSQL may lose the last marks, never a row. Rows whose marks were lost go out again under
// the same ids, and per-key order holds.
TEST_CASE("PostgreSQL crashes (immediate restart) under the relay: every row goes out, lost marks only resend") {
    testing::OwnBroker broker;
    testing::OwnPostgres pg;
    store::MigrateBlocking(pg.Url(), store::BuiltinMigrations());
    const std::string topic = "crash-stream";
    testing::CreateTopic(broker.Brokers(), topic, 4);

    outbox::Relay relay{RelayTo(pg.Url(), broker.Brokers())};
    relay.Start();

    constexpr int kKeys = 16;
    std::atomic<int> failed_transactions{0};
    std::thread writer([&] {
        std::map<int, int> seq;  // per key, advanced only by a transaction known to have committed
        std::unique_ptr<pqxx::connection> conn;
        const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(12);
        while (std::chrono::steady_clock::now() < end) {
            std::string first_id;
            try {
                if (!conn) conn = std::make_unique<pqxx::connection>(pg.Url());
                pqxx::work tx{*conn};
                for (int j = 0; j < 32; ++j) {
                    const auto id = outbox::Enqueue(
                        tx, topic, "k" + std::to_string(j % kKeys), SeqEvent(seq[j % kKeys] + j / kKeys));
                    if (j == 0) first_id = id;
                }
                tx.commit();
            } catch (const std::exception&) {
                // The crash: the connection is gone, and a commit in flight may or may not have
                // landed. Ask the database which, once it is back.
                ++failed_transactions;
                conn.reset();
                bool committed = false;
                for (int attempt = 0; attempt < 100; ++attempt) {
                    try {
                        committed =
                            !first_id.empty() &&
                            testing::Count(pg.Url(),
                                           "SELECT count(*) FROM outbox WHERE event_id = '" + first_id + "'") == 1;
                        break;
                    } catch (const std::exception&) {
                        std::this_thread::sleep_for(std::chrono::milliseconds(200));
                    }
                }
                if (!committed) {
                    std::this_thread::sleep_for(std::chrono::milliseconds(100));
                    continue;
                }
            }
            for (int k = 0; k < kKeys; ++k) seq[k] += 2;
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
    });
    // Crash while the relay publishes and marks (it has marked rows by then).
    std::this_thread::sleep_for(std::chrono::seconds(4));
    const long long marked_before =
        testing::Count(pg.Url(), "SELECT count(*) FROM outbox WHERE published_at IS NOT NULL");
    REQUIRE(pg.Restart() == 0);
    writer.join();

    const auto unpublished = [&] {
        try {
            return testing::Count(pg.Url(), "SELECT count(*) FROM outbox WHERE published_at IS NULL");
        } catch (const std::exception&) {
            return -1LL;
        }
    };
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (unpublished() != 0 && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    relay.Stop();
    const long long rows = testing::Count(pg.Url(), "SELECT count(*) FROM outbox");
    const auto records = testing::ReadTopic(broker.Brokers(), topic, 0, std::chrono::seconds(120));
    const auto stream = testing::AuditEventStream(records);
    MESSAGE("rows: " << rows << ", marked before the crash: " << marked_before
                     << ", writer transactions cut by it: " << failed_transactions.load()
                     << ", records on the topic: " << records.size() << ", sent again: " << stream.duplicates);
    CHECK(marked_before > 0);
    CHECK(failed_transactions.load() >= 1);  // the crash really hit the writer
    CHECK(unpublished() == 0);
    CHECK(stream.value_of.size() == static_cast<std::size_t>(rows));  // every row, none lost
    std::set<std::string> outbox_ids;
    pqxx::connection check{pg.Url()};
    pqxx::read_transaction tx{check};
    for (const auto& row : tx.exec("SELECT event_id::text FROM outbox")) outbox_ids.insert(row[0].as<std::string>());
    std::set<std::string> topic_ids;
    for (const auto& [id, unused] : stream.value_of) topic_ids.insert(id);
    CHECK(outbox_ids == topic_ids);
    CHECK(stream.changed_duplicates == 0);  // a resend is the same event: same id, same bytes
    CHECK(stream.out_of_order == 0);
}

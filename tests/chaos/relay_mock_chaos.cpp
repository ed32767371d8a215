// Fault injection with librdkafka's mock cluster: produce requests fail with retriable errors and
// broker disconnects; the relay publishes every row anyway, and no event id ever changes.
#include <doctest/doctest.h>
#include <librdkafka/rdkafka.h>
// rdkafka_mock.h needs rdkafka.h first.
#include <librdkafka/rdkafka_mock.h>

#include <map>
#include <pqxx/pqxx>
#include <set>
#include <thread>

#include "outbox/detail/rdkafka.hpp"
#include "outbox/relay.hpp"
#include "outbox/writer.hpp"
#include "store/migrations.hpp"
#include "tests/support/kafka_read.hpp"
#include "tests/support/services.hpp"

using namespace sagaflow;

namespace {
constexpr std::int16_t kProduceApiKey = 0;
}

TEST_CASE("injected produce errors are retried without any event id changing") {
    testing::ScratchDatabase db;
    store::MigrateBlocking(db.Url(), store::BuiltinMigrations());
    auto host = outbox::detail::MakeClient(RD_KAFKA_PRODUCER, outbox::detail::MakeConf({{"log_level", "3"}}));
    rd_kafka_mock_cluster_t* cluster = rd_kafka_mock_cluster_new(host.get(), 3);
    REQUIRE(cluster != nullptr);
    const std::string brokers = rd_kafka_mock_cluster_bootstraps(cluster);
    const std::string topic = "mock-orders";
    REQUIRE(rd_kafka_mock_topic_create(cluster, topic.c_str(), 4, 3) == RD_KAFKA_RESP_ERR_NO_ERROR);

    constexpr int kRows = 2000;
    {
        pqxx::connection conn{db.Url()};
        for (int n = 0; n < kRows; n += 100) {
            pqxx::work tx{conn};
            for (int j = n; j < n + 100; ++j) {
                outbox::CloudEvent event;
                event.type = "Test.v1";
                event.source = "sagaflow/chaos";
                event.data = {{"seq", j / 20}};
                outbox::Enqueue(tx, topic, "k" + std::to_string(j % 20), event);
            }
            tx.commit();
        }
    }
    // Retriable broker errors and dropped connections on the first produce requests.
    rd_kafka_mock_push_request_errors(cluster,
                                      kProduceApiKey,
                                      12,
                                      RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS,
                                      RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT,
                                      RD_KAFKA_RESP_ERR__TRANSPORT,
                                      RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS_AFTER_APPEND,
                                      RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION,
                                      RD_KAFKA_RESP_ERR__TRANSPORT,
                                      RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT,
                                      RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS,
                                      RD_KAFKA_RESP_ERR__TRANSPORT,
                                      RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT,
                                      RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS,
                                      RD_KAFKA_RESP_ERR__TRANSPORT);
    outbox::RelayOptions options;
    options.db_url = db.Url();
    options.brokers = brokers;
    options.batch_size = 200;
    options.properties = {{"log_level", "2"}};
    outbox::Relay relay{options};
    relay.Start();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    pqxx::connection check{db.Url()};
    long long unpublished = -1;
    while (std::chrono::steady_clock::now() < deadline) {
        pqxx::read_transaction tx{check};
        unpublished = tx.exec1("SELECT count(*) FROM outbox WHERE published_at IS NULL")[0].as<long long>();
        if (unpublished == 0) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    relay.Stop();
    CHECK(unpublished == 0);

    const auto records = testing::ReadTopic(brokers, topic, 0, std::chrono::seconds(60));
    const auto stream = testing::AuditEventStream(records);
    CHECK(stream.changed_duplicates == 0);  // a resend is the same event: same id, same bytes
    const int out_of_order = stream.out_of_order;
    std::set<std::string> outbox_ids;
    {
        pqxx::read_transaction tx{check};
        for (const auto& row : tx.exec("SELECT event_id::text FROM outbox"))
            outbox_ids.insert(row[0].as<std::string>());
    }
    std::set<std::string> topic_ids;
    for (const auto& [id, unused] : stream.value_of) topic_ids.insert(id);
    CHECK(topic_ids == outbox_ids);  // every row, under its one event id
    CHECK(out_of_order == 0);
    // Every retry happened inside librdkafka, with the message it already had: the relay never
    // rolled a batch back and never produced a row twice.
    CHECK(relay.Metrics().failed_batches.load() == 0);
    {
        pqxx::read_transaction tx{check};
        CHECK(tx.exec1("SELECT count(*) FROM outbox WHERE attempts <> 1")[0].as<long long>() == 0);
    }
    // Records beyond kRows are librdkafka's retries of requests the mock broker had already
    // applied before an injected disconnect: the mock cluster does not deduplicate by producer
    // sequence as a real broker does (the real-broker tests assert exactly one record per id).
    // Each such duplicate was checked above to carry the same id and the same bytes.
    MESSAGE("records: " << records.size() << " for " << kRows << " rows");
    rd_kafka_mock_cluster_destroy(cluster);
}

TEST_CASE("a fatal producer error replaces the producer; the batch is published again under the same ids") {
    testing::ScratchDatabase db;
    store::MigrateBlocking(db.Url(), store::BuiltinMigrations());
    auto host = outbox::detail::MakeClient(RD_KAFKA_PRODUCER, outbox::detail::MakeConf({{"log_level", "3"}}));
    rd_kafka_mock_cluster_t* cluster = rd_kafka_mock_cluster_new(host.get(), 1);
    REQUIRE(cluster != nullptr);
    const std::string brokers = rd_kafka_mock_cluster_bootstraps(cluster);
    const std::string topic = "mock-fatal";
    REQUIRE(rd_kafka_mock_topic_create(cluster, topic.c_str(), 1, 1) == RD_KAFKA_RESP_ERR_NO_ERROR);
    constexpr int kRows = 300;
    {
        pqxx::connection conn{db.Url()};
        pqxx::work tx{conn};
        for (int j = 0; j < kRows; ++j) {
            outbox::CloudEvent event;
            event.type = "Test.v1";
            event.source = "sagaflow/chaos";
            event.data = {{"seq", j}};
            outbox::Enqueue(tx, topic, "k", event);
        }
        tx.commit();
    }
    // With the gap-less guarantee, a sequence error the producer cannot repair is fatal.
    rd_kafka_mock_push_request_errors(cluster, kProduceApiKey, 1, RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER);
    outbox::RelayOptions options;
    options.db_url = db.Url();
    options.brokers = brokers;
    options.properties = {{"log_level", "2"}, {"enable.gapless.guarantee", "true"}};
    outbox::Relay relay{options};
    relay.Start();
    pqxx::connection check{db.Url()};
    long long unpublished = -1;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (std::chrono::steady_clock::now() < deadline) {
        pqxx::read_transaction tx{check};
        unpublished = tx.exec1("SELECT count(*) FROM outbox WHERE published_at IS NULL")[0].as<long long>();
        if (unpublished == 0) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    relay.Stop();
    CHECK(unpublished == 0);
    CHECK(relay.Metrics().producer_restarts.load() >= 1);
    const auto records = testing::ReadTopic(brokers, topic, 0, std::chrono::seconds(60));
    const auto stream = testing::AuditEventStream(records);
    CHECK(stream.value_of.size() == static_cast<std::size_t>(kRows));
    CHECK(stream.changed_duplicates == 0);
    MESSAGE("records: " << records.size() << ", restarts: " << relay.Metrics().producer_restarts.load());
    rd_kafka_mock_cluster_destroy(cluster);
}

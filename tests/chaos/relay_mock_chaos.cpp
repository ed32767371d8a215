// Fault injection with librdkafka's mock cluster: produce requests fail with retriable errors and
// broker disconnects; the relay publishes every row anyway, and no event id ever changes.
#include <doctest/doctest.h>
#include <librdkafka/rdkafka.h>
// rdkafka_mock.h needs rdkafka.h first.
#include <librdkafka/rdkafka_mock.h>

#include <algorithm>
#include <map>
#include <pqxx/pqxx>
#include <set>
#include <thread>

#include "outbox/consumer.hpp"
#include "outbox/detail/rdkafka.hpp"
#include "outbox/relay.hpp"
#include "outbox/writer.hpp"
#include "store/inbox.hpp"
#include "store/migrations.hpp"
#include "store/pool.hpp"
#include "tests/support/kafka_read.hpp"
#include "tests/support/services.hpp"

using namespace sagaflow;

namespace {

constexpr std::int16_t kProduceApiKey = 0;

// A migrated scratch database with `rows` outbox rows for `topic`, spread over `keys` keys, each
// carrying its per-key sequence number, and a mock Kafka cluster that has the topic.
struct MockSetup {
    MockSetup(const std::string& topic_name, int partitions, int brokers_count, int rows, int keys)
        : topic(topic_name),
          host(outbox::detail::MakeClient(RD_KAFKA_PRODUCER, outbox::detail::MakeConf({{"log_level", "3"}}))) {
        store::MigrateBlocking(db.Url(), store::BuiltinMigrations());
        cluster = rd_kafka_mock_cluster_new(host.get(), brokers_count);
        REQUIRE(cluster != nullptr);
        brokers = rd_kafka_mock_cluster_bootstraps(cluster);
        REQUIRE(rd_kafka_mock_topic_create(cluster, topic.c_str(), partitions, brokers_count) ==
                RD_KAFKA_RESP_ERR_NO_ERROR);
        pqxx::connection conn{db.Url()};
        for (int n = 0; n < rows; n += 100) {
            pqxx::work tx{conn};
            for (int j = n; j < std::min(rows, n + 100); ++j) {
                outbox::CloudEvent event;
                event.type = "Test.v1";
                event.source = "sagaflow/chaos";
                event.data = {{"seq", j / keys}};
                outbox::Enqueue(tx, topic, "k" + std::to_string(j % keys), event);
            }
            tx.commit();
        }
    }
    ~MockSetup() { rd_kafka_mock_cluster_destroy(cluster); }

    outbox::RelayOptions Relay(outbox::KafkaProperties properties) const {
        outbox::RelayOptions options;
        options.db_url = db.Url();
        options.brokers = brokers;
        options.properties = std::move(properties);
        return options;
    }

    // Runs the relay until every row is published or `timeout` passes; returns the rows left.
    long long PublishAll(outbox::Relay& relay, std::chrono::seconds timeout) const {
        relay.Start();
        pqxx::connection check{db.Url()};
        long long unpublished = -1;
        const auto deadline = std::chrono::steady_clock::now() + timeout;
        while (std::chrono::steady_clock::now() < deadline) {
            pqxx::read_transaction tx{check};
            unpublished = tx.exec1("SELECT count(*) FROM outbox WHERE published_at IS NULL")[0].as<long long>();
            if (unpublished == 0) break;
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
        relay.Stop();
        return unpublished;
    }

    testing::ScratchDatabase db;
    std::string topic;
    outbox::detail::ClientPtr host;
    rd_kafka_mock_cluster_t* cluster = nullptr;
    std::string brokers;
};

}  // namespace

TEST_CASE("injected produce errors are retried without any event id changing") {
    constexpr int kRows = 2000;
    MockSetup mock{"mock-orders", 4, 3, kRows, 20};
    // Retriable broker errors and dropped connections on the first produce requests.
    rd_kafka_mock_push_request_errors(mock.cluster,
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
    auto options = mock.Relay({{"log_level", "2"}});
    options.batch_size = 200;
    outbox::Relay relay{options};
    CHECK(mock.PublishAll(relay, std::chrono::seconds(120)) == 0);
    pqxx::connection check{mock.db.Url()};

    const auto records = testing::ReadTopic(mock.brokers, mock.topic, 0, std::chrono::seconds(60));
    const auto stream = testing::AuditEventStream(records);
    CHECK(stream.changed_duplicates == 0);  // a resend is the same event: same id, same bytes
    std::set<std::string> outbox_ids;
    {
        pqxx::read_transaction tx{check};
        for (const auto& row : tx.exec("SELECT event_id::text FROM outbox"))
            outbox_ids.insert(row[0].as<std::string>());
    }
    std::set<std::string> topic_ids;
    for (const auto& [id, unused] : stream.value_of) topic_ids.insert(id);
    CHECK(topic_ids == outbox_ids);  // every row, under its one event id
    CHECK(stream.out_of_order == 0);
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
}

TEST_CASE("a fatal producer error replaces the producer; the batch is published again under the same ids") {
    constexpr int kRows = 300;
    MockSetup mock{"mock-fatal", 1, 1, kRows, 1};
    // With the gap-less guarantee, a sequence error the producer cannot repair is fatal.
    rd_kafka_mock_push_request_errors(mock.cluster, kProduceApiKey, 1, RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER);
    outbox::Relay relay{mock.Relay({{"log_level", "2"}, {"enable.gapless.guarantee", "true"}})};
    CHECK(mock.PublishAll(relay, std::chrono::seconds(60)) == 0);
    CHECK(relay.Metrics().producer_restarts.load() >= 1);
    const auto records = testing::ReadTopic(mock.brokers, mock.topic, 0, std::chrono::seconds(60));
    const auto stream = testing::AuditEventStream(records);
    CHECK(stream.value_of.size() == static_cast<std::size_t>(kRows));
    CHECK(stream.changed_duplicates == 0);
    MESSAGE("records: " << records.size() << ", restarts: " << relay.Metrics().producer_restarts.load());
}

TEST_CASE("rows the broker refuses are scheduled again with their error and go out later, in key order") {
    constexpr int kRows = 40;
    MockSetup mock{"mock-refused", 1, 1, kRows, 4};
    // The first produce request is refused with an error librdkafka does not retry: every row in
    // it fails delivery, and the relay records the error and backs off (the failed rows and the
    // mark of any delivered ones in one transaction).
    rd_kafka_mock_push_request_errors(mock.cluster, kProduceApiKey, 1, RD_KAFKA_RESP_ERR_INVALID_RECORD);
    auto options = mock.Relay({{"log_level", "2"}});
    options.initial_backoff = std::chrono::milliseconds(200);
    outbox::Relay relay{options};
    CHECK(mock.PublishAll(relay, std::chrono::seconds(60)) == 0);
    CHECK(relay.Metrics().retried.load() >= 1);
    {
        pqxx::connection check{mock.db.Url()};
        pqxx::read_transaction tx{check};
        // The refused rows keep their error, counted as a second attempt once published.
        const auto refused =
            tx.exec1("SELECT count(*), count(*) FILTER (WHERE attempts = 2) FROM outbox WHERE last_error IS NOT NULL");
        CHECK(refused[0].as<long long>() >= 1);
        CHECK(refused[1].as<long long>() == refused[0].as<long long>());
        CHECK(tx.exec1("SELECT count(*) FROM outbox WHERE last_error IS NULL AND attempts <> 1")[0].as<long long>() ==
              0);
    }
    const auto records = testing::ReadTopic(mock.brokers, mock.topic, kRows, std::chrono::seconds(60));
    const auto stream = testing::AuditEventStream(records);
    CHECK(stream.value_of.size() == static_cast<std::size_t>(kRows));
    CHECK(stream.out_of_order == 0);  // a refused row held back the later rows of its key
}

TEST_CASE("a batch whose deliveries stall is published again by a new producer, under the same ids") {
    constexpr int kRows = 50;
    MockSetup mock{"mock-stall", 1, 1, kRows, 1};
    // The first produce request is answered only after 120 s (longer than librdkafka's 60 s request
    // timeout): the relay must not wait for it.
    REQUIRE(rd_kafka_mock_broker_push_request_error_rtts(
                mock.cluster, 1, kProduceApiKey, 1, RD_KAFKA_RESP_ERR_NO_ERROR, 120'000) == RD_KAFKA_RESP_ERR_NO_ERROR);
    auto options = mock.Relay({{"log_level", "2"}});
    options.stall_timeout = std::chrono::milliseconds(2'000);
    outbox::Relay relay{options};
    const auto started = std::chrono::steady_clock::now();
    CHECK(mock.PublishAll(relay, std::chrono::seconds(50)) == 0);
    const auto seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    CHECK(seconds < 50);  // not the 60 s request timeout, nor the 120 s answer
    CHECK(relay.Metrics().producer_restarts.load() >= 1);
    // Marked once each: the stalled batch was left unmarked, and the new producer's
    // deliveries marked every row.
    {
        pqxx::connection check{mock.db.Url()};
        pqxx::read_transaction tx{check};
        CHECK(tx.exec1("SELECT count(*) FROM outbox WHERE attempts <> 1")[0].as<long long>() == 0);
    }
    // On the topic: every row under its one event id; whatever the stalled request wrote as well
    // is the same event, byte for byte.
    const auto records = testing::ReadTopic(mock.brokers, mock.topic, 0, std::chrono::seconds(60));
    const auto stream = testing::AuditEventStream(records);
    CHECK(stream.value_of.size() == static_cast<std::size_t>(kRows));
    CHECK(stream.changed_duplicates == 0);
    MESSAGE("published in " << seconds << " s, restarts: " << relay.Metrics().producer_restarts.load()
                            << ", records: " << records.size());
}

TEST_CASE("a dead letter the broker refuses is produced again, not dropped with its offset committed") {
    MockSetup mock{"mock-commands", 1, 1, 0, 1};
    REQUIRE(rd_kafka_mock_topic_create(mock.cluster, "mock-commands.dlq", 1, 1) == RD_KAFKA_RESP_ERR_NO_ERROR);
    {
        using namespace outbox::detail;
        auto producer = MakeClient(RD_KAFKA_PRODUCER, MakeConf({{"bootstrap.servers", mock.brokers}}));
        REQUIRE(Produce(producer.get(), mock.topic, "k", "not json at all", nullptr, nullptr) == 0);
        REQUIRE(rd_kafka_flush(producer.get(), 30'000) == RD_KAFKA_RESP_ERR_NO_ERROR);
    }
    // The next two produce requests — the dead letter's — are refused with a non-retriable error:
    // its delivery fails, and rd_kafka_flush() still returns success.
    rd_kafka_mock_push_request_errors(
        mock.cluster, kProduceApiKey, 2, RD_KAFKA_RESP_ERR_INVALID_RECORD, RD_KAFKA_RESP_ERR_INVALID_RECORD);
    store::ConnectionPool pool{{.url = mock.db.Url(),
                                .size = 1,
                                .on_connect = [](auto& c) { store::PrepareInbox(c); },
                                .on_disconnect = {},
                                .after_job = {}}};
    outbox::ConsumerOptions options;
    options.brokers = mock.brokers;
    options.group_id = "mock-dlq-group";
    options.topics = {mock.topic};
    options.inbox_name = "mock-dlq";
    options.properties = {{"log_level", "2"}};
    outbox::Consumer consumer{pool, options, [](pqxx::transaction_base&, const outbox::InboundEvent&) {}};
    consumer.Start();
    const auto& m = consumer.Metrics();
    CHECK(testing::WaitFor([&] { return m.dead_lettered.load() >= 1; }, std::chrono::seconds(60)));
    // Read again after each refusal: consumed once per attempt.
    CHECK(m.consumed.load() >= 3);
    consumer.Stop();
    const auto dlq = testing::ReadTopic(mock.brokers, "mock-commands.dlq", 1, std::chrono::seconds(30));
    REQUIRE(dlq.size() == 1);
    CHECK(dlq[0].value == "not json at all");
    CHECK(dlq[0].headers.at("sagaflow-dlq-reason") == "not JSON");
}

// The outbox, the relay and the shared consumer against the real broker and PostgreSQL.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <future>
#include <map>
#include <mutex>
#include <pqxx/pqxx>
#include <random>
#include <set>
#include <thread>

#include "outbox/consumer.hpp"
#include "outbox/detail/rdkafka.hpp"
#include "outbox/group_progress.hpp"
#include "outbox/relay.hpp"
#include "outbox/runtime.hpp"
#include "outbox/uuid.hpp"
#include "outbox/writer.hpp"
#include "store/inbox.hpp"
#include "store/migrations.hpp"
#include "store/pool.hpp"
#include "tests/support/kafka_read.hpp"
#include "tests/support/services.hpp"

using namespace sagaflow;
using testing::Count;
using testing::KafkaBrokers;
using testing::ScratchDatabase;
using testing::UniqueName;
using testing::WaitFor;

namespace {

outbox::RelayOptions RelayFor(const std::string& url) {
    outbox::RelayOptions options;
    options.db_url = url;
    options.brokers = KafkaBrokers();
    options.poll_interval = std::chrono::milliseconds(200);
    return options;
}

// The relays' wake lock ("sfwk", outbox/relay.cpp): held exclusively while a relay may sleep.
constexpr long long kWakeLock = 0x7366776b;

// Whether a session holds the advisory lock (classid, the public schema's hashtext) exclusively, in
// `conn`'s database (other tests' relays run on the same server).
bool HeldExclusively(pqxx::connection_base& conn, long long classid) {
    return pqxx::nontransaction{conn}
               .exec1("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = " +
                      std::to_string(classid) +
                      " AND objid = hashtext('public')::oid AND mode = 'ExclusiveLock' AND granted AND database = "
                      "(SELECT oid FROM pg_database WHERE datname = current_database())")[0]
               .as<int>() == 1;
}

long long Unpublished(const std::string& url) {
    return Count(url, "SELECT count(*) FROM outbox WHERE published_at IS NULL");
}

// A relay that its pool's own process wakes in memory (outbox::Runtime's LocalWake), on a database
// and a topic of its own, polling once a minute: only a poke or a notification publishes a row in
// time.
struct OwnRelayRig {
    ScratchDatabase db;
    std::string topic;
    outbox::Runtime parts;
    outbox::RelayOptions options;
    OwnRelayRig(const std::string& name, int pool_size) : topic(UniqueName(name)) {
        store::MigrateBlocking(db.Url(), store::BuiltinMigrations());
        testing::CreateTopic(KafkaBrokers(), topic, 1);
        parts.StartPool(db.Url(), pool_size);
        options = RelayFor(db.Url());
        options.poll_interval = std::chrono::seconds(60);
        options.local_wake = parts.local_wake;
    }
};

outbox::CloudEvent TestEvent(const nlohmann::json& data) {
    outbox::CloudEvent event;
    event.type = "Test.v1";
    event.source = "sagaflow/itest";
    event.data = data;
    return event;
}

// A database with an `effect` table, a topic of two partitions, a pool and a consumer's options.
struct ConsumerSetup {
    ScratchDatabase db;
    std::string brokers = KafkaBrokers();
    std::string topic = UniqueName("commands");
    std::unique_ptr<store::ConnectionPool> pool;
    outbox::ConsumerOptions options;

    explicit ConsumerSetup(const std::string& inbox) {
        store::MigrateBlocking(db.Url(), store::BuiltinMigrations());
        testing::Execute(db.Url(), "CREATE TABLE effect (event_id uuid PRIMARY KEY, applied int NOT NULL)");
        testing::CreateTopic(brokers, topic, 2);
        pool = std::make_unique<store::ConnectionPool>(
            store::PoolOptions{.url = db.Url(),
                               .size = 2,
                               .on_connect = [](auto& c) { store::PrepareInbox(c); },
                               .on_disconnect = {},
                               .after_job = {}});
        options.brokers = brokers;
        options.group_id = UniqueName("group");
        options.topics = {topic};
        options.inbox_name = inbox;
    }
};

// `n` well-formed events (values as the relay sends them), their ids appended to `ids`.
std::vector<std::string> TestEventValues(int n, std::vector<std::string>& ids) {
    std::vector<std::string> values;
    for (int i = 0; i < n; ++i) {
        auto event = TestEvent({{"n", i}});
        event.id = outbox::NewUuidV7();
        ids.push_back(event.id);
        values.push_back(event.ToJson().dump());
    }
    return values;
}

// Produces `values` under one key (one partition, in this order) and waits for the broker's acks.
void ProduceAll(const std::string& brokers, const std::string& topic, const std::vector<std::string>& values) {
    using namespace outbox::detail;
    auto producer = MakeClient(RD_KAFKA_PRODUCER, MakeConf({{"bootstrap.servers", brokers}}));
    for (const auto& value : values) REQUIRE(Produce(producer.get(), topic, "saga-1", value, nullptr, nullptr) == 0);
    REQUIRE(rd_kafka_flush(producer.get(), 30'000) == RD_KAFKA_RESP_ERR_NO_ERROR);
}

// The handler's effect: counts each application of an event.
void ApplyEffect(pqxx::transaction_base& tx, const outbox::InboundEvent& in) {
    tx.exec_params(
        "INSERT INTO effect VALUES ($1::uuid, 1) ON CONFLICT (event_id) DO UPDATE SET applied = effect.applied + 1",
        in.event.id);
}

// Commits `offset` for `group` on `topic`[`partition`], as a consumer of the group that never
// subscribes would.
void CommitOffset(const std::string& brokers,
                  const std::string& group,
                  const std::string& topic,
                  int partition,
                  std::int64_t offset) {
    using namespace outbox::detail;
    auto client = MakeClient(RD_KAFKA_CONSUMER, MakeConf({{"bootstrap.servers", brokers}, {"group.id", group}}));
    TopicPartitionListPtr offsets{rd_kafka_topic_partition_list_new(1)};
    rd_kafka_topic_partition_list_add(offsets.get(), topic.c_str(), partition)->offset = offset;
    REQUIRE(rd_kafka_commit(client.get(), offsets.get(), 0) == RD_KAFKA_RESP_ERR_NO_ERROR);
    rd_kafka_consumer_close(client.get());
}

}  // namespace

TEST_CASE("50,000 rows from 8 concurrent writers reach the topic once each, in per-key commit order") {
    ScratchDatabase db;
    store::MigrateBlocking(db.Url(), store::BuiltinMigrations());
    const std::string topic = UniqueName("relay");
    testing::CreateTopic(KafkaBrokers(), topic, 4);
    outbox::Relay relay{RelayFor(db.Url())};
    relay.Start();

    constexpr int kWriters = 8;
    constexpr int kPerWriter = 6250;
    constexpr int kPerTransaction = 10;
    constexpr int kKeysPerWriter = 10;
    std::vector<std::thread> writers;
    for (int w = 0; w < kWriters; ++w) {
        writers.emplace_back([&, w] {
            pqxx::connection conn{db.Url()};
            for (int n = 0; n < kPerWriter; n += kPerTransaction) {
                pqxx::work tx{conn};
                for (int j = n; j < n + kPerTransaction; ++j) {
                    const std::string key = "w" + std::to_string(w) + "-k" + std::to_string(j % kKeysPerWriter);
                    outbox::Enqueue(tx, topic, key, TestEvent({{"seq", j / kKeysPerWriter}}));
                }
                tx.commit();
            }
        });
    }
    for (auto& w : writers) w.join();
    const long long total = kWriters * kPerWriter;
    CHECK(WaitFor([&] { return Count(db.Url(), "SELECT count(*) FROM outbox WHERE published_at IS NULL") == 0; },
                  std::chrono::seconds(180)));
    relay.Stop();
    CHECK(relay.Metrics().published.load() == static_cast<std::uint64_t>(total));

    const auto records = testing::ReadTopic(KafkaBrokers(), topic, 0, std::chrono::seconds(120));
    CHECK(records.size() == static_cast<std::size_t>(total));
    const auto stream = testing::AuditEventStream(records);
    CHECK(stream.value_of.size() == static_cast<std::size_t>(total));  // one record per event id
    CHECK(stream.duplicates == 0);
    CHECK(stream.out_of_order == 0);
    std::set<std::string> keys;
    for (const auto& record : records) {
        keys.insert(record.key);
        CHECK(record.headers.at("content-type") == "application/cloudevents+json");
    }
    CHECK(keys.size() == static_cast<std::size_t>(kWriters * kKeysPerWriter));
    CHECK(Count(db.Url(), "SELECT count(*) FROM outbox WHERE attempts = 1") == total);
}

TEST_CASE("the relay puts each key in the partition the Java client and kafkajs would (murmur2)") {
    // librdkafka's default partitioner (CRC-32) puts most keys elsewhere: a saga's messages from a
    // C++ producer and from a kafkajs or Java one would be in two partitions, in no common order.
    ScratchDatabase db;
    store::MigrateBlocking(db.Url(), store::BuiltinMigrations());
    const std::string topic = UniqueName("partitions");
    constexpr int kPartitions = 6;
    testing::CreateTopic(KafkaBrokers(), topic, kPartitions);
    constexpr int kKeys = 300;
    {
        pqxx::connection conn{db.Url()};
        pqxx::work tx{conn};
        for (int i = 0; i < kKeys; ++i) outbox::Enqueue(tx, topic, outbox::NewUuidV7(), TestEvent({{"i", i}}));
        tx.commit();
    }
    outbox::Relay relay{RelayFor(db.Url())};
    relay.Start();
    const auto records = testing::ReadTopic(KafkaBrokers(), topic, kKeys, std::chrono::seconds(60));
    relay.Stop();
    REQUIRE(records.size() == static_cast<std::size_t>(kKeys));
    int elsewhere = 0;
    std::set<int> used;
    for (const auto& record : records) {
        used.insert(record.partition);
        if (record.partition != outbox::KeyPartition(record.key, kPartitions)) ++elsewhere;
    }
    CHECK(elsewhere == 0);
    CHECK(used.size() == static_cast<std::size_t>(kPartitions));  // the keys spread over every partition
}

TEST_CASE("a row that commits late and a re-armed row go out before the later rows of their keys") {
    // The relay claims after the last ids it published; a row below that point (its transaction
    // committed long after its id was taken, or it was re-armed) must still go out, and first.
    ScratchDatabase db;
    store::MigrateBlocking(db.Url(), store::BuiltinMigrations());
    const std::string topic = UniqueName("relay-late");
    testing::CreateTopic(KafkaBrokers(), topic, 1);
    outbox::Relay relay{RelayFor(db.Url())};
    relay.Start();
    const auto commit_rows = [&](const std::string& key, int from, int count) {
        pqxx::connection conn{db.Url()};
        pqxx::work tx{conn};
        std::string last;
        for (int seq = from; seq < from + count; ++seq)
            last = outbox::Enqueue(tx, topic, key, TestEvent({{"seq", seq}}));
        tx.commit();
        return last;
    };
    const auto all_published = [&] {
        return Count(db.Url(), "SELECT count(*) FROM outbox WHERE published_at IS NULL") == 0;
    };

    const std::string rearm_id = commit_rows("rearmed", 0, 1);
    REQUIRE(WaitFor(all_published, std::chrono::seconds(30)));
    pqxx::connection late_conn{db.Url()};
    pqxx::work late{late_conn};
    outbox::Enqueue(late, topic, "late", TestEvent({{"seq", 0}}));  // takes its id now, commits later
    for (int round = 0; round < 10; ++round) {                      // later ids, published meanwhile
        commit_rows("other", round * 10, 10);
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    REQUIRE(WaitFor([&] { return Count(db.Url(), "SELECT count(*) FROM outbox WHERE published_at IS NULL") == 0; },
                    std::chrono::seconds(30)));
    late.commit();
    commit_rows("late", 1, 3);
    {
        pqxx::connection conn{db.Url()};
        pqxx::work tx{conn};
        REQUIRE(outbox::Rearm(tx, rearm_id));
        tx.commit();
    }
    commit_rows("rearmed", 1, 3);
    const auto t0 = std::chrono::steady_clock::now();
    REQUIRE(WaitFor(all_published, std::chrono::seconds(30)));
    // The late and re-armed rows wait at most for the next full claim (the poll interval).
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(3));
    relay.Stop();

    const auto records = testing::ReadTopic(KafkaBrokers(), topic, 109, std::chrono::seconds(60));
    REQUIRE(records.size() == 109);  // 1 + 1 again + 3 rearmed, 1 + 3 late, 100 other
    std::map<std::string, std::vector<int>> seqs;
    for (const auto& record : records) {
        seqs[record.key].push_back(nlohmann::json::parse(record.value).at("data").at("seq").get<int>());
    }
    CHECK(seqs["late"] == std::vector<int>{0, 1, 2, 3});
    CHECK(seqs["rearmed"] == std::vector<int>{0, 0, 1, 2, 3});
    CHECK(seqs["other"].size() == 100);
    CHECK(testing::AuditEventStream(records).changed_duplicates == 0);
}

TEST_CASE("only a sleeping relay is notified, and a commit that raced its sleep is not left waiting") {
    // The poll interval is a minute: within the test only a notification, or the relay's own
    // claim before it sleeps, can publish a row.
    ScratchDatabase db;
    store::MigrateBlocking(db.Url(), store::BuiltinMigrations());
    const std::string topic = UniqueName("relay-wake");
    testing::CreateTopic(KafkaBrokers(), topic, 1);
    auto options = RelayFor(db.Url());
    options.poll_interval = std::chrono::seconds(60);
    const auto unpublished = [&] { return Unpublished(db.Url()); };
    pqxx::connection watcher{db.Url()};
    const auto armed = [&] { return HeldExclusively(watcher, kWakeLock); };
    // A writer in flight before the relay starts: the wake lock is free, so its trigger takes it
    // shared and its commit will not notify. The relay's first claims cannot see the row.
    pqxx::connection writer_conn{db.Url()};
    pqxx::work writer{writer_conn};
    outbox::Enqueue(writer, topic, "raced", TestEvent({{"seq", 0}}));
    CHECK(writer
              .exec1("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = 1936095083 AND "
                     "mode = 'ShareLock' AND pid = pg_backend_pid()")[0]
              .as<int>() == 1);
    outbox::Relay relay{options};
    relay.Start();
    REQUIRE(WaitFor([&] { return relay.IsLeader(); }, std::chrono::seconds(30)));
    // It cannot take the wake lock while the writer holds it: it claims again and retries.
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    CHECK_FALSE(armed());
    writer.commit();
    auto t0 = std::chrono::steady_clock::now();
    REQUIRE(WaitFor([&] { return unpublished() == 0; }, std::chrono::seconds(30)));
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
    REQUIRE(WaitFor(armed, std::chrono::seconds(5)));

    // Asleep with the wake lock: a commit notifies and wakes it.
    {
        pqxx::connection conn{db.Url()};
        pqxx::work tx{conn};
        outbox::Enqueue(tx, topic, "woken", TestEvent({{"seq", 0}}));
        CHECK(tx.exec1("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = 1936095083 AND "
                       "pid = pg_backend_pid()")[0]
                  .as<int>() == 0);  // the shared try failed: this commit notifies
        tx.commit();
    }
    t0 = std::chrono::steady_clock::now();
    REQUIRE(WaitFor([&] { return unpublished() == 0; }, std::chrono::seconds(30)));
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
    relay.Stop();
    CHECK_FALSE(armed());  // the session's locks go with it
    const auto records = testing::ReadTopic(KafkaBrokers(), topic, 2, std::chrono::seconds(60));
    CHECK(records.size() == 2);
}

TEST_CASE("a relay woken by its own process's commits while it publishes stays armed") {
    // Every row comes from the relay's own pool: none notifies, and each wakes it in memory. A poke
    // that comes while a batch is at the broker makes it claim again, holding its wake lock (it
    // sleeps again without arming) instead of dropping it and taking it back (two round trips).
    OwnRelayRig rig{"relay-stays-armed", 2};
    auto& parts = rig.parts;
    const std::string& topic = rig.topic;
    const std::string url = rig.db.Url();
    parts.relay = std::make_unique<outbox::Relay>(rig.options);
    parts.relay->Start();
    pqxx::connection watcher{url};
    const auto armed = [&] { return HeldExclusively(watcher, kWakeLock); };
    REQUIRE(WaitFor([&] { return armed() && parts.relay->IsLeader(); }, std::chrono::seconds(30)));
    REQUIRE(WaitFor([&] { return HeldExclusively(watcher, parts.local_wake->Token()); }, std::chrono::seconds(30)));
    const auto write_one = [&] {
        parts.pool->RunBlocking([&](pqxx::connection& conn) {
            pqxx::work tx{conn};
            outbox::Enqueue(tx, topic, "own", TestEvent({{"seq", 1}}));
            tx.commit();
        });
    };
    const auto unpublished = [&] { return Unpublished(url); };
    // The producer's first message (its connection, the topic's metadata) before the stream.
    write_one();
    REQUIRE(WaitFor([&] { return unpublished() == 0; }, std::chrono::seconds(30)));
    REQUIRE(WaitFor(armed, std::chrono::seconds(5)));
    // Two writers commit a row every millisecond or so, 400 in all, while the relay publishes them.
    constexpr int kRows = 400;
    std::atomic<int> written{1};
    std::vector<std::thread> writers;
    for (int w = 0; w < 2; ++w) {
        writers.emplace_back([&] {
            while (written.fetch_add(1) < kRows) {
                write_one();
                std::this_thread::sleep_for(std::chrono::milliseconds(1));
            }
        });
    }
    int samples = 0, disarmed = 0;
    while (written.load() < kRows) {
        ++samples;
        if (!armed()) ++disarmed;
    }
    for (auto& writer : writers) writer.join();
    REQUIRE(WaitFor([&] { return unpublished() == 0; }, std::chrono::seconds(30)));
    MESSAGE("samples of the wake lock while the rows were written: " << samples << ", not held: " << disarmed);
    CHECK(samples > 20);
    CHECK(disarmed == 0);
    CHECK(testing::ReadTopic(KafkaBrokers(), topic, kRows, std::chrono::seconds(60)).size() == kRows);
    parts.Stop();
}

TEST_CASE("a commit from the relay's own process wakes it in memory, without a notification") {
    OwnRelayRig rig{"relay-local-wake", 1};
    auto& parts = rig.parts;
    const auto& options = rig.options;
    const std::string& topic = rig.topic;
    const std::string url = rig.db.Url();
    const auto unpublished = [&] { return Unpublished(url); };
    pqxx::connection watcher{url};
    const auto held = [&](long long classid) { return HeldExclusively(watcher, classid); };
    // Every notification of the database, as another relay's session would be signalled.
    pqxx::connection listen_conn{url};
    struct Counter final : pqxx::notification_receiver {
        int received = 0;
        explicit Counter(pqxx::connection_base& c) : pqxx::notification_receiver(c, "sagaflow_outbox") {}
        void operator()(const std::string&, int) override { ++received; }
    } counter{listen_conn};
    const auto notifications = [&] {
        listen_conn.await_notification(0, 300'000);
        return std::exchange(counter.received, 0);
    };
    const auto publish_own = [&](int seq) {
        parts.pool->RunBlocking([&](pqxx::connection& conn) {
            pqxx::work tx{conn};
            outbox::Enqueue(tx, topic, "own", TestEvent({{"seq", seq}}));
            tx.commit();
        });
        const auto t0 = std::chrono::steady_clock::now();
        REQUIRE(WaitFor([&] { return unpublished() == 0; }, std::chrono::seconds(30)));
        CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
    };

    // A transaction holds the token's lock shared (a writer of this process that found another
    // relay asleep): the relay does not wait for it. It sleeps without it, and the process's
    // commits notify.
    pqxx::connection blocker_conn{url};
    pqxx::work blocker{blocker_conn};
    blocker.exec("SELECT pg_advisory_xact_lock_shared(" + std::to_string(parts.local_wake->Token()) +
                 ", hashtext('public'))");
    parts.relay = std::make_unique<outbox::Relay>(options);
    parts.relay->Start();
    REQUIRE(WaitFor([&] { return held(kWakeLock); }, std::chrono::seconds(30)));
    CHECK_FALSE(held(parts.local_wake->Token()));
    publish_own(1);
    CHECK(notifications() == 1);
    blocker.commit();

    // A new session of the relay: asleep, it holds the wake lock (0x7366776b) and its token's lock.
    parts.relay->Stop();
    parts.relay = std::make_unique<outbox::Relay>(options);
    parts.relay->Start();
    REQUIRE(WaitFor([&] { return held(kWakeLock) && held(parts.local_wake->Token()); }, std::chrono::seconds(30)));
    CHECK(notifications() == 0);
    // A pool job's commit: no notification, and the relay publishes within seconds, not a minute.
    publish_own(2);
    CHECK(notifications() == 0);

    // Another session's commit (no token: another process, a foreign participant) still notifies.
    REQUIRE(WaitFor([&] { return held(kWakeLock); }, std::chrono::seconds(5)));
    {
        pqxx::connection conn{url};
        pqxx::work tx{conn};
        outbox::Enqueue(tx, topic, "foreign", TestEvent({{"seq", 3}}));
        tx.commit();
    }
    const auto t0 = std::chrono::steady_clock::now();
    REQUIRE(WaitFor([&] { return unpublished() == 0; }, std::chrono::seconds(30)));
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
    CHECK(notifications() == 1);
    parts.Stop();
    const auto records = testing::ReadTopic(KafkaBrokers(), topic, 3, std::chrono::seconds(60));
    CHECK(records.size() == 3);
}

TEST_CASE(
    "the relay's mark leaves a row re-armed after its claim due, whether the re-arm committed before or during it") {
    // The relay holds no row locks while the broker acknowledges: its mark applies only to the row
    // versions its claim read. An engine that re-arms a command meanwhile must not see its re-arm
    // overwritten by "published".
    ScratchDatabase db;
    store::MigrateBlocking(db.Url(), store::BuiltinMigrations());
    const std::string topic = UniqueName("relay-mark");
    std::vector<std::string> event_ids;
    {
        pqxx::connection conn{db.Url()};
        pqxx::work tx{conn};
        for (const std::string key : {"before", "during", "untouched"})
            event_ids.push_back(outbox::Enqueue(tx, topic, key, TestEvent({{"key", key}})));
        tx.commit();
    }
    pqxx::connection relay_conn{db.Url()};
    std::string ids, versions, partitions, offsets;
    {
        pqxx::nontransaction tx{relay_conn};
        const auto claimed = tx.exec_params(outbox::RelayClaimStatement(false), 10, 0);
        REQUIRE(claimed.size() == 3);
        for (const auto& row : claimed) {
            ids += (ids.empty() ? "{" : ",") + row[0].as<std::string>();
            versions += (versions.empty() ? "{" : ",") + row[8].as<std::string>();
            partitions += (partitions.empty() ? "{" : ",") + std::string("0");
            offsets += (offsets.empty() ? "{" : ",") + std::to_string(partitions.size());
        }
        ids += "}";
        versions += "}";
        partitions += "}";
        offsets += "}";
    }
    // "before": re-armed and committed between the claim and the mark.
    {
        pqxx::connection conn{db.Url()};
        pqxx::work tx{conn};
        REQUIRE(outbox::Rearm(tx, event_ids[0]));
        tx.commit();
    }
    // "during": re-armed by a transaction still open when the mark runs; the mark waits for it.
    pqxx::connection during_conn{db.Url()};
    pqxx::work during{during_conn};
    REQUIRE(outbox::Rearm(during, event_ids[1]));
    auto mark = std::async(std::launch::async, [&] {
        pqxx::nontransaction tx{relay_conn};
        return tx.exec_params(outbox::RelayMarkStatement(), ids, versions, partitions, offsets).affected_rows();
    });
    REQUIRE(mark.wait_for(std::chrono::milliseconds(500)) == std::future_status::timeout);  // waits on the row
    during.commit();
    CHECK(mark.get() == 1);

    const auto state = [&](const std::string& event_id) {
        return Count(db.Url(),
                     "SELECT CASE WHEN published_at IS NOT NULL THEN 1 WHEN next_attempt_at IS NOT NULL THEN 2 "
                     "ELSE 0 END FROM outbox WHERE event_id = '" +
                         event_id + "'");
    };
    CHECK(state(event_ids[0]) == 2);  // due again, not marked published
    CHECK(state(event_ids[1]) == 2);
    CHECK(state(event_ids[2]) == 1);  // the row nobody touched is marked

    // And the relay publishes the re-armed rows.
    testing::CreateTopic(KafkaBrokers(), topic, 1);
    outbox::Relay relay{RelayFor(db.Url())};
    relay.Start();
    REQUIRE(WaitFor([&] { return Count(db.Url(), "SELECT count(*) FROM outbox WHERE published_at IS NULL") == 0; },
                    std::chrono::seconds(30)));
    relay.Stop();
    const auto records = testing::ReadTopic(KafkaBrokers(), topic, 2, std::chrono::seconds(30));
    std::set<std::string> keys;
    for (const auto& record : records) keys.insert(record.key);
    CHECK(keys == std::set<std::string>{"before", "during"});
}

TEST_CASE("a row that commits after the relay's first claim took later ids goes out before the later rows of its key") {
    // The relay's first claim cannot know which lower ids are still to commit; their rows must
    // still go out before the rows of their keys that commit after them.
    ScratchDatabase db;
    store::MigrateBlocking(db.Url(), store::BuiltinMigrations());
    const std::string topic = UniqueName("relay-first");
    testing::CreateTopic(KafkaBrokers(), topic, 1);
    const auto commit_rows = [&](const std::string& key, int from, int count) {
        pqxx::connection conn{db.Url()};
        pqxx::work tx{conn};
        for (int seq = from; seq < from + count; ++seq) outbox::Enqueue(tx, topic, key, TestEvent({{"seq", seq}}));
        tx.commit();
    };
    const auto unpublished = [&] { return Count(db.Url(), "SELECT count(*) FROM outbox WHERE published_at IS NULL"); };
    constexpr int kRounds = 5;
    // Open transactions, each with a row; their ids come before the row the relay claims first.
    std::vector<std::unique_ptr<pqxx::connection>> conns;
    std::vector<std::unique_ptr<pqxx::work>> open;
    for (int round = 0; round < kRounds; ++round) {
        conns.push_back(std::make_unique<pqxx::connection>(db.Url()));
        open.push_back(std::make_unique<pqxx::work>(*conns.back()));
        outbox::Enqueue(*open.back(), topic, "open" + std::to_string(round), TestEvent({{"seq", 0}}));
    }
    commit_rows("other", 0, 1);
    outbox::Relay relay{RelayFor(db.Url())};
    relay.Start();
    REQUIRE(WaitFor([&] { return unpublished() == 0; }, std::chrono::seconds(30)));
    for (int round = 0; round < kRounds; ++round) {  // commit, then at once a later row of the key
        open[static_cast<std::size_t>(round)]->commit();
        commit_rows("open" + std::to_string(round), 1, 2);
        std::this_thread::sleep_for(std::chrono::milliseconds(70));
    }
    REQUIRE(WaitFor([&] { return unpublished() == 0; }, std::chrono::seconds(30)));
    relay.Stop();

    const auto records = testing::ReadTopic(KafkaBrokers(), topic, 1 + 3 * kRounds, std::chrono::seconds(60));
    REQUIRE(records.size() == static_cast<std::size_t>(1 + 3 * kRounds));
    std::map<std::string, std::string> seqs;  // key: its rows' seq in topic order
    for (const auto& record : records) {
        seqs[record.key] += std::to_string(nlohmann::json::parse(record.value).at("data").at("seq").get<int>());
    }
    for (int round = 0; round < kRounds; ++round) CHECK(seqs["open" + std::to_string(round)] == "012");
}

TEST_CASE("the consumer applies each event once, moves malformed and poison records to the DLQ, and goes on") {
    ConsumerSetup setup{"itest-consumer"};
    const std::string& brokers = setup.brokers;
    const std::string& topic = setup.topic;
    const std::string url = setup.db.Url();
    store::ConnectionPool& pool = *setup.pool;
    outbox::ConsumerOptions& options = setup.options;

    std::vector<std::string> good_ids;
    std::vector<std::string> values = TestEventValues(3, good_ids);
    values.push_back(values[1]);  // duplicate deliveries
    values.push_back(values[1]);
    values.push_back("not json at all");
    values.push_back(R"({"specversion":"1.0","type":"x","source":"y"})");
    auto poison = TestEvent({{"poison", true}});
    poison.id = outbox::NewUuidV7();
    values.push_back(poison.ToJson().dump());
    ProduceAll(brokers, topic, values);

    options.max_handler_attempts = 3;
    // A side effect of the handler (a metric, say), gathered in its transaction and kept only once
    // that committed: the batch that the poison rolls back is applied again record by record, and
    // each good event must count once.
    std::atomic<int> pending{0};
    std::atomic<int> counted{0};
    std::atomic<int> rollbacks{0};
    std::atomic<bool> open{false};
    options.on_transaction_begin = [&] {
        if (open.exchange(true)) ++rollbacks;  // the previous transaction never committed
        pending = 0;
    };
    options.after_commit = [&] {
        open = false;
        counted += pending.exchange(0);
    };
    outbox::Consumer consumer{pool, options, [&](pqxx::transaction_base& tx, const outbox::InboundEvent& in) {
                                  ++pending;
                                  if (in.event.data.value("poison", false)) throw std::runtime_error("poisoned");
                                  ApplyEffect(tx, in);
                              }};
    consumer.Start();
    const auto& m = consumer.Metrics();
    CHECK(WaitFor([&] { return m.dead_lettered.load() == 3 && m.applied.load() + m.duplicates.load() == 5; },
                  std::chrono::seconds(90)));
    consumer.Stop();
    CHECK(m.applied.load() == 3);
    CHECK(counted.load() == 3);
    CHECK(rollbacks.load() >= 1);
    CHECK(m.duplicates.load() == 2);
    CHECK(Count(url, "SELECT count(*) FROM effect WHERE applied = 1") == 3);
    CHECK(Count(url, "SELECT count(*) FROM effect") == 3);

    const auto dlq = testing::ReadTopic(brokers, topic + ".dlq", 3, std::chrono::seconds(60));
    REQUIRE(dlq.size() == 3);
    std::set<std::string> reasons;
    for (const auto& record : dlq) reasons.insert(record.headers.at("sagaflow-dlq-reason"));
    CHECK(reasons == std::set<std::string>{"not JSON", "no id", "handler failed 3 times: poisoned"});

    // The offsets were committed after the database: the same group reads nothing again.
    outbox::Consumer again{pool, options, [](pqxx::transaction_base&, const outbox::InboundEvent&) {}};
    again.Start();
    std::this_thread::sleep_for(std::chrono::seconds(6));
    again.Stop();
    CHECK(again.Metrics().consumed.load() == 0);

    // An operator reads the dead letters: where each came from, why, and what it is.
    const auto listed = testing::RunCli("dlq " + topic + ".dlq --brokers " + brokers);
    INFO(listed.out << listed.err);
    CHECK(listed.code == 0);
    CHECK(listed.err.find("3 dead letter(s) in " + topic + ".dlq") != std::string::npos);
    CHECK(listed.out.find("reason: handler failed 3 times: poisoned") != std::string::npos);
    CHECK(listed.out.find("event " + poison.id + " Test.v1") != std::string::npos);
    CHECK(listed.out.find("reason: not JSON") != std::string::npos);
    CHECK(listed.out.find("value (15 bytes): not json at all") != std::string::npos);
    CHECK(listed.out.find("from " + topic + "/") != std::string::npos);
    // The handler fixed, the poisoned event is replayed (only it: --match), applied once; a second
    // replay is dropped by the inbox.
    outbox::Consumer fixed{pool, options, ApplyEffect};
    fixed.Start();
    for (std::uint64_t round = 1; round <= 2; ++round) {
        const auto replayed =
            testing::RunCli("dlq " + topic + ".dlq --brokers " + brokers + " --match 'handler failed' --replay");
        INFO(replayed.out << replayed.err);
        CHECK(replayed.code == 0);
        CHECK(replayed.err.find("3 dead letter(s) in " + topic + ".dlq, 1 with 'handler failed' in the reason") !=
              std::string::npos);
        CHECK(replayed.err.find("replayed 1 to their origin topics") != std::string::npos);
        CHECK(WaitFor([&] { return fixed.Metrics().applied.load() + fixed.Metrics().duplicates.load() == round; },
                      std::chrono::seconds(60)));
    }
    fixed.Stop();
    CHECK(fixed.Metrics().applied.load() == 1);
    CHECK(fixed.Metrics().duplicates.load() == 1);
    CHECK(Count(url, "SELECT applied FROM effect WHERE event_id = '" + poison.id + "'") == 1);
    CHECK(testing::ReadTopic(brokers, topic + ".dlq", 0, std::chrono::seconds(10)).size() == 3);  // nothing new

    const auto wrong = testing::RunCli("dlq " + topic + " --brokers " + brokers);
    CHECK(wrong.code == 2);
    CHECK(wrong.err.find("is not a dead-letter topic") != std::string::npos);
}

TEST_CASE("a handler's first statement rides in the inbox statement, in its transaction, before the handler") {
    // Both kinds of companion: rows and a lock (the engine's), and one that finds nothing. Each
    // sets a setting for the transaction, and the first call of the first batch asks for the batch
    // again (ApplyBatchAgain) after writing its effects: the second attempt gets no companion.
    for (const bool finds_rows : {true, false}) {
        CAPTURE(finds_rows);
        ConsumerSetup setup{finds_rows ? "itest-companion" : "itest-companion-empty"};
        std::vector<std::string> ids;
        std::vector<std::string> values = TestEventValues(3, ids);
        values.insert(values.begin() + 2, values[1]);  // a redelivery between two fresh events
        ProduceAll(setup.brokers, setup.topic, values);
        std::vector<std::size_t> companion_sizes;  // per batch: events the companion was given
        setup.options.companion = [&](const std::vector<const outbox::InboundEvent*>& events) {
            companion_sizes.push_back(events.size());
            return outbox::InboxCompanion{"SELECT k, pg_advisory_xact_lock(k) FROM unnest($1::bigint[]) AS k" +
                                              std::string(finds_rows ? "" : " WHERE k < 0"),
                                          {"{4242}"},
                                          "set_config('sagaflow.itest', 'set by the inbox statement', true)"};
        };
        int call_in_transaction = 0;
        int transactions = 0;
        int asked_again_in = 0;  // the transaction whose first call threw ApplyBatchAgain
        std::vector<std::string> problems;
        int applied_in_transaction = 0;  // events whose effects this transaction's calls wrote or handed back
        setup.options.on_transaction_begin = [&] {
            call_in_transaction = 0;
            applied_in_transaction = 0;
            ++transactions;
        };
        // The calls before have written their effects by now, the last one's handed back included.
        setup.options.on_duplicate = [&](pqxx::transaction_base& tx, const outbox::InboundEvent&) {
            ++call_in_transaction;
            if (tx.exec1("SELECT count(*) FROM effect")[0].as<int>() < applied_in_transaction) {
                problems.push_back("a handler's last write had not run before the duplicate's call");
            }
        };
        int first_calls = 0;
        int later_calls = 0;
        outbox::Consumer consumer{
            *setup.pool,
            setup.options,
            outbox::BatchHandler([&](pqxx::transaction_base& tx,
                                     const std::vector<const outbox::InboundEvent*>& events,
                                     const pqxx::result* companion) {
                const bool first = call_in_transaction++ == 0;
                (first ? first_calls : later_calls) += 1;
                const bool second_attempt = asked_again_in != 0 && transactions == asked_again_in + 1;
                if ((first && !second_attempt) != (companion != nullptr)) {
                    problems.push_back(second_attempt ? "rows given to the second attempt"
                                                      : "rows given to a call that was not first");
                }
                if (companion != nullptr &&
                    tx.exec1("SELECT current_setting('sagaflow.itest', true)")[0].as<std::string>("") !=
                        "set by the inbox statement") {
                    problems.push_back("the companion's settings are not set");
                }
                if (companion != nullptr && asked_again_in == 0) {
                    for (const auto* in : events) ApplyEffect(tx, *in);  // rolled back with the attempt
                    asked_again_in = transactions;
                    throw outbox::ApplyBatchAgain("the test asks for the batch again");
                }
                if (companion != nullptr && finds_rows) {
                    // The companion's rows (its two columns, then the consumer's), and its lock held by
                    // this transaction: it ran in it, before the handler.
                    if (companion->size() != 1 || companion->columns() != 3 || (*companion)[0][0].as<int>() != 4242) {
                        problems.push_back("unexpected companion rows");
                    }
                    if (tx.exec1("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = 4242 AND "
                                 "granted AND pid = pg_backend_pid()")[0]
                            .as<int>() != 1) {
                        problems.push_back("the companion's lock is not held");
                    }
                }
                if (companion != nullptr && !finds_rows && !companion->empty()) {
                    problems.push_back("rows from a companion that found none");
                }
                // The effects as the call's last write: the consumer runs it before the duplicate's
                // call, or with the COMMIT.
                std::string applied_ids = "{";
                for (const auto* in : events) applied_ids += (applied_ids.size() > 1 ? "," : "") + in->event.id;
                applied_in_transaction += static_cast<int>(events.size());
                return outbox::LastWrite{store::Statement{
                    "INSERT INTO effect SELECT unnest($1::uuid[]), 1 ON CONFLICT (event_id) DO UPDATE SET applied = "
                    "effect.applied + 1",
                    {applied_ids + "}"}}};
            })};
        consumer.Start();
        const auto& m = consumer.Metrics();
        CHECK(WaitFor([&] { return m.applied.load() + m.duplicates.load() == 4; }, std::chrono::seconds(60)));
        consumer.Stop();
        CHECK_MESSAGE(problems.empty(), (problems.empty() ? std::string() : problems.front()));
        // The fresh ids came back through the same statement: each event applied once, the
        // redelivery dropped.
        CHECK(m.applied.load() == 3);
        CHECK(m.duplicates.load() == 1);
        CHECK(asked_again_in != 0);
        CHECK(Count(setup.db.Url(), "SELECT count(*) FROM effect WHERE applied = 1") == 3);
        CHECK(Count(setup.db.Url(), "SELECT count(*) FROM effect") == 3);
        CHECK(first_calls >= 1);
        // The companion saw every well-formed record, the redelivery too.
        std::size_t given = 0;
        for (const auto n : companion_sizes) given += n;
        CHECK(given == 4);
        // A redelivery between fresh events in one batch: the call after it reads for itself.
        if (companion_sizes == std::vector<std::size_t>{4}) CHECK(later_calls == 1);
    }
}

TEST_CASE("binary-mode CloudEvents (ce_ headers) are applied like structured ones; other content types are refused") {
    ConsumerSetup setup{"itest-binary"};
    using namespace outbox::detail;
    // Each record: value and headers, as kafkajs with the CloudEvents SDK's Kafka.binary() sends them.
    const auto send = [&](const std::string& value, const std::vector<std::pair<std::string, std::string>>& h) {
        auto producer = MakeClient(RD_KAFKA_PRODUCER, MakeProducerConf({{"bootstrap.servers", setup.brokers}}));
        HeadersPtr headers{rd_kafka_headers_new(h.size())};
        for (const auto& [name, text] : h) {
            rd_kafka_header_add(headers.get(), name.c_str(), -1, text.data(), static_cast<ssize_t>(text.size()));
        }
        REQUIRE(Produce(producer.get(), setup.topic, "saga-1", value, headers.get(), nullptr) == 0);
        static_cast<void>(headers.release());  // the producer owns them now
        REQUIRE(rd_kafka_flush(producer.get(), 30'000) == RD_KAFKA_RESP_ERR_NO_ERROR);
    };
    const auto binary = [](const std::string& id, const std::string& content_type) {
        std::vector<std::pair<std::string, std::string>> h{
            {"ce_specversion", "1.0"}, {"ce_id", id}, {"ce_type", "Test.v1"}, {"ce_source", "kafkajs"}};
        if (!content_type.empty()) h.emplace_back("content-type", content_type);
        return h;
    };
    const std::string first = outbox::NewUuidV7();
    const std::string second = outbox::NewUuidV7();
    send(R"({"n":1})", binary(first, "application/json"));
    send(R"({"n":2})", binary(second, ""));
    send(R"({"n":2})", binary(second, ""));  // a redelivery: the inbox drops it
    send("<n>3</n>", binary(outbox::NewUuidV7(), "application/xml"));
    send(R"({"n":4})", {{"content-type", "application/json"}});  // neither mode

    std::mutex mutex;
    std::map<std::string, nlohmann::json> applied;
    outbox::Consumer consumer{
        *setup.pool, setup.options, [&](pqxx::transaction_base& tx, const outbox::InboundEvent& in) {
            ApplyEffect(tx, in);
            const std::lock_guard lock(mutex);
            applied[in.event.id] = in.event.data;
        }};
    consumer.Start();
    const auto& m = consumer.Metrics();
    CHECK(WaitFor([&] { return m.dead_lettered.load() == 2 && m.applied.load() + m.duplicates.load() == 3; },
                  std::chrono::seconds(60)));
    consumer.Stop();
    CHECK(m.applied.load() == 2);
    CHECK(applied == std::map<std::string, nlohmann::json>{{first, {{"n", 1}}}, {second, {{"n", 2}}}});
    CHECK(Count(setup.db.Url(), "SELECT count(*) FROM effect WHERE applied = 1") == 2);
    const auto dlq = testing::ReadTopic(setup.brokers, setup.topic + ".dlq", 2, std::chrono::seconds(60));
    std::set<std::string> reasons;
    for (const auto& record : dlq) reasons.insert(record.headers.at("sagaflow-dlq-reason"));
    CHECK(reasons == std::set<std::string>{
                         "binary-mode CloudEvent with data of content-type 'application/xml': sagaflow reads JSON data "
                         "(content-type application/json)",
                         "not a CloudEvent: no specversion in the value (structured mode) and no ce_specversion "
                         "header (binary mode)"});
}

TEST_CASE("a malformed record too large to copy into a dead letter goes there without its value") {
    // The dead letter is the record plus two headers; when that exceeds message.max.bytes it can
    // never be produced, and a consumer that kept trying would stop there for good.
    ConsumerSetup setup{"itest-dlq-large"};
    auto& options = setup.options;
    options.properties = {{"message.max.bytes", "2000"}};
    auto good = TestEvent({{"n", 1}});
    good.id = outbox::NewUuidV7();
    {
        using namespace outbox::detail;
        // Idempotent, so a retried request cannot put the second record first (the check of the
        // origin below saw "@1" once with a plain producer).
        auto producer =
            MakeClient(RD_KAFKA_PRODUCER,
                       MakeProducerConf({{"bootstrap.servers", setup.brokers}, {"enable.idempotence", "true"}}));
        REQUIRE(Produce(producer.get(), setup.topic, "k", std::string(1990, 'x'), nullptr, nullptr) == 0);
        REQUIRE(Produce(producer.get(), setup.topic, "k", good.ToJson().dump(), nullptr, nullptr) == 0);
        REQUIRE(rd_kafka_flush(producer.get(), 30'000) == RD_KAFKA_RESP_ERR_NO_ERROR);
    }
    outbox::Consumer consumer{*setup.pool, options, ApplyEffect};
    consumer.Start();
    const auto& m = consumer.Metrics();
    CHECK(WaitFor([&] { return m.dead_lettered.load() == 1 && m.applied.load() == 1; }, std::chrono::seconds(60)));
    consumer.Stop();
    CHECK(Count(setup.db.Url(), "SELECT count(*) FROM effect WHERE applied = 1") == 1);
    const auto dlq = testing::ReadTopic(setup.brokers, setup.topic + ".dlq", 1, std::chrono::seconds(30));
    REQUIRE(dlq.size() == 1);
    CHECK(dlq[0].value.empty());
    CHECK(dlq[0].headers.at("sagaflow-dlq-value-omitted") == "1990");
    CHECK(dlq[0].headers.at("sagaflow-dlq-reason") == "not JSON");
    const std::string origin = dlq[0].headers.at("sagaflow-dlq-origin");  // <topic>/<partition>@<offset>
    CHECK(origin.rfind(setup.topic + "/", 0) == 0);
    CHECK(origin.substr(origin.size() - 2) == "@0");  // the first record of its partition
}

TEST_CASE("a consumer fenced out of its group (static membership) replaces its Kafka client and goes on") {
    // A static member can be fenced by a newer join under its group.instance.id — its own
    // abandoned JoinGroup after a coordinator stall, or a second process. librdkafka then raises
    // a fatal error and that client never consumes again; the consumer must replace it.
    ConsumerSetup setup{"itest-fenced"};
    const std::string& brokers = setup.brokers;
    const std::string& topic = setup.topic;
    const std::string url = setup.db.Url();
    store::ConnectionPool& pool = *setup.pool;
    outbox::ConsumerOptions& options = setup.options;
    using namespace outbox::detail;
    auto producer = MakeClient(RD_KAFKA_PRODUCER, MakeConf({{"bootstrap.servers", brokers}}));
    std::vector<std::string> ids;
    const auto produce = [&](int count) {
        for (int i = 0; i < count; ++i) {
            auto event = TestEvent({{"n", ids.size()}});
            event.id = outbox::NewUuidV7();
            ids.push_back(event.id);
            REQUIRE(
                Produce(producer.get(), topic, "key-" + std::to_string(i), event.ToJson().dump(), nullptr, nullptr) ==
                0);
        }
        REQUIRE(rd_kafka_flush(producer.get(), 30'000) == RD_KAFKA_RESP_ERR_NO_ERROR);
    };

    const std::string instance = UniqueName("instance");
    options.properties = {{"group.instance.id", instance}, {"session.timeout.ms", "6000"}};
    outbox::Consumer consumer{pool, options, ApplyEffect};
    consumer.Start();
    const auto& m = consumer.Metrics();
    produce(5);
    REQUIRE(WaitFor([&] { return m.applied.load() == 5; }, std::chrono::seconds(60)));

    {
        // A newer member under the same instance id takes the assignment; the consumer's next
        // heartbeat is answered FENCED_INSTANCE_ID.
        auto rival = MakeClient(RD_KAFKA_CONSUMER,
                                MakeConf({{"bootstrap.servers", brokers},
                                          {"group.id", options.group_id},
                                          {"group.instance.id", instance},
                                          {"session.timeout.ms", "6000"},
                                          {"partition.assignment.strategy", "cooperative-sticky"},  // as the group's
                                          {"enable.auto.commit", "false"}}));
        rd_kafka_poll_set_consumer(rival.get());
        TopicPartitionListPtr topics{rd_kafka_topic_partition_list_new(1)};
        rd_kafka_topic_partition_list_add(topics.get(), topic.c_str(), RD_KAFKA_PARTITION_UA);
        REQUIRE(rd_kafka_subscribe(rival.get(), topics.get()) == RD_KAFKA_RESP_ERR_NO_ERROR);
        const bool assigned = WaitFor(
            [&] {
                MessagePtr message{rd_kafka_consumer_poll(rival.get(), 100)};
                rd_kafka_topic_partition_list_t* assignment = nullptr;
                if (rd_kafka_assignment(rival.get(), &assignment) != RD_KAFKA_RESP_ERR_NO_ERROR) return false;
                const bool any = assignment->cnt > 0;
                rd_kafka_topic_partition_list_destroy(assignment);
                return any;
            },
            std::chrono::seconds(60));
        REQUIRE(assigned);
        // The rival leaves without a LeaveGroup (static members do not send one) and is gone.
        rd_kafka_consumer_close(rival.get());
    }
    CHECK(WaitFor([&] { return m.restarts.load() >= 1; }, std::chrono::seconds(60)));

    // Events produced after the fencing are applied, once each, by the replaced client.
    produce(20);
    CHECK(WaitFor([&] { return m.applied.load() == 25; }, std::chrono::seconds(90)));
    consumer.Stop();
    CHECK(m.applied.load() == 25);
    CHECK(Count(url, "SELECT count(*) FROM effect WHERE applied = 1") == 25);
}

TEST_CASE("a batch that fails and cannot be rewound is read again by a new client, not skipped") {
    // The seek back to a failed batch is local to librdkafka (no broker request, so no broker
    // fault can fail it): the test switch makes it report failure without seeking, as a seek
    // that failed would leave the client positioned after the batch.
    ConsumerSetup setup{"itest-rewind"};
    using namespace outbox::detail;
    auto producer = MakeClient(RD_KAFKA_PRODUCER, MakeConf({{"bootstrap.servers", setup.brokers}}));
    const auto produce = [&](int count) {
        for (int i = 0; i < count; ++i) {
            auto event = TestEvent({{"n", i}});
            event.id = outbox::NewUuidV7();
            REQUIRE(
                Produce(
                    producer.get(), setup.topic, "key-" + std::to_string(i), event.ToJson().dump(), nullptr, nullptr) ==
                0);
        }
        REQUIRE(rd_kafka_flush(producer.get(), 30'000) == RD_KAFKA_RESP_ERR_NO_ERROR);
    };
    std::atomic<int> calls{0};
    outbox::Consumer consumer{
        *setup.pool, setup.options, [&](pqxx::transaction_base& tx, const outbox::InboundEvent& in) {
            // The first batch fails as a database that cannot take work does.
            if (++calls == 1) throw pqxx::serialization_failure("injected: the first batch fails");
            ApplyEffect(tx, in);
        }};
    produce(10);
    ::setenv("SAGAFLOW_TEST_FAULT", "rewind", 1);
    consumer.Start();
    REQUIRE(WaitFor([&] { return calls.load() >= 1; }, std::chrono::seconds(60)));
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the rewind has been tried
    ::unsetenv("SAGAFLOW_TEST_FAULT");
    produce(10);  // later batches: their offsets must not commit past the failed one
    const auto& m = consumer.Metrics();
    CHECK(
        WaitFor([&] { return Count(setup.db.Url(), "SELECT count(*) FROM effect") == 20; }, std::chrono::seconds(60)));
    consumer.Stop();
    CHECK(Count(setup.db.Url(), "SELECT count(*) FROM effect") == 20);
    CHECK(Count(setup.db.Url(), "SELECT count(*) FROM effect WHERE applied <> 1") == 0);
    CHECK(m.restarts.load() >= 1);
}

TEST_CASE("the relay killed with SIGKILL 20 times: every row is published, duplicates keep their id, effects once") {
    const char* cli = std::getenv("SAGAFLOW_CLI");
    REQUIRE_MESSAGE(cli != nullptr, "SAGAFLOW_CLI is not set: run this test through ctest");
    ScratchDatabase db;
    store::MigrateBlocking(db.Url(), store::BuiltinMigrations());
    const std::string brokers = KafkaBrokers();
    const std::string topic = UniqueName("killed");
    testing::CreateTopic(brokers, topic, 4);
    pqxx::connection writer{db.Url()};
    const auto write = [&](int rows) {
        for (int n = 0; n < rows; n += 50) {
            pqxx::work tx{writer};
            for (int j = 0; j < 50; ++j)
                outbox::Enqueue(tx, topic, "k" + std::to_string(j % 16), TestEvent({{"j", j}}));
            tx.commit();
        }
    };
    write(3000);
    const auto published = [&] {
        return Count(db.Url(), "SELECT count(*) FROM outbox WHERE published_at IS NOT NULL");
    };
    std::mt19937 rng{20261202};
    int kills = 0;
    for (int round = 0; round < 20; ++round) {
        const pid_t pid = fork();
        REQUIRE(pid >= 0);
        if (pid == 0) {
            freopen("/dev/null", "w", stderr);
            execl(cli, cli, "relay", "--db", db.Url().c_str(), "--brokers", brokers.c_str(), nullptr);
            _exit(127);
        }
        write(200);  // publishing and writing at once
        // Kill while it publishes: once this incarnation has marked rows, at a random moment.
        const long long before = published();
        WaitFor([&] { return published() > before; }, std::chrono::seconds(15));
        std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 300));
        kills += kill(pid, SIGKILL) == 0 ? 1 : 0;
        int status = 0;
        waitpid(pid, &status, 0);
        CHECK(WIFSIGNALED(status));
    }
    CHECK(kills == 20);
    const long long total = Count(db.Url(), "SELECT count(*) FROM outbox");
    CHECK(total == 7000);
    CHECK(Count(db.Url(), "SELECT count(*) FROM outbox WHERE published_at IS NOT NULL") >
          0);  // the kills let work through
    {
        outbox::Relay relay{RelayFor(db.Url())};
        relay.Start();
        CHECK(WaitFor([&] { return Count(db.Url(), "SELECT count(*) FROM outbox WHERE published_at IS NULL") == 0; },
                      std::chrono::seconds(120)));
        relay.Stop();
    }
    const auto records = testing::ReadTopic(brokers, topic, 0, std::chrono::seconds(120));
    const auto stream = testing::AuditEventStream(records);
    CHECK(stream.changed_duplicates == 0);  // a resend is the same event: same id, same bytes
    const int duplicates = stream.duplicates;
    const auto& value_of = stream.value_of;
    CHECK(value_of.size() == static_cast<std::size_t>(total));
    MESSAGE("records on the topic: " << records.size() << ", duplicates from kills: " << duplicates);
    pqxx::connection check{db.Url()};
    {
        pqxx::read_transaction tx{check};
        std::set<std::string> outbox_ids;
        for (const auto& row : tx.exec("SELECT event_id::text FROM outbox"))
            outbox_ids.insert(row[0].as<std::string>());
        std::set<std::string> topic_ids;
        for (const auto& [id, unused] : value_of) topic_ids.insert(id);
        CHECK(outbox_ids == topic_ids);
    }
    // A consumer through the inbox applies each event exactly once.
    {
        pqxx::work tx{check};
        tx.exec("CREATE TABLE effect (event_id uuid PRIMARY KEY, applied int NOT NULL)");
        tx.commit();
    }
    store::ConnectionPool pool{{.url = db.Url(),
                                .size = 2,
                                .on_connect = [](auto& c) { store::PrepareInbox(c); },
                                .on_disconnect = {},
                                .after_job = {}}};
    outbox::ConsumerOptions options;
    options.brokers = brokers;
    options.group_id = UniqueName("group");
    options.topics = {topic};
    options.inbox_name = "after-kills";
    outbox::Consumer consumer{pool, options, [](pqxx::transaction_base& tx, const outbox::InboundEvent& in) {
                                  tx.exec_params(
                                      "INSERT INTO effect VALUES ($1::uuid, 1) ON CONFLICT (event_id) DO "
                                      "UPDATE SET applied = effect.applied + 1",
                                      in.event.id);
                              }};
    consumer.Start();
    CHECK(WaitFor([&] { return consumer.Metrics().consumed.load() >= records.size(); }, std::chrono::seconds(120)));
    consumer.Stop();
    CHECK(Count(db.Url(), "SELECT count(*) FROM effect") == total);
    CHECK(Count(db.Url(), "SELECT count(*) FROM effect WHERE applied <> 1") == 0);
    CHECK(consumer.Metrics().duplicates.load() == static_cast<std::uint64_t>(duplicates));
}

TEST_CASE("a partition where a group has committed nothing counts as read up to its log start") {
    using namespace outbox::detail;
    using Read = outbox::GroupProgress::Read;
    const std::string brokers = KafkaBrokers();
    const std::string topic = UniqueName("progress");
    testing::CreateTopic(brokers, topic, 2);
    // Three records in partition 1, two in partition 0; then retention-like removal of partition
    // 1's first two, so its log starts at offset 2.
    auto producer = MakeClient(RD_KAFKA_PRODUCER, MakeConf({{"bootstrap.servers", brokers}}));
    rd_kafka_topic_t* handle = rd_kafka_topic_new(producer.get(), topic.c_str(), nullptr);
    char value[] = "x";
    for (const auto& [partition, n] : std::vector<std::pair<int, int>>{{0, 2}, {1, 3}}) {
        for (int i = 0; i < n; ++i) {
            REQUIRE(rd_kafka_produce(handle, partition, RD_KAFKA_MSG_F_COPY, value, 1, nullptr, 0, nullptr) == 0);
        }
    }
    rd_kafka_topic_destroy(handle);
    REQUIRE(rd_kafka_flush(producer.get(), 30'000) == RD_KAFKA_RESP_ERR_NO_ERROR);
    {
        TopicPartitionListPtr before{rd_kafka_topic_partition_list_new(1)};
        rd_kafka_topic_partition_list_add(before.get(), topic.c_str(), 1)->offset = 2;
        rd_kafka_DeleteRecords_t* request = rd_kafka_DeleteRecords_new(before.get());
        QueuePtr queue{rd_kafka_queue_new(producer.get())};
        rd_kafka_DeleteRecords(producer.get(), &request, 1, nullptr, queue.get());
        rd_kafka_DeleteRecords_destroy(request);
        rd_kafka_event_t* result = rd_kafka_queue_poll(queue.get(), 30'000);
        REQUIRE(result != nullptr);
        const auto err = rd_kafka_event_error(result);
        rd_kafka_event_destroy(result);
        REQUIRE(err == RD_KAFKA_RESP_ERR_NO_ERROR);
    }

    // The group commits partition 0 up to its end; nothing on partition 1.
    const std::string group = UniqueName("progress-group");
    const auto commit = [&](int partition, std::int64_t offset) {
        CommitOffset(brokers, group, topic, partition, offset);
    };
    commit(0, 2);

    outbox::GroupProgress progress(brokers, {}, std::chrono::milliseconds(100));
    const std::string silent = UniqueName("silent-group");
    progress.Follow(group, topic);
    progress.Follow(silent, topic);
    progress.Start();
    REQUIRE(
        WaitFor([&] { return progress.CommandRead(group, topic, 0, 2).read == Read::kYes; }, std::chrono::seconds(30)));

    CHECK(progress.CommandRead(group, topic, 0, 3).read == Read::kNo);
    // Partition 1: the first record left is reached, the ones before it are gone, the next waits.
    CHECK(progress.CommandRead(group, topic, 1, 2).read == Read::kYes);
    CHECK(progress.CommandRead(group, topic, 1, 0).read == Read::kYes);
    CHECK(progress.CommandRead(group, topic, 1, 3).read == Read::kNo);
    // A group that has committed nothing on the topic at all may not be a sagaflow group: unknown.
    REQUIRE(WaitFor([&] { return progress.CommandRead(silent, topic, 1, 2).read != Read::kNotYet; },
                    std::chrono::seconds(30)));
    const auto silent_answer = progress.CommandRead(silent, topic, 1, 2);
    CHECK(silent_answer.read == Read::kUnknown);
    CHECK(silent_answer.why.find("committed nothing") != std::string::npos);

    // Its first commit on partition 1 moves it on.
    commit(1, 4);
    CHECK(
        WaitFor([&] { return progress.CommandRead(group, topic, 1, 3).read == Read::kYes; }, std::chrono::seconds(30)));
    CHECK(progress.CommandRead(group, topic, 1, 5).read == Read::kNo);
    progress.Stop();
}

TEST_CASE("a group's committed offsets are kept as far back as its longest step timeout needs, not longer") {
    using namespace outbox::detail;
    using Read = outbox::GroupProgress::Read;
    const std::string brokers = KafkaBrokers();
    const std::string topic = UniqueName("horizon");
    testing::CreateTopic(brokers, topic, 1);
    const std::string brief = UniqueName("brief-group");      // asked about no step timeout
    const std::string patient = UniqueName("patient-group");  // asked about a step of 10 s
    const auto commit = [&](const std::string& group, std::int64_t offset) {
        CommitOffset(brokers, group, topic, 0, offset);
    };
    // Offsets seen are kept 1 s beyond a group's horizon.
    outbox::GroupProgress progress(brokers, {}, std::chrono::milliseconds(100), std::chrono::seconds(1));
    const auto reached = [&](const std::string& group, std::int64_t offset) {
        return WaitFor([&] { return progress.CommandRead(group, topic, 0, offset).read == Read::kYes; },
                       std::chrono::seconds(30));
    };
    progress.Follow(brief, topic);
    progress.Follow(patient, topic, false, std::chrono::seconds(10));
    for (const auto& group : {brief, patient}) commit(group, 1);
    progress.Start();
    REQUIRE(reached(brief, 1));
    REQUIRE(reached(patient, 1));
    std::this_thread::sleep_for(std::chrono::milliseconds(2500));
    for (const auto& group : {brief, patient}) commit(group, 2);
    REQUIRE(reached(brief, 2));
    REQUIRE(reached(patient, 2));

    // The first commit was seen over 2.5 s ago: within the patient group's 11 s, its answer is
    // exact; beyond the brief group's 1 s, it was dropped, and the answer comes from the later
    // commit — later than the read, never earlier.
    CHECK(progress.CommandRead(patient, topic, 0, 1).ago >= std::chrono::milliseconds(2500));
    const auto brief_answer = progress.CommandRead(brief, topic, 0, 1);
    CHECK(brief_answer.read == Read::kYes);
    CHECK(brief_answer.ago < std::chrono::milliseconds(1500));
    progress.Stop();
}

// A full disk under PostgreSQL: every write that needs a new page fails with SQLSTATE 53100 while
// sagas are in flight. That is the environment's fault, not a message's: no consumer may
// dead-letter a command or a reply for it, the HTTP API answers 503 with Retry-After (nothing
// stored, the same key works later), and once space is freed every saga completes as if nothing
// had happened. Before this, a consumer tried a failing record five times in under a second and
// moved it to the .dlq topic.
#include <doctest/doctest.h>
#include <pwd.h>
#include <unistd.h>

#include <filesystem>
#include <pqxx/pqxx>
#include <thread>

#include "tests/support/example_rig.hpp"
#include "tests/support/http_client.hpp"
#include "tests/support/kafka_read.hpp"
#include "tests/support/own_services.hpp"
#include "tests/support/services.hpp"

using namespace sagaflow;
using testing::ExampleRig;
using testing::WaitFor;

namespace {

// A tmpfs of `megabytes` owned by PostgreSQL's server user (scripts/pg runs it as postgres when
// started by root), unmounted at the end. Mounting needs root, as CI runs.
class SmallVolume {
  public:
    explicit SmallVolume(int megabytes) : path_("/tmp/sagaflow-" + testing::UniqueName("small-volume")) {
        std::filesystem::create_directories(path_);
        const passwd* server = getpwnam("postgres");
        REQUIRE_MESSAGE(server != nullptr, "no postgres user: scripts/pg creates it when run as root");
        const std::string mount = "mount -t tmpfs -o size=" + std::to_string(megabytes) +
                                  "m,mode=0700,uid=" + std::to_string(server->pw_uid) +
                                  ",gid=" + std::to_string(server->pw_gid) + " tmpfs " + path_;
        mounted_ = std::system(mount.c_str()) == 0;
        REQUIRE_MESSAGE(mounted_, "cannot mount a tmpfs (" << mount << "): this test needs root");
    }
    ~SmallVolume() {
        if (mounted_) static_cast<void>(std::system(("umount -l " + path_).c_str()));
        std::error_code ignored;
        std::filesystem::remove_all(path_, ignored);
    }
    SmallVolume(const SmallVolume&) = delete;
    SmallVolume& operator=(const SmallVolume&) = delete;
    const std::string& Path() const { return path_; }

  private:
    std::string path_;
    bool mounted_ = false;
};

// Fills the volume with committed chunks until PostgreSQL answers disk_full, the chunks shrinking
// so the last pages go too. Returns the rows written.
long long FillVolume(const std::string& url) {
    pqxx::connection conn{url};
    {
        pqxx::work tx{conn};
        tx.exec("CREATE TABLE filler (a bigint, b bigint, c bigint, d bigint) TABLESPACE small");
        tx.commit();
    }
    long long rows = 0;
    for (long long chunk = 100'000; chunk >= 1;) {
        try {
            pqxx::work tx{conn};
            tx.exec("INSERT INTO filler SELECT g, g, g, g FROM generate_series(1, " + std::to_string(chunk) + ") g");
            tx.commit();
            rows += chunk;
        } catch (const pqxx::sql_error& e) {
            REQUIRE_MESSAGE(e.sqlstate() == "53100", e.what());
            chunk /= 10;
        }
    }
    return rows;
}

}  // namespace

TEST_CASE("a full disk under PostgreSQL stalls the sagas; freed, every one completes and nothing is dead-lettered") {
    if (geteuid() != 0) {
        MESSAGE("SKIPPED: mounting the small volume needs root (CI runs as root)");
        return;
    }
    SmallVolume volume{64};
    testing::OwnPostgres pg;
    {
        pqxx::connection conn{pg.Url()};
        pqxx::nontransaction tx{conn};  // CREATE TABLESPACE runs outside a transaction block
        tx.exec("CREATE TABLESPACE small LOCATION '" + volume.Path() + "'");
    }
    ExampleRig rig{testing::KafkaBrokers(), pg.Url(), true};
    auto engine = rig.SpawnEngine("engine-1", {}, {"--http", "127.0.0.1:0"});
    auto order = rig.SpawnOrderService();
    auto payment = rig.SpawnPaymentService();
    const std::string engine_log = rig.LogDir() + "/engine-1.log";
    const int port = testing::WaitForHttpPort(engine_log, std::chrono::seconds(60));
    REQUIRE_MESSAGE(port != 0, testing::ReadFile(engine_log));
    // The services have created their tables once they say they run.
    REQUIRE(WaitFor(
        [&] {
            return testing::ReadFile(rig.LogDir() + "/order.log").find(": running") != std::string::npos &&
                   testing::ReadFile(rig.LogDir() + "/payment.log").find(": running") != std::string::npos;
        },
        std::chrono::seconds(60)));

    // The services' tables (inbox, step records, outbox, orders, payments) and the HTTP API's
    // idempotency records move, still empty, to the small volume: their first row needs a page
    // there. The WAL, the catalogs and the engine's saga tables stay on the large one: a full data
    // volume under the participants, not a crash.
    testing::Execute(pg.Url(),
                     "DO $$ DECLARE r record; BEGIN "
                     "FOR r IN SELECT schemaname, tablename FROM pg_tables WHERE schemaname IN ('orders', 'payments') "
                     "OR tablename = 'idempotency_record' LOOP "
                     "EXECUTE format('ALTER TABLE %I.%I SET TABLESPACE small', r.schemaname, r.tablename); END LOOP; "
                     "FOR r IN SELECT schemaname, indexname FROM pg_indexes WHERE schemaname IN ('orders', 'payments') "
                     "OR tablename = 'idempotency_record' LOOP "
                     "EXECUTE format('ALTER INDEX %I.%I SET TABLESPACE small', r.schemaname, r.indexname); END LOOP; "
                     "END $$");
    const long long filler_rows = FillVolume(pg.Url());
    MESSAGE("the volume is full after " << filler_rows << " filler rows");

    // A new saga over HTTP is refused with 503 and Retry-After: its idempotency record has no room.
    const std::string refused_key = "refused-1";
    const auto post = [&](const std::string& key) {
        return testing::HttpRequest(port,
                                    "POST",
                                    "/v1/sagas/order-payment",
                                    {{"Idempotency-Key", key}, {"Content-Type", "application/json"}},
                                    ExampleRig::Input(key, "25.00").dump());
    };
    const auto refused = post(refused_key);
    REQUIRE_MESSAGE(refused.status == 503, refused.status << " " << refused.body);
    CHECK(refused.Header("retry-after") == "5");
    CHECK(refused.Json()["type"].get<std::string>().find("database-unavailable") != std::string::npos);
    CHECK(refused.Json()["detail"].get<std::string>().find("out of disk space") != std::string::npos);

    // Thirty sagas started in process (the engine's own tables have room): their commands reach
    // services that cannot write a row.
    std::vector<std::string> started;
    {
        auto front = rig.FrontEnd();
        for (int i = 0; i < 30; ++i) {
            const std::string key = "inflight-" + std::to_string(i);
            REQUIRE(front->StartSaga("order-payment", ExampleRig::Input(key, "25.00"), key).Accepted());
            started.push_back(key);
        }
    }

    // Held full well past a consumer's old give-up point (five attempts in under a second) and
    // past the first step timeouts.
    std::this_thread::sleep_for(std::chrono::seconds(15));
    CHECK(engine->Running());
    CHECK(order->Running());
    CHECK(payment->Running());
    const std::string logs = testing::ReadFile(engine_log) + testing::ReadFile(rig.LogDir() + "/order.log") +
                             testing::ReadFile(rig.LogDir() + "/payment.log");
    CHECK(logs.find("the database is out of disk space (SQLSTATE 53100") != std::string::npos);
    CHECK(logs.find("the batch is kept and read again") != std::string::npos);

    testing::Execute(pg.Url(), "DROP TABLE filler");  // space again
    const auto retried = post(refused_key);           // the refused request, as its client retries it
    CHECK(retried.status == 201);
    if (retried.status == 201) started.push_back(refused_key);
    REQUIRE_MESSAGE(rig.WaitQuiet(std::chrono::seconds(180)),
                    "open sagas: " << rig.Open() << "\nengine log:\n"
                                   << testing::ReadFile(engine_log));

    CHECK(testing::Count(pg.Url(), "SELECT count(*) FROM saga_instance WHERE status = 'completed'") ==
          static_cast<long long>(started.size()));
    CHECK(testing::Count(pg.Url(), "SELECT count(*) FROM saga_instance WHERE status <> 'completed'") == 0);
    CHECK(testing::Count(pg.Url(), "SELECT count(*) FROM payments.payment") == static_cast<long long>(started.size()));
    for (const auto& topic :
         {rig.OrderName() + ".commands.dlq", rig.PaymentName() + ".commands.dlq", rig.Replies() + ".dlq"}) {
        CHECK_MESSAGE(testing::ReadTopic(rig.Brokers(), topic, 0, std::chrono::seconds(10)).empty(), topic);
    }
    const auto audit = rig.Audit();
    CHECK_MESSAGE(audit.Ok(), audit.Summary());
}

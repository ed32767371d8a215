// The HTTP API through a real HTTP client: the Idempotency-Key protocol, the saga endpoints,
// operator endpoints, metrics and health, authentication, and malformed requests.
#include <doctest/doctest.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>

#include <array>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <fstream>
#include <future>
#include <pqxx/pqxx>
#include <set>
#include <thread>

#include "core/canonical.hpp"
#include "engine/engine.hpp"
#include "engine/repository/saga_store.hpp"
#include "tests/support/http_client.hpp"
#include "tests/support/saga_rig.hpp"
#include "tests/support/services.hpp"
#include "tools/child_process.hpp"

using namespace sagaflow;
using testing::Count;
using testing::HttpRequest;
using testing::HttpResult;
using testing::RawRequest;
using testing::Rig;
using testing::WaitFor;

namespace {

std::unique_ptr<Engine> HttpEngine(const Rig& rig,
                                   std::map<std::string, std::string> tokens = {},
                                   int max_connections = 256,
                                   const std::string& step_timeout = "2s") {
    auto config = rig.Config();
    config.http.enabled = true;
    config.http.port = 0;
    config.http.io_timeout = std::chrono::seconds(3);
    config.http.tokens = std::move(tokens);
    config.http.max_connections = max_connections;
    auto engine = std::make_unique<Engine>(config);
    engine->RegisterDefinition(rig.Yaml(1, "Notify.v1", step_timeout), "itest.yaml");
    engine->Start();
    REQUIRE(engine->HttpPort() > 0);
    return engine;
}

HttpResult Post(int port, const std::string& key, const std::string& body, std::map<std::string, std::string> h = {}) {
    h["Content-Type"] = "application/json";
    if (!key.empty()) h["Idempotency-Key"] = key;
    return HttpRequest(port, "POST", "/v1/sagas/itest-saga", h, body);
}

// Holds the saga rows that starts with these keys will insert: an uncommitted row with the same
// (saga_type, idempotency_key) makes such a start wait at its saga_instance insert, inside its
// transaction, after it has claimed its key.
void HoldStarts(pqxx::work& hold, const std::vector<std::string>& keys) {
    for (const auto& key : keys) {
        hold.exec_params(
            "INSERT INTO saga_instance (saga_id, saga_type, definition_version, definition_hash, status, input, "
            "idempotency_key) VALUES (gen_random_uuid(), 'itest-saga', 1, 'held', 'running', '{}', $1)",
            key);
    }
}

// Whether `count` starts are waiting at a lock inside their transaction (HoldStarts), within 10 s.
bool StartsWaitingAtLock(const Rig& rig, int count) {
    return WaitFor(
        [&] {
            return Count(rig.db.Url(),
                         "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE "
                         "'%INSERT INTO saga_instance%'") == count;
        },
        std::chrono::seconds(10));
}

std::string ProblemType(const HttpResult& r) {
    CHECK(r.Header("content-type") == "application/problem+json");
    const auto body = r.Json();
    CHECK(body["status"] == r.status);
    CHECK(body.contains("title"));
    CHECK(body.contains("detail"));
    const std::string type = body.value("type", "");
    return type.substr(type.rfind('/') + 1);
}

}  // namespace

TEST_CASE("Idempotency-Key: required; first request starts; same body replays; other body 409; 422 lists fields") {
    Rig rig;
    auto participant = rig.Participant(testing::Default);
    auto engine = HttpEngine(rig);
    const int port = engine->HttpPort();

    const auto missing = Post(port, "", R"({"item":"a"})");
    CHECK(missing.status == 400);
    CHECK(ProblemType(missing) == "idempotency-key-missing");
    CHECK(ProblemType(Post(port, std::string(256, 'k'), R"({"item":"a"})")) == "idempotency-key-invalid");
    CHECK(ProblemType(Post(port, "has space", R"({"item":"a"})")) == "idempotency-key-invalid");

    const auto first = Post(port, "order-1", R"({"item": "a", "mode": ""})");
    REQUIRE(first.status == 201);
    const auto saga_id = first.Json()["sagaId"].get<std::string>();
    CHECK(first.Json()["status"] == "running");
    CHECK(first.Json()["links"]["self"] == "/v1/sagas/" + saga_id);
    CHECK(first.Header("location") == "/v1/sagas/" + saga_id);
    CHECK(first.Header("idempotent-replayed").empty());

    // The same body written differently (key order, whitespace) is the same command.
    const auto replay = Post(port, "order-1", "{ \"mode\":\"\",\n  \"item\":\"a\" }");
    CHECK(replay.status == 201);
    CHECK(replay.Json()["sagaId"] == saga_id);
    CHECK(replay.Json()["links"] == first.Json()["links"]);
    CHECK(replay.Header("idempotent-replayed") == "true");
    CHECK(replay.Header("location") == "/v1/sagas/" + saga_id);  // the first answer, headers included
    // A replay answers the saga's status now, not the one it had when it started.
    REQUIRE(WaitFor(
        [&] { return Count(rig.db.Url(), "SELECT count(*) FROM saga_instance WHERE status = 'completed'") == 1; },
        std::chrono::seconds(30)));
    const auto later = Post(port, "order-1", R"({"item": "a", "mode": ""})");
    CHECK(later.status == 201);
    CHECK(later.Json()["status"] == "completed");

    const auto reused = Post(port, "order-1", R"({"item": "b"})");
    CHECK(reused.status == 409);
    CHECK(ProblemType(reused) == "idempotency-key-reused");

    const auto invalid = Post(port, "order-2", R"({"failAt": 3, "mode": false})");
    CHECK(invalid.status == 422);
    CHECK(ProblemType(invalid) == "invalid-input");
    CHECK(invalid.Json()["errors"].size() == 3);  // item missing, failAt and mode of the wrong type

    // Stored: the canonical body's hash, the status and the body, with the saga; one saga in all.
    pqxx::connection conn{rig.db.Url()};
    pqxx::read_transaction tx{conn};
    const auto record = tx.exec1(
        "SELECT command_hash, state, http_status, response::text, saga_id::text, expires_at > now() + interval '47 "
        "hours' FROM idempotency_record WHERE idempotency_key = 'order-1'");
    CHECK(record[0].as<std::string>() == detail::CanonicalHash(nlohmann::json{{"item", "a"}, {"mode", ""}}));
    CHECK(record[1].as<std::string>() == "completed");
    CHECK(record[2].as<int>() == 201);
    CHECK(nlohmann::json::parse(record[3].as<std::string>()) == first.Json());
    CHECK(record[4].as<std::string>() == saga_id);
    CHECK(record[5].as<bool>());
    CHECK(tx.exec1("SELECT count(*) FROM saga_instance")[0].as<long long>() == 1);
    CHECK(tx.exec1("SELECT count(*) FROM idempotency_record")[0].as<long long>() == 1);  // 4xx not stored
    // Counted once: replays and a reused key start nothing.
    CHECK(engine->Metrics().sagas_started == 1);
}

TEST_CASE("a key whose first request is in progress gets 409 request-in-progress; a dead claim is taken over") {
    Rig rig;
    auto engine = HttpEngine(rig);
    const int port = engine->HttpPort();
    const std::string body = R"({"item":"x"})";
    const auto hash = detail::CanonicalHash(nlohmann::json::parse(body));
    {
        // Another server is processing "busy" right now, and "dead" was claimed 31 s ago by a
        // server that died.
        pqxx::connection conn{rig.db.Url()};
        pqxx::work tx{conn};
        tx.exec_params(
            "INSERT INTO idempotency_record (scope, idempotency_key, command_hash, state, expires_at) "
            "VALUES ('saga:itest-saga', 'busy', $1, 'in_progress', now() + interval '48 hours')",
            hash);
        tx.exec_params(
            "INSERT INTO idempotency_record (scope, idempotency_key, command_hash, state, expires_at, "
            "created_at) VALUES ('saga:itest-saga', 'dead', $1, 'in_progress', now() + interval '48 "
            "hours', now() - interval '31 seconds')",
            hash);
        tx.commit();
    }
    const auto busy = Post(port, "busy", body);
    CHECK(busy.status == 409);
    CHECK(ProblemType(busy) == "request-in-progress");
    CHECK(busy.Header("retry-after") == "1");
    CHECK(Post(port, "dead", body).status == 201);
}

TEST_CASE(
    "while a start is in flight its key gets 409 at once, other requests are served; afterwards the stored answer") {
    Rig rig;
    auto engine = HttpEngine(rig);
    const int port = engine->HttpPort();
    std::future<HttpResult> first, second, other_key;
    // Hold the key's saga row: the start then waits inside its transaction, after it has claimed its
    // key. (Declared after the futures: if a check below fails, the hold ends before they are
    // waited for.)
    pqxx::connection holder{rig.db.Url()};
    pqxx::work hold{holder};
    HoldStarts(hold, {"flight"});
    first = std::async(std::launch::async, [port] { return Post(port, "flight", R"({"item":"f"})"); });
    REQUIRE(StartsWaitingAtLock(rig, 1));
    // The server goes on answering while that request waits in the database.
    second = std::async(std::launch::async, [port] { return Post(port, "flight", R"({"item":"f"})"); });
    REQUIRE(second.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
    const auto busy = second.get();
    CHECK(busy.status == 409);
    CHECK(ProblemType(busy) == "request-in-progress");
    CHECK(busy.Header("retry-after") == "1");
    CHECK(HttpRequest(port, "GET", "/healthz", {}, "").status == 200);
    // Nothing of the start is visible yet: the claim commits with the saga.
    CHECK(Count(rig.db.Url(), "SELECT count(*) FROM idempotency_record") == 0);
    other_key = std::async(std::launch::async, [port] { return Post(port, "flight-2", R"({"item":"g"})"); });
    hold.abort();
    REQUIRE(first.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
    const auto answered = first.get();
    CHECK(answered.status == 201);
    CHECK(other_key.get().status == 201);
    const auto replayed = Post(port, "flight", R"({"item":"f"})");
    CHECK(replayed.status == 201);
    CHECK(replayed.Header("idempotent-replayed") == "true");
    CHECK(replayed.Json()["sagaId"] == answered.Json()["sagaId"]);
    CHECK(ProblemType(Post(port, "flight", R"({"item":"other"})")) == "idempotency-key-reused");
    CHECK(Count(rig.db.Url(), "SELECT count(*) FROM saga_instance") == 2);
    CHECK(Count(rig.db.Url(), "SELECT count(*) FROM idempotency_record WHERE state = 'completed'") == 2);
}

TEST_CASE("requests waiting in the database on every HTTP worker leave the engine its own connections") {
    Rig rig;
    auto engine = HttpEngine(rig);
    const int port = engine->HttpPort();
    const auto before = Post(port, "before", R"({"item":"b"})");
    REQUIRE(before.status == 201);
    const std::string saga_id = before.Json()["sagaId"].get<std::string>();
    std::vector<std::future<HttpResult>> held;
    {
        // (Declared before the hold: should a check below fail, the hold ends before it is waited for.)
        std::future<std::optional<SagaView>> read;
        // Every worker's start waits at its held saga row (as above), inside its transaction.
        pqxx::connection holder{rig.db.Url()};
        pqxx::work hold{holder};
        const int workers = rig.Config().http.worker_threads;
        for (int i = 0; i < workers; ++i) HoldStarts(hold, {"held-" + std::to_string(i)});
        for (int i = 0; i < workers; ++i) {
            held.push_back(std::async(
                std::launch::async, [port, i] { return Post(port, "held-" + std::to_string(i), R"({"item":"h"})"); }));
        }
        REQUIRE(StartsWaitingAtLock(rig, workers));
        // The engine's own database work (here a read through its API; the reply consumer and the
        // timers alike) gets a connection meanwhile: with the pool no larger than the workers it
        // waited for the hold to end.
        read = std::async(std::launch::async, [&] { return engine->GetSaga(saga_id); });
        REQUIRE(read.wait_for(std::chrono::seconds(5)) == std::future_status::ready);
        const auto saga = read.get();
        REQUIRE(saga.has_value());
        CHECK(saga->saga_id == saga_id);
        hold.abort();
    }
    for (auto& answer : held) CHECK(answer.get().status == 201);
}

TEST_CASE("50 concurrent requests with one key: exactly one saga; the others replay it or are told to wait") {
    Rig rig;
    auto engine = HttpEngine(rig);
    const int port = engine->HttpPort();
    std::vector<std::future<HttpResult>> answers;
    for (int i = 0; i < 50; ++i) {
        answers.push_back(std::async(std::launch::async, [port] { return Post(port, "same-key", R"({"item":"c"})"); }));
    }
    int fresh = 0, replays = 0, in_progress = 0;
    std::set<std::string> ids;
    for (auto& f : answers) {
        const auto r = f.get();
        if (r.status == 201 && r.Header("idempotent-replayed").empty()) {
            ++fresh;
            ids.insert(r.Json()["sagaId"]);
        } else if (r.status == 201) {
            ++replays;
            ids.insert(r.Json()["sagaId"]);
        } else if (r.status == 409 && ProblemType(r) == "request-in-progress") {
            ++in_progress;
        }
    }
    MESSAGE("fresh " << fresh << ", replays " << replays << ", in progress " << in_progress);
    CHECK(fresh == 1);
    CHECK(fresh + replays + in_progress == 50);
    CHECK(ids.size() == 1);
    CHECK(Count(rig.db.Url(), "SELECT count(*) FROM saga_instance") == 1);
}

TEST_CASE("an internal error is not stored: the client's retry with the same key succeeds") {
    Rig rig;
    auto engine = HttpEngine(rig);
    const int port = engine->HttpPort();
    testing::Execute(rig.db.Url(), "ALTER TABLE saga_instance RENAME TO saga_instance_away");
    const auto failed = Post(port, "k", R"({"item":"e"})");
    CHECK(failed.status == 500);
    CHECK(ProblemType(failed) == "internal-error");
    CHECK(failed.body.find("saga_instance") == std::string::npos);  // no internals, no stack trace
    CHECK(Count(rig.db.Url(), "SELECT count(*) FROM idempotency_record") == 0);
    testing::Execute(rig.db.Url(), "ALTER TABLE saga_instance_away RENAME TO saga_instance");
    const auto retried = Post(port, "k", R"({"item":"e"})");
    CHECK(retried.status == 201);
    CHECK(retried.Header("idempotent-replayed").empty());
}

TEST_CASE("reading sagas, paging, operator retry, metrics and health") {
    Rig rig;
    auto participant = rig.Participant(testing::Default);
    auto engine = HttpEngine(rig);
    const int port = engine->HttpPort();
    std::vector<std::string> ids;
    for (int n = 0; n < 5; ++n) {
        ids.push_back(Post(port, "r" + std::to_string(n), nlohmann::json{{"item", "//" + std::to_string(n)}}.dump())
                          .Json()["sagaId"]);
    }
    const auto parked = Post(port, "p", R"({"item":"notify//9"})").Json()["sagaId"].get<std::string>();
    REQUIRE(WaitFor([&] { return rig.Open() == 0; }, std::chrono::seconds(60)));

    const auto one = HttpRequest(port, "GET", "/v1/sagas/" + ids[0]);
    REQUIRE(one.status == 200);
    const auto saga = one.Json();
    CHECK(saga["status"] == "completed");
    CHECK(saga["steps"].size() == 4);
    CHECK(saga["timeline"].front()["kind"] == "started");
    CHECK(saga["data"]["reservation"] == "r-//0");
    CHECK(HttpRequest(port, "GET", "/v1/sagas/01890000-0000-7000-8000-000000000000").status == 404);
    CHECK(HttpRequest(port, "GET", "/v1/sagas/not-an-id").status == 404);

    // Paging: 2 at a time through all completed sagas.
    std::set<std::string> seen;
    std::string cursor;
    int pages = 0;
    do {
        const auto page = HttpRequest(
            port,
            "GET",
            "/v1/sagas?status=completed&type=itest-saga&limit=2" + (cursor.empty() ? "" : "&cursor=" + cursor));
        REQUIRE(page.status == 200);
        const auto body = page.Json();  // iterate a named value, not a temporary's member
        for (const auto& item : body["items"]) seen.insert(item["sagaId"].get<std::string>());
        cursor = body["nextCursor"].is_null() ? "" : body["nextCursor"].get<std::string>();
        ++pages;
    } while (!cursor.empty() && pages < 10);
    CHECK(seen.size() == ids.size());
    CHECK(seen == std::set<std::string>(ids.begin(), ids.end()));
    CHECK(pages == 3);
    CHECK(HttpRequest(port, "GET", "/v1/sagas?status=bogus").status == 400);
    CHECK(HttpRequest(port, "GET", "/v1/sagas?limit=0").status == 400);
    CHECK(HttpRequest(port, "GET", "/v1/sagas?cursor=abc").status == 400);

    // The parked saga resumes on an operator's retry: one more attempt, same command event id.
    CHECK(HttpRequest(port, "GET", "/v1/sagas/" + parked).Json()["status"] == "failed");
    const auto retry = HttpRequest(port, "POST", "/v1/sagas/" + parked + "/retry");
    CHECK(retry.status == 202);
    CHECK(WaitFor(
        [&] {
            const auto s = HttpRequest(port, "GET", "/v1/sagas/" + parked).Json();
            return s["status"] == "failed" && s["timeline"].back()["kind"] == "finished" &&
                   s["steps"].back()["attempt"] == 4;
        },
        std::chrono::seconds(30)));
    std::set<std::string> notify_ids;
    for (const auto& c : participant->Received()) {
        if (c.saga_id == parked && c.step_name == "notify") notify_ids.insert(c.event_id);
    }
    CHECK(notify_ids.size() == 1);
    const auto not_parked = HttpRequest(port, "POST", "/v1/sagas/" + ids[0] + "/retry");
    CHECK(not_parked.status == 409);
    CHECK(ProblemType(not_parked) == "saga-not-parked");

    const auto metrics = HttpRequest(port, "GET", "/metrics");
    CHECK(metrics.status == 200);
    CHECK(metrics.Header("content-type").rfind("text/plain; version=0.0.4", 0) == 0);
    // The gauge counts open and parked sagas only (bounded by the work in flight); finished ones are
    // a counter of this engine's.
    CHECK(metrics.body.find("status=\"completed\"") == std::string::npos);
    const auto finished_at = metrics.body.find("\nsagaflow_sagas_finished_total ");
    REQUIRE(finished_at != std::string::npos);
    CHECK(std::stoll(metrics.body.substr(finished_at + 31)) >= 5);
    CHECK(metrics.body.find("sagaflow_sagas_parked 1") != std::string::npos);
    CHECK(metrics.body.find("sagaflow_step_latency_seconds_count{step=\"reserve\"} 6") != std::string::npos);
    // Measured, from each phase's dispatch to its reply's transaction: more than nothing, less than the test.
    const std::string latency_sum = "sagaflow_step_latency_seconds_sum{step=\"reserve\"} ";
    const auto sum_at = metrics.body.find(latency_sum);
    REQUIRE(sum_at != std::string::npos);
    const double reserve_seconds = std::stod(metrics.body.substr(sum_at + latency_sum.size()));
    CHECK(reserve_seconds > 0.0);
    CHECK(reserve_seconds < 6 * 60.0);
    CHECK(metrics.body.find("sagaflow_outbox_backlog ") != std::string::npos);
    CHECK(metrics.body.find("sagaflow_outbox_oldest_unpublished_seconds ") != std::string::npos);
    CHECK(metrics.body.find("sagaflow_inbox_duplicates_total ") != std::string::npos);
    CHECK(metrics.body.find("sagaflow_relay_errors_total ") != std::string::npos);
    CHECK(HttpRequest(port, "GET", "/healthz").status == 200);
    const auto ready = HttpRequest(port, "GET", "/readyz");
    CHECK(ready.status == 200);
    CHECK(ready.Json() == nlohmann::json{{"postgresql", "up"}, {"kafka", "up"}});
}

TEST_CASE("cancel: the step in flight and the steps before it are compensated; past the pivot it is refused") {
    Rig rig;
    auto participant = rig.Participant(testing::HoldOrDefault);  // "hold-<step>/..." stays in flight
    // Step timeouts far beyond the test: only the cancel can end the held step.
    auto engine = HttpEngine(rig, {}, 256, "5m");
    const int port = engine->HttpPort();
    const auto received = [&](const std::string& saga_id, const std::string& step) {
        return WaitFor(
            [&] {
                for (const auto& c : participant->Received()) {
                    if (c.saga_id == saga_id && c.step_name == step && c.phase == "action") return true;
                }
                return false;
            },
            std::chrono::seconds(30));
    };
    const auto cancel = [&](const std::string& saga_id, const std::string& body = {}) {
        std::map<std::string, std::string> h;
        if (!body.empty()) h["Content-Type"] = "application/json";
        return HttpRequest(port, "POST", "/v1/sagas/" + saga_id + "/cancel", h, body);
    };

    const auto held = Post(port, "c1", R"({"item":"hold-charge/x/1"})").Json()["sagaId"].get<std::string>();
    REQUIRE(received(held, "charge"));
    const auto cancelled = cancel(held, R"({"reason":"customer called"})");
    CHECK(cancelled.status == 202);
    CHECK(cancelled.Json()["status"] == "compensating");
    REQUIRE(WaitFor([&] { return HttpRequest(port, "GET", "/v1/sagas/" + held).Json()["status"] == "compensated"; },
                    std::chrono::seconds(30)));
    // The charge may have taken effect: it is refunded first, then the reservation released.
    CHECK(testing::Sequence(participant->Received(), held) ==
          std::vector<std::string>{"reserve:action", "charge:action", "charge:compensation", "reserve:compensation"});
    int charges = 0;
    for (const auto& c : participant->Received()) {
        if (c.saga_id == held && c.step_name == "charge" && c.phase == "action") ++charges;
    }
    CHECK(charges == 1);  // never resent
    const auto saga = HttpRequest(port, "GET", "/v1/sagas/" + held).Json();
    int entries = 0;
    for (const auto& entry : saga["timeline"]) {
        if (entry["kind"] != "cancelled") continue;
        ++entries;
        CHECK(entry["step"] == "charge");
        CHECK(entry["detail"]["reason"] == "customer called");
    }
    CHECK(entries == 1);
    // Drawn over its definition: the cancelled charge as the step of unknown outcome, both
    // compensations done, the pivot and what follows it never reached. Graphviz accepts the DOT.
    const auto dot = HttpRequest(port, "GET", "/v1/sagas/" + held + "/graph?format=dot");
    REQUIRE(dot.status == 200);
    CHECK(dot.Header("content-type") == "text/vnd.graphviz; charset=utf-8");
    const auto node = [&](const std::string& text, const std::string& id) {
        const auto at = text.find("\n    " + id + " [");
        return at == std::string::npos ? std::string() : text.substr(at + 1, text.find('\n', at + 1) - at - 1);
    };
    CHECK(node(dot.body, "s0").find("fillcolor=\"#c8e6c9\"") != std::string::npos);           // succeeded
    CHECK(node(dot.body, "s1").find("fillcolor=\"#ffe0b2\"") != std::string::npos);           // cancelled
    CHECK(node(dot.body, "c1").find("fillcolor=\"#c8e6c9\"") != std::string::npos);           // refunded
    CHECK(node(dot.body, "c0").find("fillcolor=\"#c8e6c9\"") != std::string::npos);           // released
    CHECK(node(dot.body, "s2").find("fillcolor=\"#ffffff\"") != std::string::npos);           // never reached
    CHECK(node(dot.body, "compensated").find("fillcolor=\"#bbdefb\"") != std::string::npos);  // where it ended
    CHECK(node(dot.body, "completed").find("fillcolor=\"#ffffff\"") != std::string::npos);
    {
        const std::string file = "/tmp/" + testing::UniqueName("graph") + ".dot";
        std::ofstream(file) << dot.body;
        CHECK(std::system(("dot -Tsvg -o /dev/null " + file).c_str()) == 0);
        std::remove(file.c_str());
    }
    const auto mermaid = HttpRequest(port, "GET", "/v1/sagas/" + held + "/graph");
    CHECK(mermaid.status == 200);
    CHECK(mermaid.body.find("    class s1 cancelled\n") != std::string::npos);
    CHECK(mermaid.body.find("    class compensated compensated\n") != std::string::npos);
    CHECK(mermaid.body.find("    class start,s0,c0,c1 succeeded\n") != std::string::npos);
    CHECK(mermaid.body.find("title: itest-saga v1 — saga " + held + ": compensated") != std::string::npos);
    CHECK(ProblemType(HttpRequest(port, "GET", "/v1/sagas/" + held + "/graph?format=png")) == "invalid-query");
    CHECK(HttpRequest(port, "GET", "/v1/sagas/01890000-0000-7000-8000-000000000000/graph").status == 404);
    // `sagaflow show` reads the same from the database alone.
    const auto shown = testing::RunCli("show " + held + " --db '" + rig.db.Url() + "'");
    CHECK(shown.code == 0);
    CHECK(shown.out.find("saga " + held + " · itest-saga v1 · compensated") != std::string::npos);
    CHECK(shown.out.find("  charge               action        cancelled") != std::string::npos);
    CHECK(shown.out.find("cancelled        charge") != std::string::npos);  // the timeline entry
    CHECK(shown.out.find("customer called") != std::string::npos);
    CHECK(testing::RunCli("show " + held + " --format dot --db '" + rig.db.Url() + "'").out == dot.body);
    const auto missing = testing::RunCli("show 01890000-0000-7000-8000-000000000000 --db '" + rig.db.Url() + "'");
    CHECK(missing.code == 1);
    CHECK(missing.err.find("no saga 01890000-0000-7000-8000-000000000000 in this database") != std::string::npos);
    CHECK(testing::RunCli("show nope --db '" + rig.db.Url() + "'").err.find("'nope' is not a saga id") !=
          std::string::npos);

    // Repeated: answered by the state, nothing more happens.
    const auto again = cancel(held);
    CHECK(again.status == 200);
    CHECK(again.Json()["status"] == "compensated");

    // Past the pivot (confirm succeeded, notify in flight): refused, the saga runs on.
    const auto late = Post(port, "c2", R"({"item":"hold-notify/x/2"})").Json()["sagaId"].get<std::string>();
    REQUIRE(received(late, "notify"));
    const auto refused = cancel(late);
    CHECK(refused.status == 409);
    CHECK(ProblemType(refused) == "saga-not-cancellable");
    CHECK(refused.Json()["sagaStatus"] == "running");
    CHECK(refused.Json()["detail"].get<std::string>().find("the pivot and has succeeded") != std::string::npos);
    CHECK(HttpRequest(port, "GET", "/v1/sagas/" + late).Json()["status"] == "running");

    // Bad requests.
    CHECK(ProblemType(cancel("01890000-0000-7000-8000-000000000000")) == "saga-not-found");
    CHECK(cancel("not-an-id").status == 404);
    CHECK(ProblemType(cancel(late, "{reason")) == "malformed-json");
    const auto unknown_field = cancel(late, R"({"reason":"x","force":true})");
    CHECK(unknown_field.status == 422);
    CHECK(unknown_field.Json()["errors"][0]["path"] == "force");
    CHECK(cancel(late, R"({"reason":7})").status == 422);
    CHECK(HttpRequest(port, "POST", "/v1/sagas/" + late + "/cancel", {{"Content-Type", "text/plain"}}, "x").status ==
          415);
    CHECK(HttpRequest(port, "GET", "/v1/sagas/" + late + "/cancel").status == 405);
    CHECK(HttpRequest(port, "GET", "/metrics").body.find("sagaflow_sagas_cancelled_total 1\n") != std::string::npos);
}

TEST_CASE("trace context: the start's traceparent and tracestate ride on every command; an invalid one is dropped") {
    Rig rig;
    auto participant = rig.Participant(testing::Default);
    auto engine = HttpEngine(rig);
    const int port = engine->HttpPort();
    const std::string parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    // Fails at charge: the reservation's compensation is written on a reply, long after the start.
    const auto traced =
        Post(port, "t1", R"({"item":"charge/x/1"})", {{"traceparent", parent}, {"tracestate", "congo=t61"}})
            .Json()["sagaId"]
            .get<std::string>();
    const auto plain =
        Post(port, "t2", R"({"item":"a"})", {{"traceparent", "00-not-a-trace"}, {"tracestate", "congo=t61"}})
            .Json()["sagaId"]
            .get<std::string>();
    REQUIRE(WaitFor([&] { return rig.Open() == 0; }, std::chrono::seconds(60)));
    std::vector<std::string> traced_steps;
    int plain_commands = 0;
    for (const auto& c : participant->Received()) {
        if (c.saga_id == traced) {
            traced_steps.push_back(c.step_name + ":" + c.phase);
            CHECK(c.traceparent == parent);
            CHECK(c.tracestate == "congo=t61");
        } else if (c.saga_id == plain) {
            ++plain_commands;
            CHECK(c.traceparent.empty());
            CHECK(c.tracestate.empty());
        }
    }
    CHECK(traced_steps == std::vector<std::string>{"reserve:action", "charge:action", "reserve:compensation"});
    CHECK(plain_commands == 4);
    const auto view = HttpRequest(port, "GET", "/v1/sagas/" + traced).Json();
    CHECK(view["traceparent"] == parent);
    CHECK(view["tracestate"] == "congo=t61");
    CHECK_FALSE(HttpRequest(port, "GET", "/v1/sagas/" + plain).Json().contains("traceparent"));
}

TEST_CASE("bearer tokens: 401 without, 403 for non-operators, keys scoped per client") {
    Rig rig;
    auto engine = HttpEngine(rig, {{"shop-token", "shop"}, {"app-token", "app"}, {"op-token", "operator-1"}});
    const int port = engine->HttpPort();
    const auto none = Post(port, "k", R"({"item":"a"})");
    CHECK(none.status == 401);
    CHECK(none.Header("www-authenticate") == "Bearer");
    CHECK(Post(port, "k", R"({"item":"a"})", {{"Authorization", "Bearer wrong"}}).status == 401);
    const auto shop = Post(port, "k", R"({"item":"a"})", {{"Authorization", "Bearer shop-token"}});
    CHECK(shop.status == 201);
    // The same key from another client is another request.
    const auto app = Post(port, "k", R"({"item":"b"})", {{"Authorization", "Bearer app-token"}});
    CHECK(app.status == 201);
    CHECK(app.Json()["sagaId"] != shop.Json()["sagaId"]);
    CHECK(HttpRequest(port, "GET", "/v1/sagas", {{"Authorization", "Bearer shop-token"}}).status == 403);
    CHECK(HttpRequest(port, "GET", "/v1/sagas", {{"Authorization", "Bearer op-token"}}).status == 200);
    CHECK(HttpRequest(port, "GET", "/healthz").status == 200);  // probes need no token
}

TEST_CASE("malformed requests get the right 4xx and the server keeps serving") {
    Rig rig;
    auto engine = HttpEngine(rig);
    const int port = engine->HttpPort();
    const std::map<std::string, std::string> key{{"Idempotency-Key", "m"}};
    CHECK(ProblemType(Post(port, "m", "{not json")) == "malformed-json");
    CHECK(ProblemType(Post(port, "m", "[1,2]")) == "malformed-json");
    CHECK(ProblemType(Post(port, "m", "{\"item\":\"\xff\xfe\"}")) == "malformed-json");  // invalid UTF-8
    const auto text = HttpRequest(
        port, "POST", "/v1/sagas/itest-saga", {{"Idempotency-Key", "m"}, {"Content-Type", "text/plain"}}, "{}");
    CHECK(text.status == 415);
    // Path traversal and odd names in {type}.
    for (const std::string target :
         {"/v1/sagas/..%2F..%2Fetc%2Fpasswd", "/v1/sagas/../../etc/passwd", "/v1/sagas/ITEST", "/v1/sagas/%00"}) {
        CAPTURE(target);
        const auto r =
            HttpRequest(port, "POST", target, {{"Idempotency-Key", "m"}, {"Content-Type", "application/json"}}, "{}");
        CHECK(r.status == 404);
    }
    CHECK(HttpRequest(port, "GET", "/nowhere").status == 404);
    CHECK(HttpRequest(port, "DELETE", "/v1/sagas/itest-saga").status == 405);
    // A body over 1 MiB.
    const auto huge = Post(port, "m", "{\"item\":\"" + std::string(2 << 20, 'x') + "\"}");
    CHECK(huge.status == 413);
    // Huge headers.
    const auto headers =
        RawRequest(port, "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(64 << 10, 'h') + "\r\n\r\n");
    CHECK(headers.status == 431);
    // A truncated body: Content-Length promises more than arrives before the client stops sending.
    const auto truncated = RawRequest(port,
                                      "POST /v1/sagas/itest-saga HTTP/1.1\r\nHost: x\r\nContent-Type: "
                                      "application/json\r\nIdempotency-Key: t\r\nContent-Length: 100\r\n\r\n{\"item\"",
                                      true);
    CHECK(truncated.status == 400);
    // Garbage instead of HTTP.
    CHECK(RawRequest(port, "HELLO\r\n\r\n").status == 400);
    // Still serving, and nothing was started by any of it.
    CHECK(HttpRequest(port, "GET", "/healthz").status == 200);
    CHECK(Count(rig.db.Url(), "SELECT count(*) FROM saga_instance") == 0);
    CHECK(Count(rig.db.Url(), "SELECT count(*) FROM idempotency_record") == 0);
}

TEST_CASE("slow clients are cut off, and connections beyond the cap get 503") {
    Rig rig;
    auto engine = HttpEngine(rig, {}, 2);
    const int port = engine->HttpPort();
    namespace asio = boost::asio;
    asio::io_context io;
    const asio::ip::tcp::endpoint server{asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)};
    // Two idle connections fill the cap of 2; a third gets 503 at once.
    asio::ip::tcp::socket idle1{io}, idle2{io};
    idle1.connect(server);
    idle2.connect(server);
    asio::write(idle1, asio::buffer(std::string("GET /healthz HTTP/1.1\r\nHost: x\r\n")));  // never finished
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    const auto over = HttpRequest(port, "GET", "/healthz");
    CHECK(over.status == 503);
    CHECK(over.Header("retry-after") == "1");
    // The slow client is cut off after the 3 s io timeout: its socket reads end of file.
    const auto started = std::chrono::steady_clock::now();
    std::array<char, 256> buffer{};
    boost::system::error_code ec;
    idle1.read_some(asio::buffer(buffer), ec);
    const auto waited = std::chrono::steady_clock::now() - started;
    CHECK(ec == asio::error::eof);
    CHECK(waited < std::chrono::seconds(10));
    idle2.close();
    // Room again: served.
    CHECK(WaitFor([&] { return HttpRequest(port, "GET", "/healthz").status == 200; }, std::chrono::seconds(10)));
}

namespace {

// Everything the server writes on one connection until it closes it.
std::string ReadAll(boost::asio::ip::tcp::socket& socket) {
    std::string out;
    std::array<char, 4096> buffer{};
    boost::system::error_code ec;
    for (;;) {
        const auto n = socket.read_some(boost::asio::buffer(buffer), ec);
        out.append(buffer.data(), n);
        if (ec) return out;
    }
}

}  // namespace

TEST_CASE("pipelined requests on one connection are all answered, in order") {
    Rig rig;
    auto engine = HttpEngine(rig);
    namespace asio = boost::asio;
    asio::io_context io;
    asio::ip::tcp::socket socket{io};
    socket.connect({asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(engine->HttpPort())});
    // Four requests in one write: a start (with a body), a 404, a replay of the start, and a health
    // check that closes the connection.
    const std::string body = R"({"item": "a", "mode": ""})";
    const std::string start =
        "POST /v1/sagas/itest-saga HTTP/1.1\r\nHost: x\r\nIdempotency-Key: pipe-1\r\n"
        "Content-Type: application/json\r\nContent-Length: " +
        std::to_string(body.size()) + "\r\n\r\n" + body;
    const std::string bytes = start + "GET /v1/no-such-thing HTTP/1.1\r\nHost: x\r\n\r\n" + start +
                              "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    asio::write(socket, asio::buffer(bytes));
    const std::string answers = ReadAll(socket);
    INFO(answers);
    // The status lines in the order they came: the start, the 404, the replayed start (its stored
    // 201), the health check.
    std::vector<std::string> statuses;
    for (auto at = answers.find("HTTP/1.1 "); at != std::string::npos; at = answers.find("HTTP/1.1 ", at + 1)) {
        statuses.push_back(answers.substr(at + 9, 3));
    }
    CHECK(statuses == std::vector<std::string>{"201", "404", "201", "200"});
}

namespace {

// What the server writes on `socket` until it closes it, or until `within` has passed (then
// `closed` is false): never blocks longer, whatever the server does.
struct Drained {
    std::string bytes;
    bool closed = false;
};
Drained ReadUntilClosed(boost::asio::ip::tcp::socket& socket, std::chrono::milliseconds within) {
    Drained out;
    const auto until = std::chrono::steady_clock::now() + within;
    for (;;) {
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
        if (left.count() <= 0) return out;
        pollfd fd{socket.native_handle(), POLLIN, 0};
        if (::poll(&fd, 1, static_cast<int>(left.count())) <= 0) continue;
        std::array<char, 4096> buffer{};
        const auto n = ::recv(socket.native_handle(), buffer.data(), buffer.size(), 0);
        if (n <= 0) {
            out.closed = true;
            return out;
        }
        out.bytes.append(buffer.data(), static_cast<std::size_t>(n));
    }
}

boost::asio::ip::tcp::socket Open(boost::asio::io_context& io, int port) {
    boost::asio::ip::tcp::socket socket{io};
    socket.connect({boost::asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)});
    return socket;
}

}  // namespace

TEST_CASE("stop closes idle connections, answers the request in progress, and a second start serves again") {
    Rig rig;
    auto config = rig.Config();
    config.http.enabled = true;
    config.http.port = 0;
    config.http.io_timeout = std::chrono::seconds(60);  // only the stop can end the idle connections below
    auto engine = std::make_unique<Engine>(config);
    engine->RegisterDefinition(rig.Yaml(1, "Notify.v1", "2s"), "itest.yaml");
    engine->Start();
    const int port = engine->HttpPort();
    namespace asio = boost::asio;
    asio::io_context io;
    // An idle connection that has sent nothing, and one after a keep-alive answer.
    auto idle = Open(io, port);
    auto kept = Open(io, port);
    asio::write(kept, asio::buffer(std::string("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")));
    const auto first = ReadUntilClosed(kept, std::chrono::milliseconds(500));
    REQUIRE(first.bytes.rfind("HTTP/1.1 200", 0) == 0);
    REQUIRE_FALSE(first.closed);
    // A start waits in the database (its saga row is held, as above) while the server stops.
    std::future<void> stopped;
    pqxx::connection holder{rig.db.Url()};
    pqxx::work hold{holder};
    HoldStarts(hold, {"stopping"});
    auto busy = Open(io, port);
    const std::string body = R"({"item": "s", "mode": ""})";
    asio::write(busy,
                asio::buffer("POST /v1/sagas/itest-saga HTTP/1.1\r\nHost: x\r\nIdempotency-Key: stopping\r\n"
                             "Content-Type: application/json\r\nContent-Length: " +
                             std::to_string(body.size()) + "\r\n\r\n" + body));
    REQUIRE(StartsWaitingAtLock(rig, 1));
    stopped = std::async(std::launch::async, [&] { engine->Stop(); });
    // The idle connections are closed at once; Stop waits for the request in progress.
    CHECK(ReadUntilClosed(idle, std::chrono::seconds(5)).closed);
    const auto after = ReadUntilClosed(kept, std::chrono::seconds(5));
    CHECK(after.closed);
    CHECK(after.bytes.empty());
    CHECK(stopped.wait_for(std::chrono::milliseconds(300)) == std::future_status::timeout);
    hold.abort();
    const auto answered = ReadUntilClosed(busy, std::chrono::seconds(10));
    INFO(answered.bytes);
    CHECK(answered.closed);
    CHECK(answered.bytes.rfind("HTTP/1.1 201", 0) == 0);
    CHECK(answered.bytes.find("Connection: close") != std::string::npos);
    REQUIRE(stopped.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
    stopped.get();
    CHECK(Count(rig.db.Url(), "SELECT count(*) FROM saga_instance") == 1);
    // Started again (a new port: port 0), it serves, and the stored answer is replayed.
    engine->Start();
    const int again = engine->HttpPort();
    REQUIRE(again > 0);
    CHECK(HttpRequest(again, "GET", "/healthz").status == 200);
    const auto replayed = Post(again, "stopping", body);
    CHECK(replayed.status == 201);
    CHECK(replayed.Header("idempotent-replayed") == "true");
}

TEST_CASE("readiness: while one request probes unreachable brokers, the others answer at once") {
    Rig rig;
    auto config = rig.Config();
    config.http.enabled = true;
    config.http.port = 0;
    config.process_sagas = false;  // an API-only replica: nothing but /readyz talks to the brokers
    config.run_relay = false;
    config.create_topics = false;
    config.kafka_brokers = [] {  // a port nobody listens on
        boost::asio::io_context io;
        boost::asio::ip::tcp::acceptor probe{io, {boost::asio::ip::make_address("127.0.0.1"), 0}};
        return "127.0.0.1:" + std::to_string(probe.local_endpoint().port());
    }();
    Engine engine{config};
    engine.Start();
    const int port = engine.HttpPort();
    auto probing = std::async(std::launch::async, [port] { return HttpRequest(port, "GET", "/readyz"); });
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the probe takes its 2 s timeout
    // A second caller does not queue behind the probe: it answers what is known (nothing yet).
    auto other = std::async(std::launch::async, [port] { return HttpRequest(port, "GET", "/readyz"); });
    REQUIRE(other.wait_for(std::chrono::seconds(1)) == std::future_status::ready);
    const auto at_once = other.get();
    CHECK(probing.wait_for(std::chrono::milliseconds(0)) == std::future_status::timeout);
    CHECK(at_once.status == 503);
    CHECK(at_once.Json()["checks"]["kafka"] == "unknown");
    CHECK(at_once.Json()["checks"]["postgresql"] == "up");
    const auto probed = probing.get();
    CHECK(probed.status == 503);
    CHECK(probed.Json()["checks"]["kafka"] == "down");
    // Within 5 s of the probe, callers get its result without probing again.
    const auto cached = HttpRequest(port, "GET", "/readyz");
    CHECK(cached.Json()["checks"]["kafka"] == "down");
}

TEST_CASE("a client trickling its body is cut off at the request deadline; others are served meanwhile") {
    Rig rig;
    auto engine = HttpEngine(rig);  // io_timeout 3 s
    const int port = engine->HttpPort();
    namespace asio = boost::asio;
    asio::io_context io;
    auto slow = Open(io, port);
    asio::write(slow,
                asio::buffer(std::string("POST /v1/sagas/itest-saga HTTP/1.1\r\nHost: x\r\nIdempotency-Key: slow\r\n"
                                         "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{")));
    // One byte every 200 ms keeps every single read short of the deadline; the request as a whole
    // is not.
    const auto started = std::chrono::steady_clock::now();
    bool cut = false;
    while (!cut && std::chrono::steady_clock::now() - started < std::chrono::seconds(15)) {
        boost::system::error_code ec;
        asio::write(slow, asio::buffer(std::string(" ")), ec);
        cut = ec.failed() || ReadUntilClosed(slow, std::chrono::milliseconds(200)).closed;
        if (std::chrono::steady_clock::now() - started > std::chrono::seconds(1)) {
            CHECK(HttpRequest(port, "GET", "/healthz").status == 200);
        }
    }
    const auto waited = std::chrono::steady_clock::now() - started;
    CHECK(cut);
    CHECK(waited >= std::chrono::milliseconds(2500));
    CHECK(waited < std::chrono::seconds(8));
    CHECK(Count(rig.db.Url(), "SELECT count(*) FROM saga_instance") == 0);
}

TEST_CASE("a flood of connections past the open-files limit: the server keeps accepting afterwards") {
    // `sagaflow run --http` under `ulimit -n 256`; 700 idle connections, then closed. The accept loop
    // must survive EMFILE, and connections beyond what the limit allows get 503 rather than nothing.
    Rig rig;
    const std::string yaml = rig.YamlFile(1, "2s");
    const int port = [] {
        boost::asio::io_context io;
        boost::asio::ip::tcp::acceptor probe{io, {boost::asio::ip::make_address("127.0.0.1"), 0}};
        return static_cast<int>(probe.local_endpoint().port());
    }();
    const std::string log = "/tmp/sagaflow-flood-" + rig.suffix + ".log";
    std::vector<std::string> args{"-c", "ulimit -n 256 && exec \"$0\" \"$@\"", testing::SagaflowCli()};
    for (auto& arg : rig.RunArgs(yaml)) args.push_back(std::move(arg));
    args.push_back("--http");
    args.push_back("127.0.0.1:" + std::to_string(port));
    detail::ChildProcess engine{"/bin/sh", args, log};
    const auto healthy = [&](std::chrono::seconds within) {
        return WaitFor(
            [&] {
                try {
                    return HttpRequest(port, "GET", "/healthz").status == 200;
                } catch (const std::exception&) {
                    return false;
                }
            },
            within);
    };
    REQUIRE(healthy(std::chrono::seconds(60)));
    namespace asio = boost::asio;
    asio::io_context io;
    std::vector<asio::ip::tcp::socket> flood;
    int refused = 0;
    for (int i = 0; i < 700; ++i) {
        asio::ip::tcp::socket s{io};
        boost::system::error_code ec;
        s.connect({asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)}, ec);
        if (ec) {
            ++refused;
            continue;
        }
        flood.push_back(std::move(s));
    }
    std::this_thread::sleep_for(std::chrono::seconds(1));
    // Past the cap the server answers 503 with Retry-After and closes.
    int answered_503 = 0;
    for (auto& s : flood) {
        if (s.available() > 0) {
            std::array<char, 512> buffer{};
            boost::system::error_code ec;
            const auto n = s.read_some(asio::buffer(buffer), ec);
            const std::string head(buffer.data(), n);
            answered_503 += head.rfind("HTTP/1.1 503", 0) == 0 && head.find("Retry-After") != std::string::npos;
        }
    }
    MESSAGE("connections opened " << flood.size() << ", refused " << refused << ", answered 503: " << answered_503);
    CHECK(answered_503 > 0);
    for (auto& s : flood) s.close();
    flood.clear();
    // Afterwards: health and a start are served.
    CHECK(healthy(std::chrono::seconds(15)));
    const auto started = Post(port, "flood-1", R"({"item": "a", "mode": ""})");
    CHECK(started.status == 201);
    engine.KillAndWait(SIGTERM);
}

TEST_CASE("safe by default: no tokens on a non-loopback address is refused unless allowed, and operators need one") {
    Rig rig;
    auto config = rig.Config();
    config.http.enabled = true;
    config.http.address = "0.0.0.0";
    config.http.port = 0;
    {
        Engine engine{config};
        engine.RegisterDefinition(rig.Yaml(1, "Notify.v1", "2s"), "itest.yaml");
        try {
            engine.Start();
            FAIL("started on 0.0.0.0 without tokens");
        } catch (const EngineError& e) {
            const std::string what = e.what();
            CHECK(what.find("0.0.0.0") != std::string::npos);
            CHECK(what.find("allow_unauthenticated") != std::string::npos);
        }
    }
    config.http.allow_unauthenticated = true;  // NOLINT
    Engine engine{config};
    engine.RegisterDefinition(rig.Yaml(1, "Notify.v1", "2s"), "itest.yaml");
    engine.Start();
    const int port = engine.HttpPort();
    CHECK(Post(port, "open-1", R"({"item": "a", "mode": ""})").status == 201);
    const auto list = HttpRequest(port, "GET", "/v1/sagas");
    CHECK(list.status == 403);
    CHECK(ProblemType(list) == "operator-token-required");
}

TEST_CASE("operator reads stay index walks as history grows: list pages and gauges never sort or scan the table") {
    Rig rig;
    auto engine = HttpEngine(rig);  // the schema
    pqxx::connection conn{rig.db.Url()};
    {
        // 200,000 finished sagas of one type, half completed and half compensated, and a few open.
        pqxx::work tx{conn};
        tx.exec("INSERT INTO saga_definition (saga_type, version, hash, canonical) VALUES ('bulk', 1, 'bulk-h', '{}')");
        tx.exec(
            "INSERT INTO saga_instance (saga_id, saga_type, definition_version, definition_hash, status, input) "
            "SELECT ('00000000-0000-7000-8000-' || lpad(to_hex(i), 12, '0'))::uuid, 'bulk', 1, 'bulk-h', CASE WHEN "
            "i % 5000 = 0 THEN 'running' WHEN i % 7000 = 0 THEN 'failed' WHEN i % 2 = 0 THEN 'completed' ELSE "
            "'compensated' END, '{}' FROM generate_series(1, 200000) i");
        tx.commit();
        pqxx::nontransaction{conn}.exec("ANALYZE saga_instance");
    }
    const auto plan = [&](const std::string& sql, const std::vector<std::string>& params) {
        pqxx::work tx{conn};
        tx.exec("SET LOCAL plan_cache_mode = force_custom_plan");  // as the engine plans the list
        std::string text;
        pqxx::result rows;
        if (params.empty()) {
            rows = tx.exec("EXPLAIN " + sql);
        } else {
            // status, type, cursor, limit, highest id, lowest id, keys (ListSagasStatement)
            rows =
                tx.exec_params("EXPLAIN " + sql, params[0], params[1], params[2], 51, params[3], params[4], params[5]);
        }
        for (const auto& row : rows) text += row[0].as<std::string>() + "\n";
        return text;
    };
    const std::string cursor = "00000000-0000-7000-8000-000000010000";
    // The console's filters: an id prefix or ages as id bounds, a key under every registered type.
    const std::string low = "00000000-0000-7000-8000-000000001000", high = "00000000-0000-7000-8000-000000001fff";
    for (const auto& params : std::vector<std::vector<std::string>>{{"", "", "", "", "", ""},
                                                                    {"completed", "", "", "", "", ""},
                                                                    {"compensated", "", cursor, "", "", ""},
                                                                    {"", "bulk", "", "", "", ""},
                                                                    {"", "", cursor, "", "", ""},
                                                                    {"failed", "", "", "", "", ""},
                                                                    {"running", "", "", "", "", ""},
                                                                    {"", "", "", high, low, ""},
                                                                    {"compensated", "", "", high, "", ""},
                                                                    {"failed", "", "", "", low, ""},
                                                                    {"", "", "", "", "", "key-7\x1fshop:key-7"},
                                                                    {"", "bulk", "", "", "", "key-7"}}) {
        const auto text = plan(detail::ListSagasStatement(), params);
        INFO(params[0] << "/" << params[1] << "/" << params[2] << "/" << params[3] << "/" << params[4] << "/"
                       << params[5] << "\n"
                       << text);
        CHECK(text.find("Seq Scan on saga_instance") == std::string::npos);
        if (params[5].empty()) {
            CHECK(text.find("Sort") == std::string::npos);
        } else {  // a key's sagas (one per type and client at most) come from its unique index, then are ordered
            CHECK(text.find("Index Scan using saga_instance_saga_type_idempotency_key_key") != std::string::npos);
        }
    }
    const auto gauges = plan(detail::OpenSagasStatement(), {});
    INFO(gauges);
    CHECK(gauges.find("Seq Scan") == std::string::npos);
    // And the endpoints answer from them.
    const int port = engine->HttpPort();
    const auto page = HttpRequest(port, "GET", "/v1/sagas?status=completed&limit=50");
    REQUIRE(page.status == 200);
    CHECK(page.Json()["items"].size() == 50);
    const auto metrics = HttpRequest(port, "GET", "/metrics");
    CHECK(metrics.body.find("sagaflow_sagas{type=\"bulk\",status=\"running\"} 40\n") != std::string::npos);
}

TEST_CASE("a definition the database refuses changes nothing in the engine: starts keep the version it had") {
    Rig rig;
    auto engine = HttpEngine(rig);
    // Another deployment registered version 2 of the type with other content.
    testing::Execute(
        rig.db.Url(),
        "INSERT INTO saga_definition (saga_type, version, hash, canonical, source) VALUES ('itest-saga', 2, "
        "'another-hash', '{}', '')");
    CHECK_THROWS_AS(engine->RegisterDefinition(rig.Yaml(2, "Notify.v1", "2s"), "v2.yaml"), EngineError);
    const auto started = Post(engine->HttpPort(), "after-refusal", R"({"item": "a", "mode": ""})");
    REQUIRE(started.status == 201);
    const auto saga = engine->GetSaga(started.Json()["sagaId"].get<std::string>());
    REQUIRE(saga);
    CHECK(saga->definition_version == 1);
}

TEST_CASE("hostile bodies: deep nesting, duplicate keys, U+0000, repeated headers and near media types are refused") {
    Rig rig;
    auto engine = HttpEngine(rig);
    const int port = engine->HttpPort();
    const std::string deep = std::string(100'000, '[') + std::string(100'000, ']');
    // 100,000 levels anywhere in the body crashed the server (stack overflow in the JSON dump).
    for (const std::string& body :
         {deep, R"({"item":)" + deep + "}", R"({"item":"a","unknown":)" + deep + "}", std::string(100'000, '{')}) {
        const auto r = Post(port, "deep", body);
        CHECK(r.status == 400);
        CHECK(ProblemType(r) == "malformed-json");
    }
    CHECK(Post(port, "deep", R"({"item":)" + deep + "}")
              .Json()["detail"]
              .get<std::string>()
              .find("deeper than 64 levels") != std::string::npos);

    const auto twice = Post(port, "dup", R"({"item":"a","item":"b"})");
    CHECK(twice.status == 400);
    CHECK(ProblemType(twice) == "ambiguous-json");
    CHECK(twice.Json()["detail"] == "the body has the key 'item' twice; send each key once");

    const auto nul = Post(port, "nul", R"({"item":"a\u0000b"})");
    CHECK(nul.status == 422);
    CHECK(ProblemType(nul) == "invalid-input");
    CHECK(nul.Json()["errors"][0]["path"] == "$.item");

    const auto two_keys = RawRequest(port,
                                     "POST /v1/sagas/itest-saga HTTP/1.1\r\nHost: x\r\nContent-Type: "
                                     "application/json\r\nIdempotency-Key: a\r\nIdempotency-Key: b\r\n"
                                     "Content-Length: 12\r\n\r\n{\"item\":\"a\"}");
    CHECK(two_keys.status == 400);
    CHECK(two_keys.body.find("repeated-header") != std::string::npos);
    for (const std::string type : {"application/jsonx", "application/json-patch+json", "application/json5"}) {
        CAPTURE(type);
        CHECK(HttpRequest(port,
                          "POST",
                          "/v1/sagas/itest-saga",
                          {{"Idempotency-Key", "mt"}, {"Content-Type", type}},
                          R"({"item":"a"})")
                  .status == 415);
    }
    // Under the body limit, but its commands would be over the broker's: refused before it starts,
    // not left waiting at `dispatched` while the relay's produce fails forever.
    const auto large = Post(port, "large", R"({"item":")" + std::string(1'000'000, 'x') + R"("})");
    CHECK(large.status == 422);
    CHECK(large.Json()["errors"][0]["message"].get<std::string>().find(
              "makes the action of step 'reserve' (Reserve.v1) about 1004") == 0);
    // Nothing of it was stored, and the server still serves, parameters of the media type included.
    CHECK(Count(rig.db.Url(), "SELECT count(*) FROM saga_instance") == 0);
    CHECK(Count(rig.db.Url(), "SELECT count(*) FROM idempotency_record") == 0);
    const auto fine = HttpRequest(port,
                                  "POST",
                                  "/v1/sagas/itest-saga",
                                  {{"Idempotency-Key", "ok"}, {"Content-Type", "Application/JSON; charset=utf-8"}},
                                  R"({"item":"a"})");
    REQUIRE(fine.status == 201);
    const std::string cancel = "/v1/sagas/" + fine.Json()["sagaId"].get<std::string>() + "/cancel";
    const std::map<std::string, std::string> json{{"Content-Type", "application/json"}};
    const auto deep_reason = HttpRequest(port, "POST", cancel, json, R"({"reason":)" + deep + "}");
    CHECK(deep_reason.status == 400);
    CHECK(ProblemType(deep_reason) == "malformed-json");
    const auto nul_reason = HttpRequest(port, "POST", cancel, json, R"({"reason":"a\u0000"})");
    CHECK(nul_reason.status == 422);
    CHECK(nul_reason.Json()["errors"][0]["path"] == "$.reason");
    CHECK(HttpRequest(port, "GET", "/healthz").status == 200);
}

TEST_CASE("client isolation: a client reads only the sagas it started (404 for the others); operators read all") {
    Rig rig;
    auto participant = rig.Participant(testing::Default);
    auto engine = HttpEngine(rig, {{"shop-token", "shop"}, {"app-token", "app"}, {"op-token", "operator-1"}});
    const int port = engine->HttpPort();
    const auto started = Post(port, "secret-key", R"({"item":"a"})", {{"Authorization", "Bearer shop-token"}});
    REQUIRE(started.status == 201);
    const std::string id = started.Json()["sagaId"];
    const auto as = [&](const std::string& token, const std::string& method, const std::string& path) {
        return HttpRequest(port,
                           method,
                           path,
                           {{"Authorization", "Bearer " + token}, {"Content-Type", "application/json"}},
                           method == "POST" ? "{}" : "");
    };
    const std::string unknown = "/v1/sagas/00000000-0000-4000-8000-000000000000";
    for (const std::string suffix : {"", "/graph", "/graph?format=svg"}) {
        CAPTURE(suffix);
        const auto own = as("shop-token", "GET", "/v1/sagas/" + id + suffix);
        CHECK(own.status == 200);
        const auto other = as("app-token", "GET", "/v1/sagas/" + id + suffix);
        CHECK(other.status == 404);
        CHECK(ProblemType(other) == "saga-not-found");
        CHECK(other.body.find("secret-key") == std::string::npos);
        // The same answer as for a saga that does not exist: ids cannot be probed.
        const auto missing = as("app-token", "GET", unknown + suffix);
        CHECK(missing.status == 404);
        CHECK(other.Json()["detail"].get<std::string>().substr(0, 8) ==
              missing.Json()["detail"].get<std::string>().substr(0, 8));
        CHECK(as("op-token", "GET", "/v1/sagas/" + id + suffix).status == 200);
    }
    CHECK(as("shop-token", "GET", "/v1/sagas/" + id).Json()["idempotencyKey"] == "shop:secret-key");
    // Retrying and cancelling are operators' (403 for every client, whatever the id).
    for (const std::string action : {"/retry", "/cancel"}) {
        CHECK(as("app-token", "POST", "/v1/sagas/" + id + action).status == 403);
        CHECK(as("app-token", "POST", unknown + action).status == 403);
    }
}

// The operator console (GET /ui/) in a real browser: tests/browser/console_test.py drives Debian's
// headless chromium against an engine whose sagas this test made — completed, compensated, parked,
// one held in flight, one whose input carries a <script> — and this test then reads what the
// browser's retry and cancel did to the database. Also the console's files and headers, and the
// listing's new filters through the API.
#include <doctest/doctest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>

#include "engine/engine.hpp"
#include "tests/support/http_client.hpp"
#include "tests/support/saga_rig.hpp"
#include "tests/support/services.hpp"
#include "tools/child_process.hpp"

using namespace sagaflow;
using testing::Count;
using testing::HttpRequest;
using testing::Rig;
using testing::WaitFor;

namespace {

constexpr const char* kOperatorToken = "console-operator-token";
constexpr const char* kShopToken = "console-shop-token";

std::string Start(int port, const std::string& key, const nlohmann::json& input) {
    const auto r = HttpRequest(port,
                               "POST",
                               "/v1/sagas/itest-saga",
                               {{"Content-Type", "application/json"},
                                {"Idempotency-Key", key},
                                {"Authorization", std::string("Bearer ") + kShopToken}},
                               input.dump());
    REQUIRE(r.status == 201);
    return r.Json()["sagaId"].get<std::string>();
}

testing::HttpResult AsOperator(int port, const std::string& target) {
    return HttpRequest(port, "GET", target, {{"Authorization", std::string("Bearer ") + kOperatorToken}});
}

std::set<std::string> Listed(int port, const std::string& query) {
    const auto r = AsOperator(port, "/v1/sagas?" + query);
    REQUIRE_MESSAGE(r.status == 200, r.body);
    std::set<std::string> ids;
    const auto body = r.Json();
    for (const auto& item : body["items"]) ids.insert(item["sagaId"].get<std::string>());
    return ids;
}

}  // namespace

TEST_CASE("the console in a real browser: list and filters, a saga's steps and diagram, retry and cancel") {
    Rig rig;
    auto participant = rig.Participant(testing::HoldOrDefault);  // "hold-<step>/..." stays in flight
    auto config = rig.Config();
    config.http.enabled = true;
    config.http.port = 0;
    config.http.tokens = {{kOperatorToken, "operator-console"}, {kShopToken, "shop"}};
    Engine engine(config);
    engine.RegisterDefinition(rig.Yaml(1, "Notify.v1", "5m"), "itest.yaml");  // only the cancel ends the held step
    engine.Start();
    const int port = engine.HttpPort();

    nlohmann::json sagas;
    for (int n = 0; n < 4; ++n)
        sagas["completed"].push_back(Start(port, "done-" + std::to_string(n), {{"item", "//" + std::to_string(n)}}));
    sagas["compensated"] = Start(port, "declined", {{"item", "charge//1"}});
    sagas["parked"] = Start(port, "parks", {{"item", "notify//9"}});
    sagas["held"] = Start(port, "held", {{"item", "hold-charge//1"}});
    sagas["script"] =
        Start(port, "xss", {{"item", "<script>window.__xss=1</script><img src=x onerror=\"window.__xss=2\">"}});
    sagas["key"] = "order-<b>42</b>&more";
    sagas["keyed"] = Start(port, sagas["key"].get<std::string>(), {{"item", "//keyed"}});
    REQUIRE(WaitFor([&] { return rig.Open() == 1; }, std::chrono::seconds(60)));  // only the held one is open

    {  // the console's files, with a policy that allows no inline script and no other origin
        const auto page = HttpRequest(port, "GET", "/ui/");
        CHECK(page.status == 200);
        CHECK(page.Header("content-type") == "text/html; charset=utf-8");
        CHECK(page.Header("content-security-policy").find("script-src 'self'") != std::string::npos);
        CHECK(page.Header("content-security-policy").find("unsafe-inline") == std::string::npos);
        CHECK(page.Header("content-security-policy").find("frame-ancestors 'none'") != std::string::npos);
        CHECK(page.Header("x-content-type-options") == "nosniff");
        CHECK(page.body.find("<script src=\"console.js\"></script>") != std::string::npos);
        CHECK(HttpRequest(port, "GET", "/ui/console.js").Header("content-type") == "text/javascript; charset=utf-8");
        CHECK(HttpRequest(port, "GET", "/ui/console.css").status == 200);
        CHECK(HttpRequest(port, "GET", "/ui/missing.js").status == 404);
        const auto bare = HttpRequest(port, "GET", "/ui");
        CHECK(bare.status == 308);
        CHECK(bare.Header("location") == "/ui/");
        // The data needs a token, and listing an operator's.
        CHECK(HttpRequest(port, "GET", "/v1/overview").status == 401);
        CHECK(
            HttpRequest(port, "GET", "/v1/overview", {{"Authorization", std::string("Bearer ") + kShopToken}}).status ==
            403);
    }

    {  // the listing's filters and the overview through the API
        CHECK(Listed(port, "key=" + std::string("order-%3Cb%3E42%3C%2Fb%3E%26more")) ==
              std::set<std::string>{sagas["keyed"].get<std::string>()});
        const std::string parked = sagas["parked"].get<std::string>();
        CHECK(Listed(port, "type=itest-saga&key=parks") == std::set<std::string>{parked});
        CHECK(Listed(port, "idPrefix=" + parked.substr(0, 30)) == std::set<std::string>{parked});
        CHECK(Listed(port, "idPrefix=" + parked) == std::set<std::string>{parked});
        CHECK(Listed(port, "minAge=3600").empty());
        CHECK(Listed(port, "maxAge=3600&limit=500").size() == 9);
        CHECK(Listed(port, "status=failed&maxAge=3600") == std::set<std::string>{parked});
        CHECK(AsOperator(port, "/v1/sagas?idPrefix=xyz").status == 400);
        CHECK(AsOperator(port, "/v1/sagas?minAge=-5").status == 400);
        const auto overview = AsOperator(port, "/v1/overview");
        REQUIRE(overview.status == 200);
        const auto o = overview.Json();
        CHECK(o["counts"]["completed"] == 6);
        CHECK(o["counts"]["compensated"] == 1);
        CHECK(o["counts"]["failed"] == 1);
        CHECK(o["counts"]["running"] == 1);
        CHECK(o["parked"] == 1);
        CHECK(o["countsEstimated"].empty());
        CHECK(o["oldestOpen"]["sagaId"] == sagas["held"]);
        CHECK(o["types"] == nlohmann::json{"itest-saga"});
        CHECK(o["thisEngine"]["started"] == 9);
        const auto svg = HttpRequest(port,
                                     "GET",
                                     "/v1/sagas/" + parked + "/graph?format=svg",
                                     {{"Authorization", std::string("Bearer ") + kShopToken}});
        CHECK(svg.status == 200);
        CHECK(svg.Header("content-type") == "image/svg+xml");
        CHECK(svg.body.find("data-node=\"s3\" data-status=\"failed\"") != std::string::npos);  // notify gave up
    }

    {  // in the browser
        const std::string source = std::getenv("SAGAFLOW_SOURCE_DIR");
        const std::string file = "/tmp/" + testing::UniqueName("console-sagas") + ".json";
        std::ofstream(file) << sagas.dump();
        const std::string log = "/tmp/" + testing::UniqueName("console-test") + ".log";
        std::vector<std::string> args{source + "/tests/browser/console_test.py",
                                      "--url",
                                      "http://127.0.0.1:" + std::to_string(port),
                                      "--token",
                                      kOperatorToken,
                                      "--sagas-json",
                                      file};
        // SAGAFLOW_CONSOLE_SCREENSHOTS=DIR keeps the list's and a saga's screenshots (docs/ has them).
        if (const char* dir = std::getenv("SAGAFLOW_CONSOLE_SCREENSHOTS")) {
            args.insert(args.end(), {"--screenshots", dir});
        }
        int status = 0;
        {
            detail::ChildProcess browser{"/usr/bin/python3", args, log};
            status = browser.Wait();
        }
        const std::string output = testing::ReadFile(log);
        std::remove(log.c_str());
        std::remove(file.c_str());
        INFO(output);
        CHECK(WIFEXITED(status));
        CHECK(WEXITSTATUS(status) == 0);

        // What the browser's actions did, in the database.
        const std::string parked = sagas["parked"].get<std::string>(), held = sagas["held"].get<std::string>();
        CHECK(Count(rig.db.Url(),
                    "SELECT count(*) FROM saga_timeline WHERE saga_id = '" + parked +
                        "' AND kind = 'operator-retry'") == 1);
        CHECK(Count(rig.db.Url(),
                    "SELECT count(*) FROM saga_timeline WHERE saga_id = '" + held +
                        "' AND kind = 'cancelled' AND detail->>'reason' = 'customer called <b>support</b> (by "
                        "operator-console)'") == 1);
        CHECK(WaitFor(
            [&] {
                return Count(rig.db.Url(),
                             "SELECT count(*) FROM saga_instance WHERE saga_id = '" + held +
                                 "' AND status = 'compensated'") == 1;
            },
            std::chrono::seconds(30)));
        // The retry's extra attempt went out with the same command event id (the participant saw it
        // again) and failed like the others: the saga is parked again.
        CHECK(WaitFor(
            [&] {
                return Count(rig.db.Url(),
                             "SELECT count(*) FROM saga_instance WHERE saga_id = '" + parked +
                                 "' AND status = 'failed'") == 1;
            },
            std::chrono::seconds(30)));
    }
    engine.Stop();
}

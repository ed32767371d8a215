// The HTTP API's routing table (engine/http/routes.hpp), without a server.
#include <doctest/doctest.h>

#include "engine/http/routes.hpp"

using sagaflow::detail::Endpoint;
using sagaflow::detail::Resolve;
using sagaflow::detail::Route;

namespace {

Route To(Endpoint endpoint, std::string argument = {}, bool api = true, bool operator_only = false) {
    Route r;
    r.endpoint = endpoint;
    r.argument = std::move(argument);
    r.api = api;
    r.operator_only = operator_only;
    return r;
}

Route NotAllowed(std::string allow, std::string argument = {}, bool api = true, bool operator_only = false) {
    Route r;
    r.allow = std::move(allow);
    r.argument = std::move(argument);
    r.api = api;
    r.operator_only = operator_only;
    return r;
}

Route NotFound(bool api) {
    Route r;
    r.api = api;
    return r;
}

}  // namespace

TEST_CASE("every endpoint, the methods each path allows, and what is not there") {
    const std::string id = "0190a5b2-7c3e-7def-8a12-3456789abcde";
    struct Case {
        const char* method;
        std::string path;
        Route expected;
    };
    const std::vector<Case> cases{
        {"GET", "/healthz", To(Endpoint::kHealth, {}, false)},
        {"POST", "/healthz", NotAllowed("GET", {}, false)},
        {"GET", "/readyz", To(Endpoint::kReady, {}, false)},
        {"GET", "/metrics", To(Endpoint::kMetrics, {}, false)},
        {"DELETE", "/metrics", NotAllowed("GET", {}, false)},
        {"GET", "/v1/sagas", To(Endpoint::kListSagas, {}, true, true)},
        {"GET", "/v1//sagas/", To(Endpoint::kListSagas, {}, true, true)},  // empty segments collapse
        {"POST", "/v1/sagas", NotAllowed("GET", {}, true, true)},
        {"POST", "/v1/sagas/order-payment", To(Endpoint::kStartSaga, "order-payment")},
        {"GET", "/v1/sagas/" + id, To(Endpoint::kGetSaga, id)},
        {"PUT", "/v1/sagas/" + id, NotAllowed("GET, POST", id)},
        {"GET", "/v1/sagas/" + id + "/graph", To(Endpoint::kSagaGraph, id)},
        {"POST", "/v1/sagas/" + id + "/graph", NotAllowed("GET", id)},
        {"POST", "/v1/sagas/" + id + "/retry", To(Endpoint::kRetrySaga, id, true, true)},
        {"GET", "/v1/sagas/" + id + "/retry", NotAllowed("POST", id, true, true)},
        {"POST", "/v1/sagas/" + id + "/cancel", To(Endpoint::kCancelSaga, id, true, true)},
        {"GET", "/v1/sagas/" + id + "/cancel", NotAllowed("POST", id, true, true)},
        // Under /v1/sagas a client is authenticated before it learns that a path does not exist.
        {"POST", "/v1/sagas/" + id + "/resume", NotFound(true)},
        {"GET", "/v1/sagas/" + id + "/graph/extra", NotFound(true)},
        {"GET", "/v1/overview", To(Endpoint::kOverview, {}, true, true)},
        {"POST", "/v1/overview", NotAllowed("GET", {}, true, true)},
        // The console's files: no token (what they show comes from /v1 with the user's token).
        {"GET", "/ui", To(Endpoint::kConsole, {}, false)},  // redirected to /ui/
        {"GET", "/ui/", To(Endpoint::kConsole, "index.html", false)},
        {"GET", "/ui/console.js", To(Endpoint::kConsole, "console.js", false)},
        {"POST", "/ui/", NotAllowed("GET", "index.html", false)},
        {"GET", "/ui/a/b", NotFound(false)},
        {"GET", "/", NotFound(false)},
        {"GET", "/v1", NotFound(false)},
        {"GET", "/v2/sagas", NotFound(false)},
        {"GET", "/healthz/", NotFound(false)},
        {"GET", "/HEALTHZ", NotFound(false)},
    };
    for (const auto& c : cases) {
        INFO(c.method << " " << c.path);
        const Route got = Resolve(c.method, c.path);
        CHECK(got.endpoint == c.expected.endpoint);
        CHECK(got.allow == c.expected.allow);
        CHECK(got.argument == c.expected.argument);
        CHECK(got.api == c.expected.api);
        CHECK(got.operator_only == c.expected.operator_only);
    }
}

TEST_CASE("segments: empty ones are dropped, the rest kept as they are") {
    using sagaflow::detail::Segments;
    CHECK(Segments("") == std::vector<std::string>{});
    CHECK(Segments("/") == std::vector<std::string>{});
    CHECK(Segments("/v1/sagas") == std::vector<std::string>{"v1", "sagas"});
    CHECK(Segments("v1//sagas///x/") == std::vector<std::string>{"v1", "sagas", "x"});
    CHECK(Segments("/a%2Fb") == std::vector<std::string>{"a%2Fb"});
}

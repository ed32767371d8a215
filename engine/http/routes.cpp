#include "engine/http/routes.hpp"

namespace sagaflow::detail {

std::vector<std::string> Segments(std::string_view path) {
    std::vector<std::string> out;
    std::size_t at = 0;
    while (at <= path.size()) {
        const auto end = std::min(path.find('/', at), path.size());
        if (end > at) out.emplace_back(path.substr(at, end - at));
        at = end + 1;
    }
    return out;
}

Route Resolve(std::string_view method, std::string_view path) {
    Route route;
    const auto only = [&](std::string_view allowed, Endpoint endpoint) {
        if (method == allowed) {
            route.endpoint = endpoint;
        } else {
            route.allow = std::string(allowed);
        }
        return route;
    };
    if (path == "/healthz") return only("GET", Endpoint::kHealth);
    if (path == "/readyz") return only("GET", Endpoint::kReady);
    if (path == "/metrics") return only("GET", Endpoint::kMetrics);
    const auto segments = Segments(path);
    if (!segments.empty() && segments[0] == "ui") {  // /ui redirects to /ui/, which is index.html
        if (segments.size() > 2) return route;
        route.argument = segments.size() == 2 ? segments[1] : (path.back() == '/' ? "index.html" : "");
        return only("GET", Endpoint::kConsole);
    }
    if (segments.size() == 2 && segments[0] == "v1" && segments[1] == "overview") {
        route.api = true;
        route.operator_only = true;
        return only("GET", Endpoint::kOverview);
    }
    if (segments.size() < 2 || segments[0] != "v1" || segments[1] != "sagas") return route;
    route.api = true;  // authenticated before anything else is said about the path
    if (segments.size() > 4) return route;
    if (segments.size() == 2) {  // /v1/sagas
        route.operator_only = true;
        return only("GET", Endpoint::kListSagas);
    }
    route.argument = segments[2];
    if (segments.size() == 3) {  // /v1/sagas/{type} to start, /v1/sagas/{id} to read
        if (method == "POST") {
            route.endpoint = Endpoint::kStartSaga;
        } else if (method == "GET") {
            route.endpoint = Endpoint::kGetSaga;
        } else {
            route.allow = "GET, POST";
        }
        return route;
    }
    const std::string& action = segments[3];
    if (action == "graph") return only("GET", Endpoint::kSagaGraph);
    if (action == "retry" || action == "cancel") {
        route.operator_only = true;
        return only("POST", action == "retry" ? Endpoint::kRetrySaga : Endpoint::kCancelSaga);
    }
    route.argument.clear();
    return route;  // 404
}

}  // namespace sagaflow::detail

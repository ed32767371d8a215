#pragma once
// The HTTP API's routing as a pure function, unit-tested without a server: which endpoint a method
// and path name, the methods a known path allows (405), and what the endpoint needs (a client
// token under /v1, an operator's token for list, overview, retry and cancel). The console's files
// under /ui/ need none: what it shows comes from /v1 with the token its user gives.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sagaflow::detail {

enum class Endpoint {
    kHealth,
    kReady,
    kMetrics,
    kListSagas,
    kStartSaga,
    kGetSaga,
    kSagaGraph,
    kRetrySaga,
    kCancelSaga,
    kOverview,  // GET /v1/overview
    kConsole,   // GET /ui/...: the console's static files (argument: the file; empty for /ui)
};

struct Route {
    std::optional<Endpoint> endpoint;  // nullopt: 405 when `allow` is set, else 404
    std::string allow;                 // the methods the path allows, when the method is not one
    std::string argument;              // the saga type (start), the saga id, or the console's file
    bool api = false;                  // under /v1: bearer tokens apply
    bool operator_only = false;        // list, overview, retry, cancel

    bool operator==(const Route&) const = default;
};

// The path's non-empty segments ("/v1//sagas/" -> v1, sagas).
std::vector<std::string> Segments(std::string_view path);

// `method` as HTTP spells it ("GET", "POST", ...); `path` without the query.
Route Resolve(std::string_view method, std::string_view path);

}  // namespace sagaflow::detail

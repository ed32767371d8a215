#include "engine/http/http_server.hpp"
#include "engine/http/console.hpp"
#include "engine/http/request_body.hpp"
#include "engine/http/routes.hpp"

#include <spdlog/spdlog.h>
#include <sys/resource.h>

#include <algorithm>
#include <filesystem>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <pqxx/pqxx>
#include <set>
#include <sstream>

#include "core/bounded_json.hpp"
#include "core/canonical.hpp"
#include "core/text_scan.hpp"
#include "engine/repository/saga_store.hpp"
#include "outbox/admin.hpp"
#include "store/errors.hpp"
#include "store/inbox.hpp"
#include "store/named_thread.hpp"
#include "store/pool.hpp"
#include "store/prepared.hpp"
#include "store/sweeper.hpp"
#include "store/transaction.hpp"

namespace sagaflow::detail {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

struct HttpServer::Request {
    http::request<http::string_body> message;
    std::string path;                          // the target before '?'
    std::map<std::string, std::string> query;  // not percent-decoded: values are ids and names
};

struct HttpServer::Response {
    unsigned status = 200;
    std::string content_type = "application/json";
    std::string body;
    std::vector<std::pair<std::string, std::string>> headers;
};

namespace {

using Response = HttpServer::Response;

// Compact JSON; invalid UTF-8 (a parser message quoting the client's bytes) becomes U+FFFD.
std::string Dump(const nlohmann::json& value) {
    return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// RFC 9457 problem details. `type` is a slug under the sagaflow problem namespace.
Response Problem(unsigned status,
                 const std::string& type,
                 const std::string& title,
                 const std::string& detail,
                 nlohmann::json extra = nlohmann::json::object()) {
    nlohmann::json body = std::move(extra);
    body["type"] = "https://sagaflow.dev/problems/" + type;
    body["title"] = title;
    body["status"] = status;
    body["detail"] = detail;
    return {status, "application/problem+json", Dump(body), {}};
}

Response Json(unsigned status, const nlohmann::json& body) {
    return {status, "application/json", Dump(body), {}};
}

// The body as a JSON object (engine/http/request_body.hpp), or the problem that says why not.
std::optional<Response> ParseObject(const std::string& text, const JsonLimits& limits, nlohmann::json& body) {
    auto refusal = ReadObjectBody(text, limits, body);
    if (!refusal) return std::nullopt;
    nlohmann::json extra = nlohmann::json::object();
    if (!refusal->path.empty()) extra["errors"] = {{{"path", refusal->path}, {"message", refusal->detail}}};
    return Problem(refusal->status, refusal->type, refusal->title, refusal->detail, std::move(extra));
}

// A header the request gives more than once: refused rather than guessing which one counts.
std::optional<Response> Repeated(const HttpServer::Request& request, std::initializer_list<std::string_view> names) {
    for (const auto name : names) {
        if (request.message.count(boost::beast::string_view(name.data(), name.size())) > 1) {
            return Problem(400,
                           "repeated-header",
                           "Repeated header",
                           "the request has " + std::string(name) + " more than once; send it once");
        }
    }
    return std::nullopt;
}

JsonLimits JsonLimitsOf(const HttpConfig& http) {
    return {http.max_body_bytes, http.max_json_depth};
}

// Sagas started over HTTP carry "<client>:<Idempotency-Key>" as their key (StartSaga), so the
// client that started one is its key's prefix; a client name holds no ':' (checked at start).
bool StartedBy(const SagaView& saga, const std::string& client) {
    const auto& key = saga.idempotency_key;
    return !client.empty() && key.size() > client.size() && key.compare(0, client.size(), client) == 0 &&
           key[client.size()] == ':';
}

Response UnsupportedMediaType() {
    return Problem(415, "unsupported-media-type", "Unsupported media type", "send Content-Type: application/json");
}

bool ValidSagaType(const std::string& type) {
    return text::IsKebabName(type, 64);
}

// 1..255 visible ASCII characters.
bool ValidIdempotencyKey(std::string_view key) {
    if (key.empty() || key.size() > 255) return false;
    return std::all_of(key.begin(), key.end(), [](char c) { return c >= 0x21 && c <= 0x7e; });
}

// The answer to a start the engine refuses before any database work.
Response Refused(const StartResult& result) {
    if (result.status == StartResult::Status::kUnknownType) {
        return Problem(404, "unknown-saga-type", "Unknown saga type", result.message);
    }
    nlohmann::json list = nlohmann::json::array();
    for (const auto& e : result.errors) list.push_back({{"path", e.path}, {"message", e.message}});
    return Problem(422, "invalid-input", "Invalid input", result.message, {{"errors", list}});
}

std::string Label(std::string value) {  // Prometheus label value escaping
    std::string out;
    for (const char c : value) {
        if (c == '\\' || c == '"') out += '\\';
        if (c == '\n') {
            out += "\\n";
            continue;
        }
        out += c;
    }
    return out;
}

// The answer to a request that threw; logged. Nothing of it was stored, so the client's retry with
// the same Idempotency-Key is safe: at once after an internal error (500), after Retry-After when
// the database is away (503: out of disk, restarting, read-only, connection lost).
Response Failed(const std::string& method, const std::string& target, const std::exception& e) {
    if (store::IsTransientDatabaseError(e)) {
        spdlog::error("http: {} {}: {}", method, target, store::ExplainDatabaseError(e));
        auto r =
            Problem(503,
                    "database-unavailable",
                    "Database unavailable",
                    store::TransientCause(e) + "; nothing was stored: retry shortly with the same Idempotency-Key");
        r.headers.emplace_back("Retry-After", "5");
        return r;
    }
    spdlog::error("http: {} {}: {}", method, target, e.what());
    return Problem(500,
                   "internal-error",
                   "Internal error",
                   "the request failed inside the server; it was not stored, so retrying with the same "
                   "Idempotency-Key is safe");
}

}  // namespace

// The client a bearer token names, or null. Every configured token is compared in full, in time
// that depends on the lengths only, so response times do not reveal how much of a token matched.
const std::string* HttpServer::FindToken(const std::string& presented) const {
    const std::string* found = nullptr;
    for (const auto& [token, client] : config_.http.tokens) {
        unsigned char difference = token.size() == presented.size() ? 0 : 1;
        for (std::size_t i = 0; i < token.size(); ++i) {
            difference |= static_cast<unsigned char>(token[i] ^ (i < presented.size() ? presented[i] : '\0'));
        }
        if (difference == 0) found = &client;
    }
    return found;
}

HttpServer::HttpServer(asio::io_context& io,
                       SagaCommands& sagas,
                       std::function<EngineMetrics()> metrics,
                       const EngineConfig& config)
    : io_(io), sagas_(sagas), metrics_(std::move(metrics)), config_(config), acceptor_(io), accept_pause_(io) {
    store::ValidateTtl(config_.http.idempotency_ttl);
    for (const auto& [token, client] : config_.http.tokens) {
        if (client.empty() || client.find(':') != std::string::npos) {
            throw EngineError("http: the client name " + text::Quote(client, 64) +
                              " is empty or holds ':'. Hint: name each client with letters, digits and '-'");
        }
    }
}

HttpServer::~HttpServer() {
    Stop();
}

void HttpServer::Start() {
    if (workers_) throw EngineError("http: Start() called twice. Hint: call Stop() before starting again");
    const auto address = asio::ip::make_address(config_.http.address);
    loopback_ = address.is_loopback();
    if (config_.http.tokens.empty() && !loopback_) {
        if (!config_.http.allow_unauthenticated) {
            throw EngineError("http: refusing to serve " + config_.http.address + ":" +
                              std::to_string(config_.http.port) +
                              " without tokens: anyone who can reach it could start sagas. Hint: set http.tokens "
                              "(sagaflow run --http-token TOKEN=CLIENT), listen on 127.0.0.1, or accept it with "
                              "http.allow_unauthenticated: true (--http-allow-unauthenticated)");
        }
        spdlog::warn(
            "http: serving {} without tokens (http.allow_unauthenticated): anyone who can reach it may "
            "start and read sagas; listing, retrying and cancelling need an operator's token",
            config_.http.address);
    }
    connection_cap_ = ConnectionCap(config_.http.max_connections);
    const tcp::endpoint endpoint{address, static_cast<unsigned short>(config_.http.port)};
    boost::system::error_code ec;
    acceptor_.open(endpoint.protocol(), ec);
    if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_.bind(endpoint, ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
        boost::system::error_code ignored;
        acceptor_.close(ignored);
        throw EngineError("cannot listen on " + config_.http.address + ":" + std::to_string(config_.http.port) + ": " +
                          ec.message() + ". Hint: choose another http port, or stop what uses it");
    }
    port_ = acceptor_.local_endpoint().port();
    const auto counters = metrics_();
    rates_.Sample(std::chrono::steady_clock::now(), counters.sagas_started, counters.sagas_finished);
    workers_ = std::make_unique<asio::thread_pool>(static_cast<std::size_t>(std::max(1, config_.http.worker_threads)));
    asio::post(io_, [this] {
        open_ = true;
        Accept();
    });
    spdlog::info("http: listening on {}:{}", config_.http.address, port_.load());
}

void HttpServer::Stop() {
    if (!workers_) return;
    asio::post(io_, [this] { Close(); });
    // Sessions end within a request's work and one write (bounded by io_timeout) once the gate is
    // closed; past that the io_context is not running, and what is left ends with it.
    const auto bound = config_.http.io_timeout + std::chrono::seconds(10);
    std::unique_lock lock(gate_->mutex);
    if (!gate_->empty.wait_for(lock, bound, [this] { return gate_->sessions == 0; })) {
        spdlog::warn(
            "http: {} connection(s) still open {} s after stop; closing anyway", gate_->sessions, bound.count());
    }
    lock.unlock();
    workers_->join();
    workers_.reset();
    spdlog::info("http: stopped");
}

void HttpServer::Gate::Leave(tcp::socket* socket) {
    reading.erase(socket);
    std::lock_guard lock(mutex);
    if (--sessions == 0) empty.notify_all();
}

void HttpServer::Close() {
    open_ = false;
    boost::system::error_code ignored;
    acceptor_.close(ignored);
    accept_pause_.cancel();
    // A session waiting for its next request ends now; one with a request in progress answers it
    // with Connection: close and ends then.
    for (const auto& [socket, reading] : gate_->reading) {
        if (reading) socket->cancel(ignored);
    }
}

// The connections the process's open-files limit leaves room for: each takes a descriptor, and
// the database pool, the Kafka clients and the files need theirs. Below http.max_connections it
// is logged once, with the fix.
int HttpServer::ConnectionCap(int configured) {
    rlimit limit{};
    if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return configured;
    std::error_code ec;
    long open = 0;
    for (auto it = std::filesystem::directory_iterator("/proc/self/fd", ec);
         !ec && it != std::filesystem::directory_iterator();
         it.increment(ec)) {
        ++open;
    }
    constexpr long kReserve = 64;  // reconnecting clients, log files, a 503 past the cap
    const long room = static_cast<long>(limit.rlim_cur) - open - kReserve;
    const int cap = static_cast<int>(std::clamp<long>(room, 1, configured));
    if (cap < configured) {
        spdlog::warn(
            "http: the open-files limit ({}, {} in use) leaves room for {} connections, not "
            "http.max_connections = {}; more get 503. Hint: raise it (ulimit -n, LimitNOFILE=)",
            static_cast<long>(limit.rlim_cur),
            open,
            cap,
            configured);
    }
    return cap;
}

void HttpServer::Accept() {
    acceptor_.async_accept([this](boost::system::error_code accept_error, tcp::socket socket) {
        if (!open_ || !acceptor_.is_open()) return;  // stopping
        if (accept_error) {
            // Out of descriptors (EMFILE, ENFILE), a connection aborted before it was taken, no
            // buffers: none of them ends the server. The connection waits in the backlog; accepting
            // resumes after a pause, so a descriptor shortage does not spin the io thread.
            if (const auto unlogged = accept_failures_.Due()) {
                spdlog::error("http: accept failed ({}); accepting again in 100 ms{}",
                              accept_error.message(),
                              *unlogged == 0 ? "" : fmt::format(" ({} more since the last line)", *unlogged));
            }
            accept_pause_.expires_after(std::chrono::milliseconds(100));
            accept_pause_.async_wait([this](const boost::system::error_code& ec) {
                if (!ec && open_) Accept();
            });
            return;
        }
        bool over_cap = false;
        {
            std::lock_guard lock(gate_->mutex);
            over_cap = gate_->sessions >= connection_cap_;
            ++gate_->sessions;
        }
        asio::co_spawn(io_, Serve(std::move(socket), over_cap), asio::detached);
        Accept();
    });
}

namespace {

// A query value as a browser's form encoding sends it: %XX is the byte, '+' a space. A '%' not
// followed by two hex digits stays as it is.
std::string QueryDecode(std::string_view text) {
    std::string out;
    for (std::size_t i = 0; i < text.size(); ++i) {
        const auto hex = [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; };
        if (text[i] == '%' && i + 2 < text.size() && hex(text[i + 1]) && hex(text[i + 2])) {
            out += static_cast<char>(std::stoi(std::string(text.substr(i + 1, 2)), nullptr, 16));
            i += 2;
        } else {
            out += text[i] == '+' ? ' ' : text[i];
        }
    }
    return out;
}

// The request's path and query from its target.
void SplitTarget(HttpServer::Request& request, const std::string& target) {
    const auto q = target.find('?');
    request.path = target.substr(0, q);
    if (q == std::string::npos) return;
    std::istringstream in(target.substr(q + 1));
    std::string pair;
    while (std::getline(in, pair, '&')) {
        const auto eq = pair.find('=');
        if (eq != std::string::npos) request.query[QueryDecode(pair.substr(0, eq))] = QueryDecode(pair.substr(eq + 1));
    }
}

// The answer to a request the parser refused; the connection closes after it.
Response Unreadable(const boost::system::error_code& ec, const HttpConfig& config) {
    if (ec == http::error::body_limit) {
        return Problem(413,
                       "body-too-large",
                       "Request body too large",
                       fmt::format("the body exceeds {} bytes", config.max_body_bytes));
    }
    if (ec == http::error::header_limit) {
        return Problem(431,
                       "headers-too-large",
                       "Request headers too large",
                       fmt::format("the headers exceed {} bytes", config.max_header_bytes));
    }
    return Problem(400, "malformed-request", "Malformed HTTP request", ec.message());
}

}  // namespace

// GCC 12 at -O2 reports asio's coroutine frame, allocated by its own operator new and freed by its
// own operator delete, as a mismatched pair once the frame's allocation is inlined here (a false
// positive of -Wmismatched-new-delete on every awaitable member function).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
asio::awaitable<void> HttpServer::Serve(tcp::socket socket, bool over_cap) {
    beast::tcp_stream stream(std::move(socket));
    auto* const key = &stream.socket();
    struct Member {
        std::shared_ptr<Gate> gate;
        tcp::socket* key;
        ~Member() { gate->Leave(key); }
    } member{gate_, key};
    bool& reading = gate_->reading[key];
    beast::flat_buffer buffer;
    boost::system::error_code ec;
    const auto send = [&](Response r, bool keep_alive) -> asio::awaitable<void> {
        http::response<http::string_body> res{static_cast<http::status>(r.status), 11};
        res.set(http::field::server, "sagaflow");
        res.set(http::field::content_type, r.content_type);
        for (const auto& [name, value] : r.headers) res.set(name, value);
        res.body() = std::move(r.body);
        res.keep_alive(keep_alive);
        res.prepare_payload();
        stream.expires_after(config_.http.io_timeout);
        co_await http::async_write(stream, res, asio::redirect_error(asio::use_awaitable, ec));
    };
    if (over_cap) {
        auto r = Problem(503,
                         "too-many-connections",
                         "Too many connections",
                         "the server holds its connection limit; retry shortly");
        r.headers.emplace_back("Retry-After", "1");
        co_await send(std::move(r), false);
    }
    // Each request must arrive whole, headers and body, within io_timeout of the previous answer
    // (or of the connection): an idle or trickling client is cut off without holding a worker.
    while (!over_cap && open_) {
        http::request_parser<http::string_body> parser;
        parser.body_limit(config_.http.max_body_bytes);
        parser.header_limit(static_cast<std::uint32_t>(config_.http.max_header_bytes));
        stream.expires_after(config_.http.io_timeout);
        reading = true;
        co_await http::async_read(stream, buffer, parser, asio::redirect_error(asio::use_awaitable, ec));
        reading = false;
        if (!open_ || ec == http::error::end_of_stream || ec == beast::error::timeout ||
            ec == asio::error::connection_reset || ec == asio::error::eof || ec == asio::error::operation_aborted) {
            break;
        }
        if (ec) {  // bad input gets an answer naming the cause, then the connection closes
            co_await send(Unreadable(ec, config_.http), false);
            break;
        }
        auto request = std::make_shared<Request>();
        request->message = parser.release();
        const std::string target(request->message.target());
        SplitTarget(*request, target);
        // The request's database work runs on a worker thread, and this coroutine resumes here,
        // on the io thread, with the answer. (`co_await asio::post(*workers_, use_awaitable)`
        // would not move it: its handler resumes on the coroutine's own executor.) Stop() waits
        // for this session before it resets the workers.
        Response response = co_await asio::co_spawn(
            *workers_,
            [&]() -> asio::awaitable<Response> {
                store::NameThisThreadOnce("sf-http");
                try {
                    co_return Handle(*request);
                } catch (const std::exception& e) {
                    co_return Failed(std::string(request->message.method_string()), target, e);
                }
            },
            asio::use_awaitable);
        const bool keep_alive = request->message.keep_alive() && open_;
        co_await send(std::move(response), keep_alive);
        if (ec || !keep_alive) break;
    }
    stream.socket().shutdown(tcp::socket::shutdown_send, ec);
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

HttpServer::Response HttpServer::Handle(const Request& request) {
    const auto& m = request.message;
    const auto route = Resolve(std::string(m.method_string()), request.path);
    if (!route.endpoint && route.allow.empty() && !route.api) {
        return Problem(404, "not-found", "Not found", "no resource at " + text::Quote(request.path, 200));
    }
    // Under /v1, with tokens configured, a bearer token names the client before anything else.
    std::string client;
    if (route.api && !config_.http.tokens.empty()) {
        const std::string auth(m[http::field::authorization]);
        const auto found = auth.rfind("Bearer ", 0) == 0 ? FindToken(auth.substr(7)) : nullptr;
        if (found == nullptr) {
            auto r = Problem(401, "unauthorized", "Unauthorized", "send Authorization: Bearer <token>");
            r.headers.emplace_back("WWW-Authenticate", "Bearer");
            return r;
        }
        client = *found;
    }
    if (!route.allow.empty()) {
        auto r = Problem(405, "method-not-allowed", "Method not allowed", "use " + route.allow);
        r.headers.emplace_back("Allow", route.allow);
        return r;
    }
    if (!route.endpoint)
        return Problem(404, "not-found", "Not found", "no resource at " + text::Quote(request.path, 200));
    // Without tokens everyone is an operator on a loopback address only.
    const bool operator_allowed = config_.http.tokens.empty() ? loopback_ : client.rfind("operator", 0) == 0;
    if (route.operator_only && !operator_allowed) {
        if (config_.http.tokens.empty()) {
            return Problem(403,
                           "operator-token-required",
                           "Forbidden",
                           "listing, retrying and cancelling sagas need an operator's token on a non-loopback "
                           "address. Hint: set http.tokens with a client named operator-...");
        }
        return Problem(403, "forbidden", "Forbidden", "client '" + client + "' may not do this; operators may");
    }
    // With tokens a client reads only the sagas it started (404 for the others, as for no saga);
    // operators, and everyone where there are no tokens, read all.
    const bool reads_all = config_.http.tokens.empty() || operator_allowed;
    const auto may_read = [&](const SagaView& saga) { return reads_all || StartedBy(saga, client); };
    const std::string& id = route.argument;
    switch (*route.endpoint) {
        case Endpoint::kHealth:
            return Json(200, {{"status", "ok"}});
        case Endpoint::kReady:
            return Ready();
        case Endpoint::kMetrics:
            return Metrics();
        case Endpoint::kListSagas:
            return ListSagas(request);
        case Endpoint::kStartSaga:
            return StartSaga(request, id, client);
        case Endpoint::kGetSaga: {
            const auto saga_id = SagaId::Parse(id);
            const auto saga = saga_id ? sagas_.Get(*saga_id) : std::nullopt;
            if (!saga || !may_read(*saga)) {
                return Problem(404, "saga-not-found", "Saga not found", "no saga " + text::Quote(id, 64));
            }
            return Json(200, SagaJson(*saga));
        }
        case Endpoint::kSagaGraph:
            return SagaGraph(request, id, may_read);
        case Endpoint::kRetrySaga: {
            const auto saga_id = SagaId::Parse(id);
            const auto result = saga_id ? sagas_.Retry(*saga_id) : SagaCommands::NoSaga<RetryResult>(id);
            switch (result.status) {
                case RetryResult::Status::kResumed:
                    return Json(202, {{"sagaId", id}, {"status", "resumed"}, {"detail", result.message}});
                case RetryResult::Status::kNotFound:
                    return Problem(404, "saga-not-found", "Saga not found", result.message);
                case RetryResult::Status::kNotParked:
                    return Problem(409, "saga-not-parked", "Saga not parked", result.message);
            }
            break;
        }
        case Endpoint::kCancelSaga:
            return CancelSaga(request, id, client);
        case Endpoint::kOverview:
            return Overview();
        case Endpoint::kConsole:
            return Console(id);
    }
    return Problem(404, "not-found", "Not found", "no resource at " + text::Quote(request.path, 200));
}

// GET /v1/sagas?status=&type=&cursor=&limit=: a page, newest first.
HttpServer::Response HttpServer::ListSagas(const Request& request) {
    ListQuery query;
    const auto get = [&](const char* key) {
        const auto it = request.query.find(key);
        return it == request.query.end() ? std::string() : it->second;
    };
    const std::string status = get("status");
    query.status = machine::ParseSagaStatus(status);
    query.saga_type = get("type");
    query.cursor = get("cursor");
    if (!status.empty() && !query.status) {
        return Problem(400,
                       "invalid-query",
                       "Invalid query",
                       "status must be one of running, compensating, completed, compensated, failed");
    }
    if (!query.saga_type.empty() && !ValidSagaType(query.saga_type)) {
        return Problem(400, "invalid-query", "Invalid query", "type is not a saga type name");
    }
    if (!query.cursor.empty() && !store::IsUuid(query.cursor)) {
        return Problem(400, "invalid-query", "Invalid query", "cursor must be the nextCursor of a previous page");
    }
    const auto digits = [](const std::string& text, std::size_t max_size) {
        return !text.empty() && text.size() <= max_size &&
               std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
    };
    if (const auto limit = get("limit"); !limit.empty()) {
        if (!digits(limit, 3) || std::stoi(limit) < 1 || std::stoi(limit) > 500) {
            return Problem(400, "invalid-query", "Invalid query", "limit must be 1..500");
        }
        query.limit = std::stoi(limit);
    }
    query.idempotency_key = get("key");
    if (!query.idempotency_key.empty() && !ValidIdempotencyKey(query.idempotency_key)) {
        return Problem(400, "invalid-query", "Invalid query", "key must be 1..255 visible ASCII characters");
    }
    // With tokens, a start stores its key as "<client>:<key>": the key is looked up for every client.
    for (const auto& [token, client] : config_.http.tokens) query.key_scopes.push_back(client);
    query.id_prefix = get("idPrefix");
    for (const auto& [name, age] : {std::pair{"minAge", &query.min_age}, std::pair{"maxAge", &query.max_age}}) {
        const auto value = get(name);
        if (value.empty()) continue;
        if (!digits(value, 9)) {
            return Problem(
                400, "invalid-query", "Invalid query", std::string(name) + " must be a whole number of seconds");
        }
        *age = std::chrono::seconds(std::stoll(value));
    }
    if (!ListIdRange(query, std::chrono::system_clock::now())) {
        return Problem(400,
                       "invalid-query",
                       "Invalid query",
                       "idPrefix must be the first 1..32 hexadecimal digits of a saga id (hyphens may be kept)");
    }
    const auto page = sagas_.List(query);
    nlohmann::json items = nlohmann::json::array();
    for (const auto& s : page.items) {
        items.push_back(
            {{"sagaId", s.saga_id},
             {"type", s.saga_type},
             {"status", machine::ToString(s.status)},
             {"createdAt", s.created_at},
             {"updatedAt", s.updated_at},
             {"idempotencyKey", s.idempotency_key.empty() ? nlohmann::json() : nlohmann::json(s.idempotency_key)},
             {"links", {{"self", "/v1/sagas/" + s.saga_id}}}});
    }
    nlohmann::json body{{"items", items}};
    body["nextCursor"] = page.next_cursor.empty() ? nlohmann::json() : nlohmann::json(page.next_cursor);
    return Json(200, body);
}

// GET /v1/overview: sagas per status, the oldest open saga, the outbox's backlog, and this
// engine's starts and finishes per minute (from the counters /metrics exports).
HttpServer::Response HttpServer::Overview() {
    const auto o = sagas_.Overview();
    const auto m = metrics_();
    const auto per_minute = rates_.Sample(std::chrono::steady_clock::now(), m.sagas_started, m.sagas_finished);
    const auto rate = [](const std::optional<double>& value) {
        return value ? nlohmann::json(*value) : nlohmann::json();
    };
    nlohmann::json counts = nlohmann::json::object();
    for (const auto& [status, n] : o.counts) counts[status] = n;
    nlohmann::json oldest;
    if (!o.oldest_open_id.empty()) {
        oldest = {{"sagaId", o.oldest_open_id},
                  {"createdAt", o.oldest_open_created_at},
                  {"ageSeconds", o.oldest_open_seconds}};
    }
    return Json(
        200,
        {{"counts", counts},
         {"countsEstimated", o.estimated ? nlohmann::json{"completed", "compensated"} : nlohmann::json::array()},
         {"parked", o.counts.at("failed")},
         {"types", o.saga_types},
         {"oldestOpen", oldest},
         {"outbox", {{"backlog", o.outbox_backlog}, {"oldestUnpublishedSeconds", o.oldest_unpublished_seconds}}},
         {"thisEngine",
          {{"started", m.sagas_started},
           {"finished", m.sagas_finished},
           {"startedPerMinute", rate(per_minute.first)},
           {"finishedPerMinute", rate(per_minute.second)}}}});
}

// GET /ui/...: the console's files, with the headers that keep it to its own origin.
HttpServer::Response HttpServer::Console(const std::string& name) {
    if (name.empty()) {
        Response r{308, "text/plain; charset=utf-8", "/ui/\n", {}};
        r.headers.emplace_back("Location", "/ui/");
        return r;
    }
    const auto* file = FindConsoleFile(name);
    if (file == nullptr) return Problem(404, "not-found", "Not found", "the console has no file " + name);
    Response r{200, std::string(file->content_type), std::string(file->body), {}};
    r.headers.emplace_back("Content-Security-Policy", std::string(kConsoleSecurityPolicy));
    r.headers.emplace_back("X-Content-Type-Options", "nosniff");
    r.headers.emplace_back("Referrer-Policy", "no-referrer");
    r.headers.emplace_back("Cache-Control", "no-cache");
    return r;
}

// GET /v1/sagas/{id}/graph?format=mermaid|dot|svg
HttpServer::Response HttpServer::SagaGraph(const Request& request,
                                           const std::string& saga_id,
                                           const std::function<bool(const SagaView&)>& may_read) {
    const auto it = request.query.find("format");
    const auto format = ParseGraphFormat(it == request.query.end() ? "mermaid" : it->second);
    if (!format) return Problem(400, "invalid-query", "Invalid query", "format must be mermaid, dot or svg");
    const auto id = SagaId::Parse(saga_id);
    const auto graph = id ? sagas_.Graph(*id, *format, may_read) : std::nullopt;
    if (!graph) return Problem(404, "saga-not-found", "Saga not found", "no saga " + text::Quote(saga_id, 64));
    return {200, GraphMediaType(*format), *graph, {}};
}

namespace {

// The class of the transaction-scoped advisory locks on idempotency keys (the two-int form, apart
// from the one-bigint lock of the migrations and from applications' own bigint locks): "idem".
constexpr int kIdempotencyLockClass = 0x6964656d;

// The answer for a key this request could not claim: the stored response, 409 for another body or
// a request still in progress — or nullopt when the record is a dead server's claim that this
// request (holding the key's lock) has taken over.
std::optional<Response> AnswerFromRecord(pqxx::transaction_base& tx,
                                         const std::string& scope,
                                         const std::string& key,
                                         const std::string& hash,
                                         bool lock_held) {
    const auto in_progress = [] {
        auto r = Problem(409,
                         "request-in-progress",
                         "Request in progress",
                         "the first request with this key is still being processed; retry shortly");
        r.headers.emplace_back("Retry-After", "1");
        return r;
    };
    const auto row =
        store::Exec(tx,
                    "SELECT r.command_hash, r.state, coalesce(r.http_status, 0), coalesce(r.response::text, "
                    "''), r.created_at < now() - interval '30 seconds', s.status FROM idempotency_record r "
                    "LEFT JOIN saga_instance s ON s.saga_id = r.saga_id WHERE r.scope = $1 AND "
                    "r.idempotency_key = $2",
                    scope,
                    key);
    if (row.empty()) return in_progress();  // its first request has not committed yet
    if (row[0][0].as<std::string>() != hash) {
        return Problem(409,
                       "idempotency-key-reused",
                       "Idempotency-Key reused",
                       "this key was used with another body; use a new key for a new request");
    }
    if (row[0][1].as<std::string>() == "completed") {
        // jsonb re-spaces the stored body: serialise it again the way it was first sent, with the
        // saga's status as it is now (the stored one is the status at its start).
        auto body = nlohmann::json::parse(row[0][3].as<std::string>());
        if (!row[0][5].is_null() && body.is_object() && body.contains("status")) {
            body["status"] = row[0][5].as<std::string>();
        }
        Response r{row[0][2].as<unsigned>(), "application/json", body.dump(), {}};
        if (r.status >= 400) r.content_type = "application/problem+json";
        if (r.status == 201 && body.is_object() && body.contains("sagaId") && body["sagaId"].is_string()) {
            r.headers.emplace_back("Location", "/v1/sagas/" + body["sagaId"].get<std::string>());
        }
        r.headers.emplace_back("Idempotent-Replayed", "true");
        return r;
    }
    if (!lock_held || !row[0][4].as<bool>()) return in_progress();
    store::Exec(
        tx, "UPDATE idempotency_record SET created_at = now() WHERE scope = $1 AND idempotency_key = $2", scope, key);
    return std::nullopt;
}

}  // namespace

// POST /v1/sagas/{type}: the Idempotency-Key protocol (rule R-DIST-IDEM-3).
// POST /v1/sagas/{id}/cancel, with an optional body {"reason": "..."}. Answers by the saga's state,
// so a client may repeat it: 202 when this call cancelled it, 200 when it is compensating or
// compensated already, 409 past its point of no return or after its end.
HttpServer::Response HttpServer::CancelSaga(const Request& request,
                                            const std::string& saga_id,
                                            const std::string& client) {
    const auto& m = request.message;
    std::string reason;
    if (!m.body().empty()) {
        if (auto problem = Repeated(request, {"Content-Type"})) return std::move(*problem);
        if (!IsJsonContentType(m[http::field::content_type])) return UnsupportedMediaType();
        nlohmann::json body;
        if (auto problem = ParseObject(m.body(), JsonLimitsOf(config_.http), body)) return std::move(*problem);
        const auto invalid = [](const std::string& field, const std::string& message) {
            return Problem(422,
                           "invalid-input",
                           "Invalid input",
                           "the body may only have \"reason\", a string of up to 1000 bytes",
                           {{"errors", {{{"path", field}, {"message", message}}}}});
        };
        for (const auto& [key, value] : body.items()) {
            if (key != "reason") return invalid(key, "unknown field");
            if (!value.is_string() || value.get_ref<const std::string&>().size() > 1000) {
                return invalid(key, "must be a string of up to 1000 bytes");
            }
            reason = value.get<std::string>();
        }
    }
    if (!client.empty()) reason = reason.empty() ? "by " + client : reason + " (by " + client + ")";
    const auto id = SagaId::Parse(saga_id);
    const auto result = id ? sagas_.Cancel(*id, reason) : SagaCommands::NoSaga<CancelResult>(saga_id);
    const std::string status = result.saga_status ? std::string(machine::ToString(*result.saga_status)) : "";
    const nlohmann::json answer{{"sagaId", saga_id},
                                {"status", status},
                                {"detail", result.message},
                                {"links", {{"self", "/v1/sagas/" + saga_id}}}};
    switch (result.status) {
        case CancelResult::Status::kCancelled:
            return Json(202, answer);
        case CancelResult::Status::kAlreadyCompensating:
            return Json(200, answer);
        case CancelResult::Status::kNotFound:
            return Problem(404, "saga-not-found", "Saga not found", result.message);
        case CancelResult::Status::kNotCancellable:
            return Problem(
                409, "saga-not-cancellable", "Saga not cancellable", result.message, {{"sagaStatus", status}});
    }
    return Problem(500, "internal-error", "Internal error", "unexpected cancel result");
}

// POST /v1/sagas/{type}: the Idempotency-Key protocol (rule R-DIST-IDEM-3).
HttpServer::Response HttpServer::StartSaga(const Request& request, const std::string& type, const std::string& client) {
    const auto& m = request.message;
    if (!ValidSagaType(type) || !sagas_.Knows(type)) {
        return Problem(
            404, "unknown-saga-type", "Unknown saga type", "no saga type " + text::Quote(type, 64) + " is registered");
    }
    if (auto problem = Repeated(request, {"Idempotency-Key", "Content-Type"})) return std::move(*problem);
    const auto key_field = m.find("Idempotency-Key");
    if (key_field == m.end()) {
        return Problem(400,
                       "idempotency-key-missing",
                       "Idempotency-Key required",
                       "send an Idempotency-Key header (1-255 visible ASCII characters), the same on every retry");
    }
    const std::string key(key_field->value());
    if (!ValidIdempotencyKey(key)) {
        return Problem(400,
                       "idempotency-key-invalid",
                       "Invalid Idempotency-Key",
                       "the key must be 1-255 visible ASCII characters");
    }
    if (!IsJsonContentType(m[http::field::content_type])) return UnsupportedMediaType();
    nlohmann::json body;
    if (auto problem = ParseObject(m.body(), JsonLimitsOf(config_.http), body)) return std::move(*problem);
    nlohmann::json input = body;
    // Checked before the key is claimed: a 422 needs no database work and is not stored (the same
    // body always fails the same way). The start uses this definition and the input with its defaults.
    std::shared_ptr<const SagaDefinition> definition;
    if (const auto refusal = sagas_.Refusal(type, input, definition)) return Refused(*refusal);
    const std::string scope = "saga:" + type + (client.empty() ? "" : ":" + client);
    const std::string saga_key = client.empty() ? key : client + ":" + key;
    const std::string hash = CanonicalHash(body);
    // The caller's trace context rides along with every command (not part of the request's identity:
    // a retry from another span replays the same saga).
    const TraceContext trace{std::string(m["traceparent"]), std::string(m["tracestate"])};
    const auto ttl_hours = std::to_string(config_.http.idempotency_ttl.count());
    auto& pool = sagas_.Pool();

    // One transaction: claim the key, start the saga, store the answer, commit once. Requests with
    // the same key meet at a transaction-scoped advisory lock on (scope, key), tried without
    // waiting: the one holding it is "in progress" for the others (409, nothing waits behind a
    // start), and its claim, saga and answer become visible together — or, if anything fails, not
    // at all (nothing to release: the client's retry starts afresh). An `in_progress` record that
    // was committed (by an engine before this one, which claimed in a transaction of its own) and
    // is older than 30 s belongs to a server that died: it is taken over.
    PendingStart pending;
    std::optional<StartResult> started;  // none when the record answered (a replay, a key in use)
    // Three round trips for a new saga: BEGIN with the claim, the start, the answer with COMMIT.
    Response response = pool.RunBlocking([&](pqxx::connection& conn) -> Response {
        store::Transaction tx{
            conn,
            store::Statement{
                "WITH lock AS (SELECT pg_try_advisory_xact_lock(" + std::to_string(kIdempotencyLockClass) +
                    ", hashtext($1 || chr(31) || $2)) AS held), claim AS (INSERT INTO idempotency_record (scope, "
                    "idempotency_key, command_hash, state, expires_at) SELECT $1, $2, $3, 'in_progress', now() + "
                    "$4::int * interval '1 hour' FROM lock WHERE held ON CONFLICT DO NOTHING RETURNING 1) SELECT "
                    "held, EXISTS (SELECT 1 FROM claim) FROM lock",
                {scope, key, hash, ttl_hours}}};
        const auto& claim = tx.First();
        const bool held = claim[0][0].as<bool>();
        if (!claim[0][1].as<bool>()) {
            if (auto answer = AnswerFromRecord(tx.Work(), scope, key, hash, held)) return std::move(*answer);
        }
        StartResult result = sagas_.StartIn(tx.Work(), *definition, type, input, saga_key, trace, pending);
        Response r = result.status == StartResult::Status::kConflict
                         ? Problem(409, "idempotency-key-reused", "Idempotency-Key reused", result.message)
                         : Json(result.status == StartResult::Status::kStarted ? 201 : 200,
                                {{"sagaId", result.saga_id},
                                 {"status", "running"},
                                 {"links", {{"self", "/v1/sagas/" + result.saga_id}}}});
        tx.Commit(
            store::Statement{"UPDATE idempotency_record SET state = 'completed', http_status = $3::int, "
                             "response = $4::jsonb, saga_id = $5::uuid WHERE scope = $1 AND idempotency_key = $2",
                             {scope, key, std::to_string(r.status), r.body, result.saga_id}});
        started = std::move(result);
        return r;
    });
    if (started) sagas_.Committed(*started, pending);
    if (started && response.status == 201) response.headers.emplace_back("Location", "/v1/sagas/" + started->saga_id);
    return response;
}

HttpServer::Response HttpServer::Metrics() {
    const auto m = metrics_();
    const auto g = sagas_.Gauges();
    std::ostringstream out;
    out << "# HELP sagaflow_sagas Open sagas (running, compensating) and parked ones (failed) by type and status.\n"
           "# TYPE sagaflow_sagas gauge\n";
    long long parked = 0;
    for (const auto& [key, count] : g.sagas) {
        out << "sagaflow_sagas{type=\"" << Label(key.first) << "\",status=\"" << key.second << "\"} " << count << "\n";
        if (key.second == "failed") parked += count;
    }
    out << "# HELP sagaflow_sagas_parked Sagas parked as failed, waiting for an operator.\n"
           "# TYPE sagaflow_sagas_parked gauge\nsagaflow_sagas_parked "
        << parked << "\n";
    out << "# HELP sagaflow_step_latency_seconds Step phase latency, dispatch to answer.\n"
           "# TYPE sagaflow_step_latency_seconds histogram\n";
    for (const auto& [step, h] : m.step_latency) {
        for (std::size_t b = 0; b < StepLatency::kBuckets.size(); ++b) {
            out << "sagaflow_step_latency_seconds_bucket{step=\"" << Label(step) << "\",le=\""
                << StepLatency::kBuckets[b] << "\"} " << h.counts[b] << "\n";
        }
        out << "sagaflow_step_latency_seconds_bucket{step=\"" << Label(step) << "\",le=\"+Inf\"} " << h.count << "\n";
        out << "sagaflow_step_latency_seconds_sum{step=\"" << Label(step) << "\"} " << h.sum << "\n";
        out << "sagaflow_step_latency_seconds_count{step=\"" << Label(step) << "\"} " << h.count << "\n";
    }
    const auto counter = [&](const char* name, const char* help, std::uint64_t value) {
        out << "# HELP " << name << " " << help << "\n# TYPE " << name << " counter\n" << name << " " << value << "\n";
    };
    out << "# HELP sagaflow_outbox_backlog Outbox rows not yet published.\n# TYPE sagaflow_outbox_backlog gauge\n"
        << "sagaflow_outbox_backlog " << g.outbox_backlog << "\n";
    out << "# HELP sagaflow_outbox_oldest_unpublished_seconds Age of the oldest unpublished outbox row.\n"
           "# TYPE sagaflow_outbox_oldest_unpublished_seconds gauge\nsagaflow_outbox_oldest_unpublished_seconds "
        << g.oldest_unpublished_seconds << "\n";
    counter("sagaflow_inbox_duplicates_total", "Replies dropped by the inbox as duplicates.", m.reply_duplicates);
    counter("sagaflow_relay_errors_total",
            "Outbox produce failures retried and relay batches left unmarked (published again).",
            m.relay_errors);
    counter("sagaflow_sagas_started_total", "Sagas started by this engine.", m.sagas_started);
    counter("sagaflow_sagas_finished_total",
            "Sagas this engine brought to an end (completed, compensated or parked).",
            m.sagas_finished);
    counter("sagaflow_sagas_parked_total", "Sagas this engine parked as failed.", m.sagas_parked);
    counter("sagaflow_sagas_cancelled_total", "Sagas cancelled through this engine.", m.sagas_cancelled);
    counter("sagaflow_replies_ignored_total",
            "Replies recorded and ignored (stale, unknown saga, ...).",
            m.replies_ignored);
    counter("sagaflow_timers_fired_total", "Deadlines and retries fired by this engine.", m.timers_fired);
    counter("sagaflow_consumer_restarts_total",
            "Reply consumers replaced after a fatal Kafka error (e.g. a fenced static member).",
            m.consumer_restarts);
    counter("sagaflow_consumer_database_stalls_total",
            "Reply batches put back because the database could not take them (out of disk, restarting, read-only).",
            m.database_stalls);
    return {200, "text/plain; version=0.0.4", out.str(), {}};
}

HttpServer::Response HttpServer::Ready() {
    bool database = false;
    try {
        database = sagas_.Pool().RunBlocking([](pqxx::connection& conn) {
            pqxx::nontransaction tx{conn};
            return tx.exec1("SELECT 1")[0].as<int>() == 1;
        });
    } catch (const std::exception&) {
        database = false;
    }
    // The brokers are probed at most every 5 s, by one request at a time (a probe of unreachable
    // brokers takes its 2 s timeout); the others answer the last result at once, "unknown" before
    // the first probe has ended.
    const auto now = std::chrono::steady_clock::now().time_since_epoch().count();
    const auto checked = kafka_checked_ns_.load();
    if (checked == 0 || now - checked > std::chrono::steady_clock::duration(std::chrono::seconds(5)).count()) {
        bool expected = false;
        if (probing_.compare_exchange_strong(expected, true)) {
            kafka_ok_ = outbox::BrokersReachableBlocking(
                config_.kafka_brokers, config_.kafka_properties, std::chrono::milliseconds(2000));
            kafka_checked_ns_ = std::chrono::steady_clock::now().time_since_epoch().count();
            probing_ = false;
        }
    }
    const bool known = kafka_checked_ns_.load() != 0;
    const bool kafka = known && kafka_ok_.load();
    const nlohmann::json body{{"postgresql", database ? "up" : "down"},
                              {"kafka", kafka ? "up" : (known ? "down" : "unknown")}};
    if (database && kafka) return Json(200, body);
    return Problem(503, "not-ready", "Not ready", "a dependency does not answer", {{"checks", body}});
}

}  // namespace sagaflow::detail

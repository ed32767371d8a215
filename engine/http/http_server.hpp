#pragma once
// The HTTP API (Boost.Beast) on the engine's io_context. Sessions are coroutines on the io thread;
// every database call of a request hops to a small worker pool and back, so the io thread never
// blocks. Lifecycle: Start() binds and accepts (a second Start() without Stop() throws); Stop(),
// from any thread but the io thread while the io_context runs, closes the acceptor and the gate:
// idle connections are closed, a request in progress is answered (with `Connection: close`), and
// Stop() returns once every session has ended and the workers are joined. Start() after Stop()
// serves again.

#include <atomic>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>

#include "engine/engine.hpp"
#include "engine/http/rate_window.hpp"
#include "engine/orchestrator/saga_commands.hpp"
#include "store/errors.hpp"

namespace sagaflow::detail {

class HttpServer {
  public:
    // `metrics`: the engine's counters for /metrics.
    HttpServer(boost::asio::io_context& io,
               SagaCommands& sagas,
               std::function<EngineMetrics()> metrics,
               const EngineConfig& config);
    ~HttpServer();
    HttpServer(const HttpServer&) = delete;
    HttpServer& operator=(const HttpServer&) = delete;

    void Start();  // throws EngineError naming the address when it cannot bind
    void Stop();
    int Port() const noexcept { return port_.load(); }

    struct Response;  // internal
    struct Request;   // internal

  private:
    void Accept();
    boost::asio::awaitable<void> Serve(boost::asio::ip::tcp::socket socket, bool over_cap);  // one connection
    void Close();  // io thread: stop accepting, end idle sessions
    static int ConnectionCap(int configured);
    const std::string* FindToken(const std::string& presented) const;
    Response Handle(const Request& request);  // on a worker thread
    Response StartSaga(const Request& request, const std::string& type, const std::string& client);
    Response CancelSaga(const Request& request, const std::string& saga_id, const std::string& client);
    Response ListSagas(const Request& request);
    Response SagaGraph(const Request& request,
                       const std::string& saga_id,
                       const std::function<bool(const SagaView&)>& may_read);
    Response Metrics();
    Response Ready();
    Response Overview();
    Response Console(const std::string& name);

    boost::asio::io_context& io_;
    SagaCommands& sagas_;
    std::function<EngineMetrics()> metrics_;
    EngineConfig config_;
    boost::asio::ip::tcp::acceptor acceptor_;
    boost::asio::steady_timer accept_pause_;             // after an accept error (io thread)
    store::FailureLogLimit accept_failures_;             // io thread
    int connection_cap_ = 0;                             // http.max_connections, lowered to fit the open-files limit
    bool loopback_ = true;                               // the listening address is a loopback one
    std::unique_ptr<boost::asio::thread_pool> workers_;  // set by Start, reset by Stop once no session lives
    std::atomic<int> port_{0};

    // The gate: sessions enter it on the io thread and leave it when their coroutine ends (or is
    // destroyed with the io_context: hence shared); Stop closes it and waits until it is empty.
    struct Gate {
        std::map<boost::asio::ip::tcp::socket*, bool> reading;  // io thread: each session, waiting for a request?
        std::mutex mutex;
        std::condition_variable empty;
        int sessions = 0;  // under mutex
        void Leave(boost::asio::ip::tcp::socket* socket);
    };
    bool open_ = false;  // io thread
    std::shared_ptr<Gate> gate_ = std::make_shared<Gate>();

    // The overview's starts and finishes per minute, from samples of the engine's counters.
    RateWindow rates_;

    // /readyz: one caller at a time probes the brokers; the others answer the last result at once.
    std::atomic<bool> probing_{false};
    std::atomic<std::int64_t> kafka_checked_ns_{0};  // steady clock; 0: never
    std::atomic<bool> kafka_ok_{false};
};

}  // namespace sagaflow::detail

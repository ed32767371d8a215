#pragma once
// The HTTP API (Boost.Beast) on the engine's io_context. Sessions are coroutines on the io thread;
// every database call of a request hops to a small worker pool and back, so the io thread never
// blocks. Lifecycle: Start() binds and accepts; Stop() closes the acceptor, then joins the workers
// (the engine stops its io_context after that, which ends the sessions).

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <chrono>
#include <memory>
#include <mutex>

#include "engine/engine.hpp"
#include "store/errors.hpp"

namespace sagaflow::detail {

class HttpServer {
  public:
    HttpServer(boost::asio::io_context& io, Engine& engine, const EngineConfig& config);
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
    static int ConnectionCap(int configured);
    const std::string* FindToken(const std::string& presented) const;
    Response Handle(const Request& request);  // on a worker thread
    Response StartSaga(const Request& request, const std::string& type, const std::string& client);
    Response CancelSaga(const Request& request, const std::string& saga_id, const std::string& client);
    Response Metrics();
    Response Ready();

    boost::asio::io_context& io_;
    Engine& engine_;
    EngineConfig config_;
    boost::asio::ip::tcp::acceptor acceptor_;
    boost::asio::steady_timer accept_pause_;  // after an accept error (io thread)
    store::FailureLogLimit accept_failures_;  // io thread
    int connection_cap_ = 0;                  // http.max_connections, lowered to fit the open-files limit
    bool loopback_ = true;                    // the listening address is a loopback one
    std::unique_ptr<boost::asio::thread_pool> workers_;
    std::atomic<int> port_{0};
    std::atomic<int> connections_{0};
    std::mutex ready_mutex_;
    std::chrono::steady_clock::time_point kafka_checked_{};
    bool kafka_ok_ = false;
};

}  // namespace sagaflow::detail

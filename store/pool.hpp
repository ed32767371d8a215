#pragma once
// A small pool of PostgreSQL connections, one thread per connection. libpqxx blocks, so database
// work never runs on an io thread: callers Submit a job and get a future (or co_await it through
// an executor that posts here).
//
// Lifecycle: constructed -> threads connect (retrying with backoff) -> Submit() runs jobs in FIFO
// order on whichever connection is free -> BeginStop(): a job that waits for a connection (the
// database is down) fails with PoolStopped instead of waiting on, so whoever waits for it can stop
// -> Stop() (or the destructor) finishes the running jobs, fails the queued ones with
// PoolStopped, and joins the threads.
//
// A job is one transaction. If its connection breaks before commit (pqxx::broken_connection), the
// transaction rolled back, so the worker reconnects with backoff and runs the job again, up to
// `max_job_attempts` times. A break during commit is pqxx::in_doubt_error and goes to the caller:
// only it can resolve the unknown outcome (e.g. by looking up an idempotency key). A job that runs
// a statement outside a transaction block (it commits on its own) sees the same break as
// pqxx::broken_connection, and runs again: it must settle whether its first run committed (an
// engine's start runs the same statement again, which meets the first run's rows).

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <pqxx/connection>
#include <pqxx/except>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace sagaflow::store {

struct PoolOptions {
    std::string url;
    int size = 4;
    int max_job_attempts = 5;
    std::chrono::milliseconds initial_backoff{100};
    std::chrono::milliseconds max_backoff{5000};
    // Runs on every new connection (e.g. to declare prepared statements).
    std::function<void(pqxx::connection&)> on_connect;
    // Called for each connection before the pool lets go of it (lost, or the pool stopping).
    std::function<void(pqxx::connection&)> on_disconnect;
    // Called on the worker after each job that ran on a connection and returned or threw (not one
    // that lost its connection: it runs again), before its caller gets the result: whatever the
    // job committed is committed by then (outbox::LocalWake's Poke).
    std::function<void()> after_job;
};

class PoolStopped : public std::runtime_error {
  public:
    PoolStopped() : std::runtime_error("the database pool is stopped") {}
};

class ConnectionPool {
  public:
    explicit ConnectionPool(PoolOptions options);
    ~ConnectionPool();
    ConnectionPool(const ConnectionPool&) = delete;
    ConnectionPool& operator=(const ConnectionPool&) = delete;

    template <typename F>
    auto Submit(F job) -> std::future<std::invoke_result_t<F&, pqxx::connection&>> {
        auto [task, future] = MakeTask(std::move(job));
        Enqueue(std::move(task));
        return std::move(future);
    }

    // Submit and wait: for tools, tests and startup, never for io threads.
    template <typename F>
    auto RunBlocking(F job) {
        return Submit(std::move(job)).get();
    }

    // The owner is stopping: waiting for the database ends (jobs that need a connection fail with
    // PoolStopped); jobs on live connections still run. Call it before joining the threads that
    // wait for pool jobs, then Stop().
    void BeginStop();
    void Stop();
    int Size() const noexcept { return options_.size; }
    const std::string& RedactedUrl() const noexcept { return redacted_url_; }

  private:
    friend class OwnConnection;

    void AfterJob() {
        if (options_.after_job) options_.after_job();
    }

    // Runs the job on `conn`; with a non-null error it only reports it (the job was never run).
    using Task = std::function<void(pqxx::connection* conn, std::exception_ptr error)>;

    template <typename F>
    auto MakeTask(F job) -> std::pair<Task, std::future<std::invoke_result_t<F&, pqxx::connection&>>> {
        using R = std::invoke_result_t<F&, pqxx::connection&>;
        auto promise = std::make_shared<std::promise<R>>();
        auto future = promise->get_future();
        Task task = [this, job = std::move(job), promise](pqxx::connection* conn, std::exception_ptr error) mutable {
            if (error) {
                promise->set_exception(error);
                return;
            }
            try {
                if constexpr (std::is_void_v<R>) {
                    job(*conn);
                    AfterJob();
                    promise->set_value();
                } else {
                    R value = job(*conn);
                    AfterJob();
                    promise->set_value(std::move(value));
                }
            } catch (const pqxx::broken_connection&) {
                throw;  // RunTask reconnects and runs the job again
            } catch (...) {
                AfterJob();
                promise->set_exception(std::current_exception());
            }
        };
        return {std::move(task), std::move(future)};
    }

    void Enqueue(Task task);
    void Worker(int index);
    // Runs `task` on `conn` as a worker does: connects first when needed, runs it again on a new
    // connection when the old one broke (up to max_job_attempts), fails it with PoolStopped when
    // stopping. `who` names the connection in the log.
    void RunTask(Task& task, std::unique_ptr<pqxx::connection>& conn, const std::string& who);
    void Release(std::unique_ptr<pqxx::connection>& conn);
    std::unique_ptr<pqxx::connection> ConnectWithBackoff(const std::string& who);

    PoolOptions options_;
    std::string redacted_url_;
    std::mutex mutex_;
    std::condition_variable wake_;  // workers: a job is queued, or the pool stops
    // Backoff waits between connection attempts (workers and OwnConnections): the pool stops
    // connecting. Not wake_: a job's notify_one could wake a waiter in backoff instead of an idle
    // worker, and the job would wait in the queue for the next one.
    std::condition_variable connect_wake_;
    std::deque<Task> queue_;
    bool stopping_ = false;
    bool stop_connecting_ = false;  // BeginStop or Stop: ConnectWithBackoff gives up
    std::vector<std::thread> threads_;
};

// A connection of the pool's kind (its URL, on_connect, on_disconnect and after_job) that runs
// jobs on the calling thread, for a thread that runs one transaction after another and would
// otherwise hand each to a worker and sleep until it is done: two thread wake-ups per job (a
// consumer's batches). Run() keeps Submit's contract: it connects (with backoff) when needed,
// runs a job again after its connection broke before commit, and fails with PoolStopped once the
// pool stops connecting. One thread at a time; it is a connection on top of the pool's Size().
// Destroy it before the pool.
class OwnConnection {
  public:
    OwnConnection(ConnectionPool& pool, std::string name) : pool_(pool), name_(std::move(name)) {}
    ~OwnConnection() { pool_.Release(conn_); }
    OwnConnection(const OwnConnection&) = delete;
    OwnConnection& operator=(const OwnConnection&) = delete;

    template <typename F>
    auto Run(F job) {
        auto [task, future] = pool_.MakeTask(std::move(job));
        pool_.RunTask(task, conn_, name_);
        return future.get();
    }

  private:
    ConnectionPool& pool_;
    std::string name_;
    std::unique_ptr<pqxx::connection> conn_;
};

// Opens one connection, naming the (redacted) URL and a hint when it fails.
std::unique_ptr<pqxx::connection> ConnectOnce(const std::string& url);

}  // namespace sagaflow::store

#include "store/pool.hpp"

#include <spdlog/spdlog.h>

#include <pqxx/except>
#include <random>

#include "store/named_thread.hpp"
#include "store/url.hpp"

namespace sagaflow::store {

std::unique_ptr<pqxx::connection> ConnectOnce(const std::string& url) {
    try {
        return std::make_unique<pqxx::connection>(url);
    } catch (const std::exception& e) {
        throw pqxx::broken_connection("cannot connect to PostgreSQL at " + RedactUrl(url) + ": " +
                                      ScrubPassword(e.what(), url) +
                                      "Hint: check that the server runs and the URL (db.url or SAGAFLOW_DB_URL) is "
                                      "right");
    }
}

ConnectionPool::ConnectionPool(PoolOptions options)
    : options_(std::move(options)), redacted_url_(RedactUrl(options_.url)) {
    if (options_.size < 1) {
        throw std::invalid_argument("the database pool needs at least one connection");
    }
    threads_.reserve(static_cast<std::size_t>(options_.size));
    for (int i = 0; i < options_.size; ++i) {
        threads_.push_back(NamedThread("sf-db-" + std::to_string(i), [this, i] { Worker(i); }));
    }
}

ConnectionPool::~ConnectionPool() {
    Stop();
}

void ConnectionPool::BeginStop() {
    {
        std::lock_guard lock{mutex_};
        stop_connecting_ = true;
    }
    connect_wake_.notify_all();
}

void ConnectionPool::Stop() {
    std::deque<Task> abandoned;
    {
        std::lock_guard lock{mutex_};
        if (stopping_ && threads_.empty()) return;
        stopping_ = true;
        stop_connecting_ = true;
        abandoned.swap(queue_);
    }
    wake_.notify_all();
    connect_wake_.notify_all();
    for (auto& task : abandoned) {
        task(nullptr, std::make_exception_ptr(PoolStopped{}));
    }
    for (auto& thread : threads_) {
        if (thread.joinable()) thread.join();
    }
    threads_.clear();
}

void ConnectionPool::Enqueue(Task task) {
    {
        std::lock_guard lock{mutex_};
        if (!stopping_) {
            queue_.push_back(std::move(task));
            wake_.notify_one();
            return;
        }
    }
    task(nullptr, std::make_exception_ptr(PoolStopped{}));
}

std::unique_ptr<pqxx::connection> ConnectionPool::ConnectWithBackoff(const std::string& who) {
    std::mt19937 rng{std::random_device{}()};
    auto delay = options_.initial_backoff;
    for (int attempt = 1;; ++attempt) {
        {
            std::lock_guard lock{mutex_};
            if (stop_connecting_) return nullptr;
        }
        try {
            auto conn = ConnectOnce(options_.url);
            if (options_.on_connect) options_.on_connect(*conn);
            if (attempt > 1) spdlog::info("{}: connected to {} after {} attempts", who, redacted_url_, attempt);
            return conn;
        } catch (const std::exception& e) {
            if (attempt == 1 || attempt % 10 == 0) {
                spdlog::warn("{}: {} (attempt {}, retrying)", who, ScrubPassword(e.what(), options_.url), attempt);
            }
        }
        std::unique_lock lock{mutex_};
        // Full jitter: spreads the reconnects of many workers after an outage.
        const auto pause =
            std::chrono::milliseconds{std::uniform_int_distribution<long long>(delay.count() / 2, delay.count())(rng)};
        if (connect_wake_.wait_for(lock, pause, [this] { return stop_connecting_; })) return nullptr;
        delay = std::min(delay * 2, options_.max_backoff);
    }
}

void ConnectionPool::Release(std::unique_ptr<pqxx::connection>& conn) {
    if (conn && options_.on_disconnect) options_.on_disconnect(*conn);
    conn.reset();
}

void ConnectionPool::RunTask(Task& task, std::unique_ptr<pqxx::connection>& conn, const std::string& who) {
    for (int attempt = 1;; ++attempt) {
        if (!conn || !conn->is_open()) {
            Release(conn);
            conn = ConnectWithBackoff(who);
            if (!conn) {  // stopping: fail this job, and the next ones the same way until Stop()
                task(nullptr, std::make_exception_ptr(PoolStopped{}));
                return;
            }
        }
        try {
            task(conn.get(), nullptr);
            return;
        } catch (const pqxx::broken_connection& e) {
            Release(conn);
            if (attempt >= options_.max_job_attempts) {
                task(nullptr, std::current_exception());
                return;
            }
            spdlog::warn("{}: connection lost ({}); reconnecting and running the job again",
                         who,
                         ScrubPassword(e.what(), options_.url));
        }
    }
}

void ConnectionPool::Worker(int index) {
    const std::string who = "db pool #" + std::to_string(index);
    std::unique_ptr<pqxx::connection> conn;
    for (;;) {
        Task task;
        {
            std::unique_lock lock{mutex_};
            wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
            if (stopping_) {  // queued tasks are failed by Stop()
                lock.unlock();
                Release(conn);
                return;
            }
            task = std::move(queue_.front());
            queue_.pop_front();
        }
        RunTask(task, conn, who);
    }
}

}  // namespace sagaflow::store

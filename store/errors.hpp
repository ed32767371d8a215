#pragma once
// Which database errors are the environment's rather than the work's, and what to tell the
// operator about them. A consumer that meets one keeps its batch and waits (it never dead-letters
// a record for it); the HTTP API answers 503 with Retry-After instead of 500.

#include <chrono>
#include <cstdint>
#include <exception>
#include <optional>
#include <string>

namespace sagaflow::store {

// True for errors where the same work succeeds once the server recovers: the connection broke
// (class 08, pqxx::broken_connection), the server is out of disk, memory or connections (53), is
// shutting down or restarting (57P01..57P03), failed an I/O (58), a transaction lost a
// serialization or deadlock race (40), or the server is read-only (25006: a standby, e.g. after a
// failover). Errors of the work itself (bad data, constraint violations, a handler's own
// exception) are not.
bool IsTransientDatabaseError(const std::exception& e);

// One line for logs naming the cause and the fix, e.g. "PostgreSQL is out of disk space (SQLSTATE
// 53100: could not extend file ...): free space on its volume; the work waits and is retried".
// For other errors: their text.
std::string ExplainDatabaseError(const std::exception& e);

// The first line of a PostgreSQL error's text, without its "ERROR:  " (the lines after it point
// into our SQL: not for users).
std::string ServerMessage(std::string text);

// The cause alone, for an HTTP client ("the database is out of disk space"); "" if not transient.
std::string TransientCause(const std::exception& e);

// How often to log a failure that a loop retries every second or so while the database is away
// (the relay's session, the timer scan): the first failure after a quiet spell at once, then one
// line per `every`. Not thread-safe: one per loop.
class FailureLogLimit {
  public:
    explicit FailureLogLimit(std::chrono::seconds every = std::chrono::seconds(30)) : every_(every) {}

    // On each failure: the number of failures not logged since the last line when this one is to be
    // logged, else nullopt.
    std::optional<std::uint64_t> Due(std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now());

  private:
    std::chrono::seconds every_;
    std::optional<std::chrono::steady_clock::time_point> last_logged_;
    std::chrono::steady_clock::time_point last_failure_{};
    std::uint64_t suppressed_ = 0;
};

}  // namespace sagaflow::store

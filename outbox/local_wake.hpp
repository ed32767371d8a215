#pragma once
// Wakes a process's own relay after its own commits, in memory instead of through NOTIFY
// (sql/016_wake_own_relay_without_notify.sql).
//
// One LocalWake joins a pool and a relay of the same process (outbox::Runtime wires them): the
// pool's sessions carry Token() in `sagaflow.wake_token` (SessionSetting), the relay, leading,
// takes the advisory lock (Token(), its schema) at its first sleep and keeps it for its session,
// and the pool calls Poke() after every job.
// The outbox trigger then sends no notification for a commit made while that relay sleeps; the
// Poke wakes it instead. A Poke after a job that wrote nothing costs a sleeping relay one claim.

#include <atomic>
#include <string>

namespace sagaflow::outbox {

class LocalWake {
  public:
    LocalWake();  // a token of its own, drawn at random
    ~LocalWake();
    LocalWake(const LocalWake&) = delete;
    LocalWake& operator=(const LocalWake&) = delete;

    // 1..999,999,999: the advisory lock's first key, never one of sagaflow's fixed lock keys.
    int Token() const noexcept { return token_; }
    // The statement a session of the pool runs once, so its commits leave the wake to Poke().
    std::string SessionSetting() const;

    // After a commit (any thread): the relay claims again, waking if it sleeps.
    void Poke() noexcept;
    // The relay, before a claim: the pokes so far are answered by it (it sees their commits).
    void Take() noexcept;
    bool Pending() const noexcept { return poked_.load(); }
    // Readable after a Poke: the relay waits on it beside its database socket; Drain() empties it.
    int Fd() const noexcept { return fd_; }
    void Drain() noexcept;

  private:
    int token_;
    int fd_;
    std::atomic<bool> poked_{false};
};

}  // namespace sagaflow::outbox

#include "outbox/local_wake.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <random>
#include <stdexcept>

namespace sagaflow::outbox {

namespace {
int DrawToken() {
    std::random_device random;
    return std::uniform_int_distribution<int>(1, 999'999'999)(random);
}
}  // namespace

LocalWake::LocalWake() : token_(DrawToken()), fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
    if (fd_ < 0) throw std::runtime_error(std::string("eventfd: ") + std::strerror(errno));
}

LocalWake::~LocalWake() {
    close(fd_);
}

std::string LocalWake::SessionSetting() const {
    return "SET sagaflow.wake_token = '" + std::to_string(token_) + "'";
}

void LocalWake::Poke() noexcept {
    if (poked_.exchange(true)) return;  // already pending: the relay has not claimed since
    const std::uint64_t one = 1;
    [[maybe_unused]] const auto written = write(fd_, &one, sizeof one);  // EAGAIN only at 2^64-1 pokes
}

void LocalWake::Take() noexcept {
    if (poked_.exchange(false)) Drain();
}

void LocalWake::Drain() noexcept {
    std::uint64_t count = 0;
    [[maybe_unused]] const auto read_bytes = read(fd_, &count, sizeof count);  // EAGAIN when empty
}

}  // namespace sagaflow::outbox

#include "outbox/uuid.hpp"

#include <array>
#include <chrono>

namespace sagaflow::outbox {

UuidV7Generator::UuidV7Generator() : rng_(std::random_device{}()) {}

std::string UuidV7Generator::Next(std::uint64_t unix_ms) {
    std::uint64_t ms;
    std::uint32_t counter;
    std::uint64_t random;
    {
        std::lock_guard lock{mutex_};
        if (unix_ms > last_ms_) {
            last_ms_ = unix_ms;
            // Start the counter low but random, leaving room for many ids in this millisecond.
            counter_ = static_cast<std::uint32_t>(rng_() & 0x1FF);
        } else if (++counter_ > 0xFFF) {
            // Counter exhausted, or the clock went back: borrow the next millisecond.
            ++last_ms_;
            counter_ = 0;
        }
        ms = last_ms_;
        counter = counter_;
        random = rng_();
    }
    std::array<std::uint8_t, 16> b{};
    for (int i = 0; i < 6; ++i) b[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(ms >> (40 - 8 * i));
    b[6] = static_cast<std::uint8_t>(0x70 | (counter >> 8));
    b[7] = static_cast<std::uint8_t>(counter & 0xFF);
    b[8] = static_cast<std::uint8_t>(0x80 | ((random >> 56) & 0x3F));
    for (int i = 9; i < 16; ++i) b[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(random >> (8 * (15 - i)));
    static constexpr char kHex[] = "0123456789abcdef";
    std::string text;
    text.reserve(36);
    for (std::size_t i = 0; i < b.size(); ++i) {
        if (i == 4 || i == 6 || i == 8 || i == 10) text += '-';
        text += kHex[b[i] >> 4];
        text += kHex[b[i] & 0x0F];
    }
    return text;
}

std::string NewUuidV7() {
    static UuidV7Generator generator;
    const auto now = std::chrono::system_clock::now().time_since_epoch();
    return generator.Next(
        static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(now).count()));
}

}  // namespace sagaflow::outbox

#pragma once
// A saga's id: a UUID in its text form (8-4-4-4-12 hex digits), checked once where it enters — an
// API call, an HTTP path, a reply's `sagaid` — so code that holds a SagaId never checks it again.

#include <compare>
#include <optional>
#include <string>
#include <string_view>

namespace sagaflow {

// 8-4-4-4-12 hexadecimal digits (any version, either case).
bool IsUuidText(std::string_view text) noexcept;

class SagaId {
  public:
    // nullopt when `text` is not a UUID.
    static std::optional<SagaId> Parse(std::string_view text);

    const std::string& Text() const noexcept { return text_; }
    bool operator==(const SagaId&) const = default;
    auto operator<=>(const SagaId&) const = default;

  private:
    explicit SagaId(std::string text) : text_(std::move(text)) {}
    std::string text_;
};

}  // namespace sagaflow

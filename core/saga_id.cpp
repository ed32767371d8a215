#include "core/saga_id.hpp"

namespace sagaflow {

bool IsUuidText(std::string_view text) noexcept {
    if (text.size() != 36) return false;
    for (std::size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        const bool dash = i == 8 || i == 13 || i == 18 || i == 23;
        const bool hex = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
        if (dash ? c != '-' : !hex) return false;
    }
    return true;
}

std::optional<SagaId> SagaId::Parse(std::string_view text) {
    if (!IsUuidText(text)) return std::nullopt;
    return SagaId(std::string(text));
}

}  // namespace sagaflow

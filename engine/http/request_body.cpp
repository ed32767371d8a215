#include "engine/http/request_body.hpp"

#include <algorithm>
#include <cctype>

namespace sagaflow::detail {

std::optional<BodyRefusal> ReadObjectBody(std::string_view text, const JsonLimits& limits, nlohmann::json& body) {
    JsonRefusal refusal;
    auto parsed = ReadJson(text, limits, refusal);
    if (!parsed) {
        switch (refusal.kind) {
            case JsonRefusal::Kind::kNulCharacter:
                return BodyRefusal{422, "invalid-input", "Invalid input", refusal.message, refusal.path};
            case JsonRefusal::Kind::kDuplicateKey:
                return BodyRefusal{400,
                                   "ambiguous-json",
                                   "Ambiguous JSON",
                                   "the body" + (refusal.path == "$" ? "" : " at " + refusal.path) + " " + refusal.what,
                                   {}};
            default:
                return BodyRefusal{
                    400, "malformed-json", "Malformed JSON", "the body is refused: " + refusal.message, {}};
        }
    }
    body = std::move(*parsed);
    if (!body.is_object())
        return BodyRefusal{400, "malformed-json", "Malformed JSON", "the body must be a JSON object", {}};
    return std::nullopt;
}

bool IsJsonContentType(std::string_view value) {
    std::string media(value.substr(0, value.find(';')));
    while (!media.empty() && (media.back() == ' ' || media.back() == '\t')) media.pop_back();
    std::transform(media.begin(), media.end(), media.begin(), [](unsigned char c) { return std::tolower(c); });
    return media == "application/json";
}

}  // namespace sagaflow::detail

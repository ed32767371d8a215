#include "core/bounded_json.hpp"

#include <set>
#include <vector>

#include "core/text_scan.hpp"

namespace sagaflow {
namespace {

using Json = nlohmann::json;

// nlohmann's own DOM builder, behind a gate that counts depth, remembers each open object's keys and
// looks into every string, stopping the parse (return false) at the first refusal. The parser itself
// is iterative, so nothing recurses before the gate has seen the depth.
class BoundedBuilder {
  public:
    BoundedBuilder(Json& root, const JsonLimits& limits, JsonRefusal& refusal)
        : dom_(root, false), limits_(limits), refusal_(refusal) {}

    bool null() { return Value() && dom_.null(); }
    bool boolean(bool v) { return Value() && dom_.boolean(v); }
    bool number_integer(Json::number_integer_t v) { return Value() && dom_.number_integer(v); }
    bool number_unsigned(Json::number_unsigned_t v) { return Value() && dom_.number_unsigned(v); }
    bool number_float(Json::number_float_t v, const std::string& s) { return Value() && dom_.number_float(v, s); }
    bool string(std::string& v) {
        Value();
        if (v.find('\0') != std::string::npos) {
            return Refuse(JsonRefusal::Kind::kNulCharacter, "holds U+0000, which cannot be stored: remove it");
        }
        return dom_.string(v);
    }
    bool binary(Json::binary_t& v) { return Value() && dom_.binary(v); }
    bool start_object(std::size_t n) { return Open(true) && dom_.start_object(n); }
    bool end_object() { return Close() && dom_.end_object(); }
    bool start_array(std::size_t n) { return Open(false) && dom_.start_array(n); }
    bool end_array() { return Close() && dom_.end_array(); }
    bool key(std::string& k) {
        frames_.back().key.clear();  // a refusal names the object, not its previous member
        if (k.find('\0') != std::string::npos) {
            return Refuse(JsonRefusal::Kind::kNulCharacter,
                          "has a key holding U+0000, which cannot be stored: remove it");
        }
        auto& frame = frames_.back();
        if (!frame.keys.insert(k).second) {
            return Refuse(JsonRefusal::Kind::kDuplicateKey,
                          "has the key " + text::Quote(k) + " twice; send each key once");
        }
        frame.key = k;
        return dom_.key(k);
    }
    bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& e) {
        if (refusal_.message.empty()) {
            refusal_.kind = JsonRefusal::Kind::kSyntax;
            // nlohmann's message quotes the text near the error: cut and escape it.
            refusal_.message =
                "not JSON in UTF-8 (at byte " + std::to_string(position) + "): " + text::Quote(e.what(), 200);
        }
        return false;
    }

  private:
    struct Frame {
        bool object = false;
        std::size_t index = 0;  // arrays: the next element's index
        std::string key;        // objects: the current key
        std::set<std::string> keys;
    };

    // A value is about to be added to the innermost array: count it for the path.
    bool Value() {
        if (!frames_.empty() && !frames_.back().object) ++frames_.back().index;
        return true;
    }
    bool Open(bool object) {
        Value();
        if (static_cast<int>(frames_.size()) >= limits_.max_depth) {
            return Refuse(JsonRefusal::Kind::kTooDeep,
                          "nests arrays and objects deeper than " + std::to_string(limits_.max_depth) +
                              " levels; flatten the value");
        }
        frames_.push_back({object, 0, {}, {}});
        return true;
    }
    bool Close() {
        frames_.pop_back();
        return true;
    }
    // `what` completes "the value at PATH ...".
    bool Refuse(JsonRefusal::Kind kind, const std::string& what) {
        refusal_.kind = kind;
        refusal_.path = Path();
        refusal_.what = what;
        refusal_.message = "the value at " + refusal_.path + " " + what;
        return false;
    }
    // Where the parser is, e.g. $.items[3].name; long keys are cut, a deep path keeps its ends.
    std::string Path() const {
        std::vector<std::string> parts;
        for (const auto& f : frames_) {
            if (f.object) {
                parts.push_back(f.key.empty() ? "" : "." + text::Quote(f.key, 40, false));
            } else {
                parts.push_back("[" + std::to_string(f.index == 0 ? 0 : f.index - 1) + "]");
            }
        }
        std::string out = "$";
        for (std::size_t i = 0; i < parts.size(); ++i) {
            if (parts.size() > 12 && i == 6) {
                out += "…";
                i = parts.size() - 6;
            }
            out += parts[i];
        }
        return out;
    }

    nlohmann::detail::json_sax_dom_parser<Json> dom_;
    const JsonLimits& limits_;
    JsonRefusal& refusal_;
    std::vector<Frame> frames_;
};

}  // namespace

std::optional<Json> ReadJson(std::string_view text, const JsonLimits& limits, JsonRefusal& refusal) {
    refusal = {};
    if (text.size() > limits.max_bytes) {
        refusal.kind = JsonRefusal::Kind::kTooLarge;
        refusal.message = "the JSON text is " + std::to_string(text.size()) + " bytes, over the limit of " +
                          std::to_string(limits.max_bytes);
        return std::nullopt;
    }
    Json root;
    BoundedBuilder builder(root, limits, refusal);
    const bool ok = Json::sax_parse(text.begin(), text.end(), &builder, nlohmann::detail::input_format_t::json, true);
    if (!ok) {
        if (refusal.message.empty()) refusal.message = "not JSON in UTF-8";
        return std::nullopt;
    }
    return root;
}

std::optional<Json> ReadJson(std::string_view text, JsonRefusal& refusal) {
    return ReadJson(text, JsonLimits{}, refusal);
}

}  // namespace sagaflow

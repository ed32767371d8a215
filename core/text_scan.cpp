#include "core/text_scan.hpp"

#include <algorithm>

namespace sagaflow::text {
namespace {

bool Lower(char c) {
    return c >= 'a' && c <= 'z';
}
bool Upper(char c) {
    return c >= 'A' && c <= 'Z';
}
bool Digit(char c) {
    return c >= '0' && c <= '9';
}
bool Letter(char c) {
    return Lower(c) || Upper(c);
}

template <typename First, typename Rest>
bool Word(std::string_view s, std::size_t max_length, First first, Rest rest) {
    return !s.empty() && s.size() <= max_length && first(s.front()) && std::all_of(s.begin() + 1, s.end(), rest);
}

}  // namespace

bool IsKebabName(std::string_view s, std::size_t max_length) {
    return Word(s, max_length, Lower, [](char c) { return Lower(c) || Digit(c) || c == '-'; });
}

bool IsKebabName(std::string_view s) {
    return IsKebabName(s, 63);
}

bool IsFieldName(std::string_view s) {
    return Word(
        s, 63, [](char c) { return Letter(c) || c == '_'; }, [](char c) { return Letter(c) || Digit(c) || c == '_'; });
}

bool IsCommandType(std::string_view s) {
    const auto dot = s.find('.');
    const auto name = s.substr(0, dot);
    if (!Word(name, 63, Letter, [](char c) { return Letter(c) || Digit(c) || c == '_'; })) return false;
    if (dot == std::string_view::npos) return true;
    const auto version = s.substr(dot + 1);
    return version.size() >= 2 && version.front() == 'v' && IsDigits(version.substr(1), 9);
}

bool IsPathSegment(std::string_view s) {
    return !s.empty() &&
           std::all_of(s.begin(), s.end(), [](char c) { return Letter(c) || Digit(c) || c == '_' || c == '-'; });
}

bool IsSqlName(std::string_view s) {
    return Word(
        s, 63, [](char c) { return Lower(c) || c == '_'; }, [](char c) { return Lower(c) || Digit(c) || c == '_'; });
}

bool IsTopicName(std::string_view s) {
    return !s.empty() && s.size() <= 249 && std::all_of(s.begin(), s.end(), [](char c) {
        return Letter(c) || Digit(c) || c == '.' || c == '_' || c == '-';
    });
}

bool IsDigits(std::string_view s, std::size_t max_digits) {
    return !s.empty() && s.size() <= max_digits && std::all_of(s.begin(), s.end(), Digit);
}

bool IsDecimal(std::string_view s) {
    if (s.empty() || s.size() > 64) return false;
    if (s.front() == '-') s.remove_prefix(1);
    const auto dot = s.find('.');
    const auto whole = s.substr(0, dot);
    if (!IsDigits(whole, 64) || (whole.size() > 1 && whole.front() == '0')) return false;
    return dot == std::string_view::npos || IsDigits(s.substr(dot + 1), 64);
}

std::optional<long long> ParseDurationMs(std::string_view s) {
    std::size_t digits = 0;
    while (digits < s.size() && Digit(s[digits])) ++digits;
    if (digits == 0 || digits > 9) return std::nullopt;
    long long amount = 0;
    for (std::size_t i = 0; i < digits; ++i) amount = amount * 10 + (s[i] - '0');
    const auto unit = s.substr(digits);
    if (unit == "ms") return amount;
    if (unit == "s") return amount * 1000;
    if (unit == "m") return amount * 60'000;
    if (unit == "h") return amount * 3'600'000;
    return std::nullopt;
}

namespace {

// The length of the valid UTF-8 sequence at the start of `s`, or 0.
std::size_t Utf8Length(std::string_view s) {
    const auto b = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
    const auto continuation = [&](std::size_t i) { return i < s.size() && (b(i) & 0xC0) == 0x80; };
    const unsigned char lead = b(0);
    if (lead < 0x80) return 1;
    if (lead >= 0xC2 && lead <= 0xDF) return continuation(1) ? 2 : 0;
    if (lead >= 0xE0 && lead <= 0xEF) {
        if (!continuation(1) || !continuation(2)) return 0;
        if ((lead == 0xE0 && b(1) < 0xA0) || (lead == 0xED && b(1) > 0x9F)) return 0;  // overlong, surrogate
        return 3;
    }
    if (lead >= 0xF0 && lead <= 0xF4) {
        if (!continuation(1) || !continuation(2) || !continuation(3)) return 0;
        if ((lead == 0xF0 && b(1) < 0x90) || (lead == 0xF4 && b(1) > 0x8F)) return 0;
        return 4;
    }
    return 0;
}

void AppendHex(std::string& out, unsigned char u) {
    static const char kHex[] = "0123456789abcdef";
    out += "\\x";
    out += kHex[u >> 4];
    out += kHex[u & 0xf];
}

void AppendEscaped(std::string& out, char c) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '\n') {
        out += "\\n";
    } else if (c == '\r') {
        out += "\\r";
    } else if (c == '\t') {
        out += "\\t";
    } else if (u < 0x20 || u == 0x7f) {
        AppendHex(out, u);
    } else {
        out += c;
    }
}

}  // namespace

// Control characters and bytes that are not UTF-8 escaped, valid characters kept.
void AppendText(std::string& out, std::string_view value) {
    for (std::size_t i = 0; i < value.size();) {
        const std::size_t n = Utf8Length(value.substr(i));
        if (n == 0) {
            AppendHex(out, static_cast<unsigned char>(value[i]));
            ++i;
        } else if (n == 1) {
            AppendEscaped(out, value[i++]);
        } else {
            out.append(value.substr(i, n));
            i += n;
        }
    }
}

std::string EscapeControl(std::string_view value) {
    std::string out;
    out.reserve(value.size());
    AppendText(out, value);
    return out;
}

std::string Quote(std::string_view value, std::size_t max_bytes, bool quoted) {
    std::size_t keep = std::min(value.size(), max_bytes);
    // Do not cut a UTF-8 sequence in two: back up to the start of the character at the cut.
    if (keep < value.size()) {
        while (keep > 0 && (static_cast<unsigned char>(value[keep]) & 0xC0) == 0x80) --keep;
    }
    std::string out;
    out.reserve(keep + 16);
    if (quoted) out += '\'';
    AppendText(out, value.substr(0, keep));
    if (quoted) out += '\'';
    if (keep < value.size()) out += "… (" + std::to_string(value.size()) + " bytes in all)";
    return out;
}

}  // namespace sagaflow::text

#pragma once
// How doctest prints the values our tests compare, so a failure shows them.

#include <doctest/doctest.h>

#include <string>
#include <vector>

namespace doctest {
template <>
struct StringMaker<std::vector<std::string>> {
    static String convert(const std::vector<std::string>& lines) {
        std::string out = "{";
        for (const auto& line : lines) out += "\n  \"" + line + "\"";
        out += lines.empty() ? "}" : "\n}";
        return out.c_str();
    }
};
}  // namespace doctest

#include "store/url.hpp"

#include <regex>

namespace sagaflow::store {
namespace {

std::string PasswordOf(std::string_view url) {
    static const std::regex kUri{R"(^[a-z]+://[^:/@]*:([^@]*)@)"};
    static const std::regex kKeyword{R"((^|[\s?&])password\s*=\s*('([^']*)'|([^\s&]*)))"};
    std::match_results<std::string_view::const_iterator> match;
    if (std::regex_search(url.begin(), url.end(), match, kUri)) return match[1].str();
    if (std::regex_search(url.begin(), url.end(), match, kKeyword)) {
        return match[3].matched ? match[3].str() : match[4].str();
    }
    return {};
}

}  // namespace

std::string RedactUrl(std::string_view url) {
    return ScrubPassword(std::string(url), url);
}

std::string ScrubPassword(std::string text, std::string_view url) {
    const std::string password = PasswordOf(url);
    if (password.empty()) return text;
    for (std::size_t at = 0; (at = text.find(password, at)) != std::string::npos; at += 3) {
        text.replace(at, password.size(), "***");
    }
    return text;
}

}  // namespace sagaflow::store

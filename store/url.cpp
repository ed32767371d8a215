#include "store/url.hpp"

#include <algorithm>
#include <cctype>

namespace sagaflow::store {
namespace {

std::string PasswordOf(std::string_view url) {
    // URI form: scheme://user:PASSWORD@host...
    if (const auto scheme = url.find("://"); scheme != std::string_view::npos && scheme > 0 &&
                                             std::all_of(url.begin(),
                                                         url.begin() + static_cast<std::ptrdiff_t>(scheme),
                                                         [](char c) { return c >= 'a' && c <= 'z'; })) {
        const auto rest = url.substr(scheme + 3);
        const auto user_end = rest.find_first_of(":/@");
        const auto at = rest.find('@');
        if (user_end != std::string_view::npos && rest[user_end] == ':' && at != std::string_view::npos &&
            at > user_end) {
            return std::string(rest.substr(user_end + 1, at - user_end - 1));
        }
    }
    // Keyword form, or a URI's query: password=VALUE or password='VALUE', after a space, '?' or '&'.
    const auto space = [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; };
    for (std::size_t at = url.find("password"); at != std::string_view::npos; at = url.find("password", at + 1)) {
        if (at > 0 && !space(url[at - 1]) && url[at - 1] != '?' && url[at - 1] != '&') continue;
        std::size_t i = at + 8;
        while (i < url.size() && space(url[i])) ++i;
        if (i == url.size() || url[i] != '=') continue;
        ++i;
        while (i < url.size() && space(url[i])) ++i;
        if (i < url.size() && url[i] == '\'') {
            const auto close = url.find('\'', i + 1);
            if (close != std::string_view::npos) return std::string(url.substr(i + 1, close - i - 1));
        }
        std::size_t end = i;
        while (end < url.size() && !space(url[end]) && url[end] != '&') ++end;
        return std::string(url.substr(i, end - i));
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

#pragma once

#include <string>
#include <string_view>

namespace sagaflow::store {

// The URL with its password replaced by "***", for logs and error messages. Handles URI form
// (postgresql://user:secret@host/db) and keyword form (host=... password=secret).
std::string RedactUrl(std::string_view url);

// `text` with every occurrence of the URL's password replaced by "***": for messages that come
// from libpq and might quote it.
std::string ScrubPassword(std::string text, std::string_view url);

}  // namespace sagaflow::store

// tokfeedd's developer subcommands: the job's text pipeline run offline, on
// the daemon's own libraries (tokfeedctl links only the client and proto/).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tokfeed::dev {

// `tokfeedd tokenize`: one JSON string per stdin line in, its ids as a JSON
// array out (no special tokens added); decode: arrays of ids in, strings out.
int tokenize(const std::string& path, const std::string& type, bool decode);
// `tokfeedd render`: one JSON string per valid record, its text as the job's
// template renders it.
int render(const std::string& config, std::optional<uint64_t> limit);

void append_json_string(std::string& out, std::string_view s);

}  // namespace tokfeed::dev

// tokfeedd render: what the chat template makes of each valid record of a
// job's dataset, one JSON string per line (null: a record checked when read
// and found bad, its reason on stderr as "FILE:LINE: bad record: REASON");
// tests/reference/render_check.py and json_values_diff.py compare it with
// the model's own Jinja chat_template.
#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>

#include "pipeline/batch_builder.hpp"
#include "config/config.hpp"
#include "dev.hpp"
#include "cache/record_check.hpp"
#include "dataset/dataset.hpp"
#include "chat/chat_template.hpp"
#include "encode/sample_encoder.hpp"
#include "tokenizer/tokenizer.hpp"
#include "tokfeed/proto/frame.hpp"

namespace tokfeed::dev {

void append_json_string(std::string& out, std::string_view s) {
  msgpack::zone z;
  msgpack::object o(s, z);
  out += proto::to_json(o);
}

int render(const std::string& config, std::optional<uint64_t> limit) {
  try {
    JobConfig cfg = load_config(config);
    Dataset data(cfg);
    check_records(cfg, data);
    auto tok = text::load_tokenizer(cfg.tokenizer.type, cfg.tokenizer.path);
    SampleEncoder enc(cfg, data, *tok);  // a worker's render: templates, plain-text records
    text::Rendered rendered;
    std::string out;
    uint64_t n = limit ? std::min(*limit, data.size()) : data.size();
    for (uint64_t i = 0; i < n; ++i) {
      out.clear();
      if (std::string why = enc.render(i, rendered); why.empty()) {
        append_json_string(out, rendered.text);
      } else if (!data.checked_at_start(i)) {
        out += "null";  // a record checked when read, found bad: left out where it lands
        std::fprintf(stderr, "%s: bad record: %s\n", data.where(i).c_str(), why.c_str());
      } else {
        throw std::runtime_error(data.where(i) + ": " + why);
      }
      out += '\n';
      std::fwrite(out.data(), 1, out.size(), stdout);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tokfeedd: render: %s\n", e.what());
    return 1;
  }
  return 0;
}

}  // namespace tokfeed::dev

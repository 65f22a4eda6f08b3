// tokfeedd render: what the chat template makes of each valid record of a
// job's dataset, one JSON string per line (tests/reference/render_check.py
// compares it with the model's own Jinja chat_template).
#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>

#include "pipeline/batch_builder.hpp"
#include "config/config.hpp"
#include "dev.hpp"
#include "cache/record_check.hpp"
#include "dataset/dataset.hpp"
#include "chat/chat_jinja.hpp"
#include "chat/chat_template.hpp"
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
    std::vector<text::RecordRules> rules;
    for (std::size_t d = 0; d < cfg.datasets.size(); ++d) rules.push_back(record_rules(cfg, d));
    text::RenderOptions opts;
    opts.tmpl = cfg.tokenizer.tmpl;
    opts.default_system = cfg.tokenizer.default_system;
    opts.loss = cfg.batch.loss;
    text::Conversation conv;
    text::Rendered rendered;
    std::string out;
    uint64_t n = limit ? std::min(*limit, data.size()) : data.size();
    tmpl::Value messages, tools;
    for (uint64_t i = 0; i < n; ++i) {
      const text::RecordRules& r = rules[data.dataset_of(i)];
      if (r.chat) {  // a model's own template (docs/chat_templates.md)
        std::string why = text::record_to_chat(data.record(i), r, false, messages, tools);
        if (why.empty()) why = text::render_labeled(*r.chat, messages, tools, r.loss, rendered);
        if (!why.empty()) throw std::runtime_error(data.where(i) + ": " + why);
      } else {
        text::parse_record(data.record(i), r, conv);
        text::render(conv, opts, rendered);
      }
      out.clear();
      append_json_string(out, rendered.text);
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

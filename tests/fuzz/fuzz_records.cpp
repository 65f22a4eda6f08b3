// Fuzz target: the dataset record parser and the chat template renderer, as a
// worker runs them on every record: parse_record under the rules each
// template implies, then render the conversation with every template, on
// arbitrary bytes (deeply nested JSON included).
//
// The first input byte picks the record format, whether a default system
// prompt is set, the loss mode (all assistant turns, the last one, all), and placeholders;
// the rest is the record's JSON text. Beyond "no crash", it checks what the
// batch builder relies on: trained spans ascending, non-overlapping, and
// inside the rendered text; and that check_record (what the dataset index
// runs, also in place with the scan first) gives the verdict parse_record
// (what a worker runs) gives.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "fuzz_check.hpp"
#include "chat/chat_template.hpp"
#include "records/records.hpp"

using namespace tokfeed::text;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0];
  std::string_view json(reinterpret_cast<const char*>(data) + 1, size - 1);
  static const Format kFormats[] = {Format::kAuto, Format::kMessages, Format::kShareGpt, Format::kAlpaca,
                                    Format::kQueryResponse};
  static const Template kTemplates[] = {Template::kMistral, Template::kLlama2, Template::kChatml,
                                        Template::kQwen2_5, Template::kQwen3,  Template::kLlama3};
  // The record followed by readable bytes, as in a mapped file.
  std::string padded(json);
  for (std::size_t i = 0; i < kParsePadding; ++i) padded.push_back("\n{\"a\":[1,\"\\"[i % 11]);
  RecordRules rules;
  rules.format = kFormats[mode % 5];
  if (mode & 0x08) rules.placeholders = {{"NAME", "tokfeed"}, {"EMPTY", ""}, {"LOOP", "{{NAME}}"}};
  if (mode & 0x40) rules.columns = {{"prompt", "instruction"}, {"completion", "output"}, {"instruction", "query"}};
  for (Template t : kTemplates) {
    rules.require_alternation = template_requires_alternation(t);
    Conversation conv;
    std::string verdict = parse_record(json, rules, conv);
    fuzz_check(check_record(json, rules) == verdict, "check_record and parse_record agree");
    // In place, as the index runs it: the scan must accept nothing the full
    // parser rejects.
    fuzz_check(check_record(std::string_view(padded.data(), json.size()), rules, /*padded=*/true) == verdict,
               "check_record in place and parse_record agree");
    if (!verdict.empty()) continue;
    fuzz_check(!conv.empty(), "a valid record has messages");
    RenderOptions opts;
    opts.tmpl = t;
    if (mode & 0x10) opts.default_system = "You are terse.";
    opts.loss = (mode & 0x20) ? Loss::kLastAssistant : (mode & 0x80) ? Loss::kAll : Loss::kAllAssistant;
    Rendered out;
    render(conv, opts, out);
    uint32_t prev = 0;
    for (const Span& s : out.trained) {
      fuzz_check(s.begin >= prev, "trained spans ascending and non-overlapping");
      fuzz_check(s.begin <= s.end, "span begin <= end");
      fuzz_check(s.end <= out.text.size(), "span inside the rendered text");
      prev = s.end;
    }
  }
  return 0;
}

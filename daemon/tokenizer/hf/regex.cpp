#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/hf/regex.hpp"

#include <pcre2.h>

#include "tokenizer/hf/fast_split.hpp"
#include "tokenizer/hf/general_split.hpp"
#include "tokenizer/hf/regex_unicode.hpp"
#include "tokenizer/hf/unicode.hpp"
#include "tokenizer/tokenizer.hpp"

namespace tokfeed::text::hf {

namespace {

// Oniguruma's \s: [\t-\r\x85\p{Z}].
std::string onig_space() { return "\\t-\\r\\x{85}\\p{Z}" + pcre2_category_additions("Z"); }

// A general-category class, \p{X} (or \P{X} / \p{^X} when `negated`), with
// the characters PCRE2's tables do not know added (regex_unicode.hpp). Inside
// a class a negated one is left to PCRE2: "[^...]" cannot nest there.
void append_category(std::string& out, const std::string& cat, bool negated, bool in_class) {
  const std::string body = "\\p{" + cat + "}" + pcre2_category_additions(cat);
  if (in_class) out += negated ? "\\P{" + cat + "}" : body;
  else out += (negated ? "[^" : "[") + body + "]";
}

}  // namespace

std::string onig_to_pcre2(std::string_view p) {
  std::string out;
  out.reserve(p.size() + 32);
  int class_depth = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      char n = p[i + 1];
      ++i;
      if ((n == 'p' || n == 'P') && i + 1 < p.size() && p[i + 1] == '{') {
        const size_t close = p.find('}', i + 2);
        if (close != std::string_view::npos) {
          std::string_view name = p.substr(i + 2, close - i - 2);
          const bool caret = !name.empty() && name[0] == '^';
          if (auto cat = general_category(caret ? name.substr(1) : name)) {
            append_category(out, *cat, (n == 'P') != caret, class_depth > 0);
            i = close;
            continue;
          }
        }
        out.push_back('\\');
        out.push_back(n);
      } else if (n == 'd' || (n == 'D' && class_depth == 0)) {
        append_category(out, "Nd", n == 'D', class_depth > 0);  // Unicode digits in both engines
      } else if (n == 's') {
        if (class_depth > 0) out.append(onig_space());
        else out.append("[").append(onig_space()).append("]");
      } else if (n == 'S' && class_depth == 0) {
        out.append("[^").append(onig_space()).append("]");
      } else {
        out.push_back('\\');
        out.push_back(n);
      }
      continue;
    }
    if (c == '[') {
      // "[]" or "[^]" at a class start take ']' literally, as in both engines.
      ++class_depth;
      out.push_back(c);
      if (i + 1 < p.size() && p[i + 1] == '^') out.push_back(p[++i]);
      if (i + 1 < p.size() && p[i + 1] == ']') out.push_back(p[++i]);
      continue;
    }
    if (c == ']' && class_depth > 0) --class_depth;
    out.push_back(c);
  }
  return out;
}

std::string regex_escape(std::string_view literal) {
  std::string out;
  for (char c : literal) {
    if (std::string_view("\\^$.|?*+()[]{}-/#&~ ").find(c) != std::string_view::npos && c != '\0') {
      // \Q..\E would also work; per-char escapes keep patterns readable in errors.
      if (c == ' ') {
        out.append("\\x20");
        continue;
      }
      out.push_back('\\');
    }
    out.push_back(c);
  }
  return out;
}

Regex::Regex(const std::string& pattern, const std::string& where, RegexEngine engine) {
  if (engine == RegexEngine::kAny && (fast_ = FastSplit::for_pattern(pattern))) {
    path_ = "hand-written";
    return;
  }
  std::string translated = onig_to_pcre2(pattern);
  int err = 0;
  PCRE2_SIZE err_offset = 0;
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                        PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF | PCRE2_MULTILINE, &err, &err_offset, nullptr);
  if (code_ == nullptr) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    throw TokenizerError(where + ": regex '" + pattern + "' does not compile: " + reinterpret_cast<const char*>(msg) +
                         " at offset " + std::to_string(err_offset));
  }
  std::string why = "not asked for";
  const auto method =
      engine == RegexEngine::kGeneralBacktracking ? GeneralSplit::Method::kBacktracking : GeneralSplit::Method::kAny;
  if (engine != RegexEngine::kPcre2 && (general_ = GeneralSplit::compile(translated, why, method))) {
    path_ = "matcher (" + general_->summary() + ")";
    return;
  }
  jit_ = pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE) == 0;
  path_ = std::string(jit_ ? "PCRE2 JIT" : "PCRE2") + " (" + why + ")";
  match_data_ = pcre2_match_data_create_from_pattern(code_, nullptr);
  // Long runs (a megabyte of spaces) need more than the default 32 KiB JIT stack.
  match_context_ = pcre2_match_context_create(nullptr);
  jit_stack_ = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
  pcre2_jit_stack_assign(match_context_, nullptr, jit_stack_);
}

Regex::~Regex() {
  pcre2_match_data_free(match_data_);
  pcre2_match_context_free(match_context_);
  pcre2_jit_stack_free(jit_stack_);
  pcre2_code_free(code_);
}

void Regex::find_all(std::string_view subject, std::vector<std::pair<uint32_t, uint32_t>>& out) const {
  if (fast_) {
    fast_->find_all(subject, out);
    return;
  }
  if (general_) {
    general_->find_all(subject, out);
    return;
  }
  const auto* s = reinterpret_cast<PCRE2_SPTR>(subject.data());
  const size_t n = subject.size();
  size_t start = 0;
  bool have_last = false;
  size_t last_end = 0;
  while (start <= n) {
    int rc = jit_ ? pcre2_jit_match(code_, s, n, start, 0, match_data_, match_context_)
                  : pcre2_match(code_, s, n, start, 0, match_data_, match_context_);
    // Past a JIT limit, the interpreter (heap-backed) gets a second try.
    if (rc < 0 && rc != PCRE2_ERROR_NOMATCH && jit_)
      rc = pcre2_match(code_, s, n, start, PCRE2_NO_JIT, match_data_, match_context_);
    if (rc < 0) break;  // no match (or still a resource limit: the rest stays unmatched)
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(match_data_);
    size_t b = ov[0], e = ov[1];
    if (b == e) {
      size_t next = e < n ? e + utf8_char_len(subject, e) : n + 1;
      if (!(have_last && last_end == e)) out.emplace_back(uint32_t(b), uint32_t(e));
      have_last = true;
      last_end = e;
      start = next;
      continue;
    }
    out.emplace_back(uint32_t(b), uint32_t(e));
    have_last = true;
    last_end = e;
    start = e;
  }
}

}  // namespace tokfeed::text::hf

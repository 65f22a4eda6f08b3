// The one label rule (docs/data_model.md section 2.2):
// (a) a template with {% generation %} blocks trains their text, as HF's
//     return_assistant_tokens_mask does;
// (b) otherwise assistant message i trains F[len(P):len(Fi)] when
//     P = render(msgs[:i], add_generation_prompt) ⊑ Fi = render(msgs[:i+1]) ⊑ F;
// (c) where (b) fails, the message trains its own text in F (the output
//     written while the template iterated over it), less the generation
//     prompt's text at its start;
// a message's own "loss": true/false overrides the rule for that message;
// loss = "all" trains the whole rendering but for the messages that say
// "loss": false.
#include <algorithm>
#include <cstring>

#include "chat/chat_jinja.hpp"
#include "template/budget.hpp"
#include "template/skeleton_ops.hpp"

namespace tokfeed::text {

namespace {

using tmpl::Value;

class Renderer {
 public:
  // `provenance`: whether renders record which bytes each message wrote.
  Renderer(const ChatSpec& spec, const Value& messages, const Value& tools, bool provenance)
      : spec_(spec), messages_(messages), track_(provenance) {
    prov_.messages.reserve(messages.list->items.size());
    for (const Value& m : messages.list->items) prov_.messages.push_back(m.is_dict() ? m.dict.get() : nullptr);
    prov_.seen.assign(prov_.messages.size(), 0);
    vars_.reserve(spec.globals.size() + 4);  // the globals and the four below, in one allocation
    vars_ = spec.globals;
    static const tmpl::Name kMessages("messages"), kTools("tools"), kDocuments("documents"),
        kPrompt("add_generation_prompt");
    vars_.emplace_back(kMessages, Value());
    vars_.emplace_back(kTools, tools);
    vars_.emplace_back(kDocuments, Value::none());
    vars_.emplace_back(kPrompt, Value::boolean(false));
  }

  // Renders all messages (F), keeping resume points for the renders of
  // messages[:k] that `want` names (tmpl::Resumes); a failure goes in
  // `failed` (a refused record: no exception thrown again past the render).
  std::string render_full(tmpl::Spans* spans, std::vector<uint8_t> want, tmpl::RenderFailure& failed) {
    resumes_.want = std::move(want);
    vars_[vars_.size() - 4].second = messages_;
    vars_.back().second = Value::boolean(false);
    return spec_.tmpl.render(vars_, spec_.limits, spans, track_ ? &prov_ : nullptr, &resumes_, &failed);
  }
  // Renders messages[:n]; throws tmpl::Error. provenance() then says which
  // bytes each message wrote. Resumed from F where it can be.
  std::string render(std::size_t n, bool generation_prompt, tmpl::Spans* spans = nullptr) {
    same_ = 0;
    if (!spans && resumes_.ready(n, generation_prompt))
      if (auto r =
              spec_.tmpl.resume(resumes_, n, generation_prompt, spec_.limits, nullptr, track_ ? &prov_ : nullptr)) {
        same_ = std::min(resumes_.same, r->size());
        return std::move(*r);
      }
    const auto& all = messages_.list->items;
    vars_[vars_.size() - 4].second =
        n == all.size()
            ? messages_
            : Value::recycled_list(std::vector<Value>(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(n)));
    vars_.back().second = Value::boolean(generation_prompt);
    return spec_.tmpl.render(vars_, spec_.limits, spans, track_ ? &prov_ : nullptr);
  }
  // Gives back a text render() returned whose first `same` bytes are F's:
  // a later resumed render takes its buffer (tmpl::Resumes::recycle).
  void recycle(std::string&& text, std::size_t same) { resumes_.recycle(std::move(text), same); }
  const tmpl::Provenance& provenance() const { return prov_; }
  // How many bytes at the start of the last render() are the full
  // render's, known without comparing (copied from it by a resumed render).
  std::size_t same() const { return same_; }

 private:
  const ChatSpec& spec_;
  const Value& messages_;
  tmpl::Vars vars_;
  bool track_;
  tmpl::Provenance prov_;
  tmpl::Resumes resumes_;
  std::size_t same_ = 0;
};

// The message's role (empty: none), valid while the message lives.
std::string_view role_of(const Value& m) {
  if (!m.is_dict()) return {};
  const Value* r = m.dict->find("role");
  return r && r->is_str() ? std::string_view(*r->s) : std::string_view();
}

// The message's own "loss" switch, if it has one.
std::optional<bool> loss_of(const Value& m) {
  if (!m.is_dict()) return std::nullopt;
  const Value* l = m.dict->find("loss");
  if (!l || l->kind != tmpl::Kind::kBool) return std::nullopt;
  return l->b;
}

// The length of the longest common prefix of a and b in bytes; their first
// `known` bytes are known to be the same.
std::size_t common_bytes(std::string_view a, std::string_view b, std::size_t known) {
  std::size_t n = std::min(a.size(), b.size()), k = std::min(known, n);
  while (k + 16 <= n && std::memcmp(a.data() + k, b.data() + k, 16) == 0) k += 16;
  while (k < n && a[k] == b[k]) ++k;
  return k;
}

// Under a skeleton's render (template/skeleton.hpp): where texts a and b,
// equal before byte k, differ inside two sentinels that start at the same
// byte (two holes' sentinels differ only in their numbers), that byte: the
// record's texts differ there where the holes' strings' first bytes do (the
// Split that check_skeleton_split keeps). Else k.
std::size_t at_sentinels(std::string_view a, std::string_view b, std::size_t k) {
  namespace sk = tmpl::skeleton;
  if (!sk::tl_watch || k >= a.size() || k >= b.size()) return k;
  const std::size_t s = sk::covering(a, k);
  return s != std::string_view::npos && s < k && sk::covering(b, k) == s ? s : k;
}

// Under a skeleton's render (template/skeleton.hpp): whether texts that
// agree on their first k bytes and differ at byte k (or where one ends)
// agree on as many bytes of the record's texts, as far as byte `from` (the
// same or before k: a character's start). They do where no sentinel covers
// a byte in [from, k] of either text; where one ends at k and the other's
// sentinel starts there (the record's string is not empty); and where a
// sentinel starts at k in one or both and the record's next bytes differ
// (a Split that other records of the shape must keep).
void check_skeleton_split(std::string_view a, std::string_view b, std::size_t k, std::size_t from) {
  namespace sk = tmpl::skeleton;
  if (!sk::tl_watch) return;
  const bool both = k < a.size() && k < b.size();
  bool at_k = false;
  for (std::string_view t : {a, b}) {
    for (std::size_t at : {from, k}) {
      const std::size_t start = sk::covering(t, at);
      if (start == std::string_view::npos || (!both && start >= k)) continue;
      if (both && start == k && from == k) at_k = true;
      else sk::undecided();
    }
  }
  if (at_k && !sk::split_at(a, b, k)) sk::undecided();
}

// Whether `s` starts with `p`, whose first `known` bytes are known to be
// s's (both start with that much of the full render).
bool starts_with(const std::string& s, const std::string& p, std::size_t known = 0) {
  if (tmpl::skeleton::tl_watch) {
    const std::size_t k = at_sentinels(s, p, common_bytes(s, p, known));
    check_skeleton_split(s, p, k, k);
  }
  if (p.size() > s.size()) return false;
  known = std::min(known, p.size());
  return std::memcmp(s.data() + known, p.data() + known, p.size() - known) == 0;
}

// The length of the longest common prefix of a and b, in whole characters;
// their first `known` bytes are known to be the same.
std::size_t common_prefix(std::string_view a, std::string_view b, std::size_t known = 0) {
  std::size_t n = std::min(a.size(), b.size()), k = at_sentinels(a, b, common_bytes(a, b, known));
  const std::size_t split = k;
  while (k > 0 && k < n && (static_cast<unsigned char>(a[k]) & 0xC0) == 0x80) --k;  // not inside a UTF-8 sequence
  check_skeleton_split(a, b, split, k);
  return k;
}

// Per message, its own text in a rendering of `length` bytes: the pieces
// written for it, and, for the message that wrote last, the tail written after
// every message's text. `last_end`: where the last piece ends (npos: none).
std::vector<std::vector<Span>> own_text(const tmpl::Provenance& prov, std::size_t n, std::size_t length,
                                        std::size_t& last_end) {
  std::vector<std::vector<Span>> own(n);
  last_end = std::string::npos;
  uint32_t last = 0;
  for (const auto& p : prov.pieces) {
    if (p.message >= n) continue;
    auto& v = own[p.message];
    if (!v.empty() && v.back().end == p.begin) v.back().end = static_cast<uint32_t>(p.end);
    else v.push_back({static_cast<uint32_t>(p.begin), static_cast<uint32_t>(p.end)});
    last_end = p.end, last = p.message;
  }
  if (last_end != std::string::npos && last_end < length) {
    auto& v = own[last];
    if (v.back().end == last_end) v.back().end = static_cast<uint32_t>(length);
    else v.push_back({static_cast<uint32_t>(last_end), static_cast<uint32_t>(length)});
  }
  return own;
}

void add_span(std::vector<Span>& spans, std::size_t b, std::size_t e) {
  spans.push_back({static_cast<uint32_t>(b), static_cast<uint32_t>(e)});
}

// Sorts and merges; drops empty spans inside others.
void normalize(std::vector<Span>& spans) {
  std::sort(spans.begin(), spans.end(),
            [](Span a, Span b) { return a.begin < b.begin || (a.begin == b.begin && a.end < b.end); });
  std::vector<Span> out;
  for (Span s : spans) {
    if (!out.empty() && s.begin < out.back().end) {
      out.back().end = std::max(out.back().end, s.end);
    } else if (!out.empty() && s.begin == out.back().end && s.begin != s.end) {
      out.back().end = s.end;
    } else {
      out.push_back(s);
    }
  }
  spans = std::move(out);
}

void subtract(std::vector<Span>& spans, std::size_t b, std::size_t e) {
  std::vector<Span> out;
  for (Span s : spans) {
    if (s.end <= b || s.begin >= e) {
      out.push_back(s);
      continue;
    }
    if (s.begin < b) out.push_back({s.begin, static_cast<uint32_t>(b)});
    if (s.end > e) out.push_back({static_cast<uint32_t>(e), s.end});
  }
  spans = std::move(out);
}

}  // namespace

std::string render_completion(const ChatSpec& spec, const Value& messages, const Value& tools, std::size_t prompt,
                              Loss loss, Rendered& out) {
  out.text.clear();
  out.trained.clear();
  out.prompt.reset();
  tmpl::ReuseScope reuse;
  tmpl::MemoScope memo;
  Renderer r(spec, messages, tools, false);
  try {
    tmpl::RenderFailure failed;
    out.text = r.render_full(nullptr, {}, failed);
    if (failed.failed) return "template " + spec.name + ": " + failed.message;
    // TRL's labels: the tokens past those the prompt's own render (with the
    // generation prompt) shares; loss = "all" (completion_only_loss=False)
    // trains every token.
    if (loss != Loss::kAll) out.prompt = r.render(prompt, true);
  } catch (const tmpl::Error& e) {
    return "template " + spec.name + ": " + e.what();
  }
  out.trained.push_back({0, static_cast<uint32_t>(out.text.size())});
  return {};
}

std::string render_labeled_direct(const ChatSpec& spec, const Value& messages, const Value& tools, Loss loss,
                                  Rendered& out) {
  out.text.clear();
  out.trained.clear();
  tmpl::ReuseScope reuse;  // what the rule allocates around the renders reuses their small blocks
  tmpl::MemoScope memo;    // the renders of this record share their tojson
  const auto& msgs = messages.list->items;
  const std::size_t n = msgs.size();
  const bool last_assistant = loss == Loss::kLastAssistant;
  // loss = "all": the whole rendering trains, {% generation %} blocks or not
  // (TRL's assistant_only_loss=False); the rule places only the messages
  // that untrain themselves.
  const bool whole = loss == Loss::kAll;
  const bool generation = !whole && spec.tmpl.has_generation();

  // Whether each message is an assistant's, asked of its dict once (no
  // render changes a message).
  std::vector<char> is_assistant(n, 0);
  // Which messages train: assistant messages (the last one only under
  // last_assistant; every message under all), unless the message says
  // otherwise.
  std::size_t last = n;
  for (std::size_t i = 0; i < n; ++i)
    if ((is_assistant[i] = role_of(msgs[i]) == "assistant")) last = i;
  std::vector<char> train(n, 0);
  bool overrides = false;
  for (std::size_t i = 0; i < n; ++i) {
    const bool assistant = is_assistant[i];
    train[i] = whole || (assistant && (!last_assistant || i == last));
    if (auto l = loss_of(msgs[i])) {
      overrides |= *l != static_cast<bool>(train[i]);
      train[i] = *l;
    }
  }
  // Under (a), the blocks alone decide, but for last_assistant or a switch.
  const bool last_block = spec.one_block_per_turn && last_assistant && !overrides;
  const bool regions = whole ? overrides : !generation || (!last_block && (last_assistant || overrides));

  // The prefix renders the rule will ask for: for each message it places,
  // P and U (messages[:i]), and Fi (messages[:i+1]).
  std::vector<uint8_t> want(n + 1, 0);
  for (std::size_t i = 0; i < n; ++i) {
    const bool assistant = is_assistant[i];
    const bool placed_by_rule = whole        ? !train[i]
                                : generation ? regions && !last_block && static_cast<bool>(train[i]) != assistant
                                             : static_cast<bool>(train[i]);
    if (!placed_by_rule) continue;
    want[i] |= 3;
    want[i + 1] |= 1;
  }
  Renderer r(spec, messages, tools, regions);
  tmpl::Spans gen;
  try {
    tmpl::RenderFailure failed;
    out.text = r.render_full(generation ? &gen : nullptr, std::move(want), failed);
    if (failed.failed) return "template " + spec.name + ": " + failed.message;
  } catch (const tmpl::Error& e) {
    return "template " + spec.name + ": " + e.what();
  }
  const std::string& full = out.text;
  // Rule (c)'s view of F: each message's own text; whether an iteration was
  // bound to it.
  std::size_t full_last_end;
  std::vector<std::vector<Span>> own;
  if (regions) own = own_text(r.provenance(), n, full.size(), full_last_end);
  // (c) applies to the messages an iteration was bound to, where F has own
  // text at all (a template that collects its output in a variable has none).
  std::vector<char> placed = r.provenance().seen;
  if (r.provenance().pieces.empty()) placed.assign(n, 0);

  // The text message i trains: (b) where it holds, else (c). False (reason
  // set) when neither applies.
  std::string reason;
  auto region = [&](std::size_t i, std::vector<Span>& spans) -> bool {
    const bool assistant = is_assistant[i];
    spans.clear();
    // The prefixes' texts, and their bytes copied from F; given back to
    // the renderer when done with.
    struct Texts {
      explicit Texts(Renderer& r) : r(r) {}
      Renderer& r;
      std::string p, fi, u;
      std::size_t p_same = 0, fi_same = 0, u_same = 0;
      ~Texts() {
        r.recycle(std::move(p), p_same);
        r.recycle(std::move(fi), fi_same);
        r.recycle(std::move(u), u_same);
      }
    } texts(r);
    std::string& p = texts.p;
    std::size_t& p_same = texts.p_same;
    bool p_ok = false;
    std::size_t p_last_end = std::string::npos;
    try {
      p = r.render(i, assistant);
      p_ok = true;
      p_same = r.same();
      if (!r.provenance().pieces.empty()) p_last_end = r.provenance().pieces.back().end;
      // P ⊑ Fi ⊑ F needs P ⊑ F: where that fails, Fi need not be rendered.
      if (starts_with(full, p, p_same)) {
        // Fi of the last message is F itself, read where it is.
        const bool last_message = i + 1 == n;
        if (!last_message) texts.fi = r.render(i + 1, false);
        const std::string& fi = last_message ? full : texts.fi;
        const std::size_t fi_same = last_message ? full.size() : (texts.fi_same = r.same());
        if (starts_with(fi, p, std::min(p_same, fi_same)) && starts_with(full, fi, fi_same)) {
          // An empty span trains nothing, not even a token it falls inside.
          if (fi.size() > p.size()) add_span(spans, p.size(), fi.size());
          return true;
        }
      }
    } catch (const tmpl::LimitError& e) {
      reason = "template " + spec.name + ": " + e.what();
      return false;
    } catch (const tmpl::Error&) {
      // a prefix the template refuses: (b) does not apply
    }
    if (!placed[i]) {
      reason = "template " + spec.name + ": no label rule places messages[" + std::to_string(i) + "] (" +
               std::string(role_of(msgs[i])) +
               "): the prefix rule fails there, and the template writes no text while iterating over it (it "
               "reaches messages by index, or collects its output in a variable); use a template with "
               "{% generation %} blocks, or loss = \"last_assistant\" or \"all\"";
      return false;
    }
    spans = own[i];
    if (!assistant || spans.empty()) return true;
    // The generation prompt: what P adds after the text for msgs[:i], i.e.
    // from the common prefix of P and U = render(msgs[:i], false), or from
    // the end of the last text P writes for a message where that comes first.
    std::string_view prompt;
    if (p_ok) {
      try {
        std::string& u = texts.u;
        u = r.render(i, false);
        texts.u_same = r.same();
        std::size_t k = common_prefix(p, u, std::min(p_same, texts.u_same));
        if (p_last_end != std::string::npos) k = std::min(k, p_last_end);
        prompt = std::string_view(p).substr(k);
      } catch (const tmpl::LimitError& e) {
        reason = "template " + spec.name + ": " + e.what();
        return false;
      } catch (const tmpl::Error&) {
        prompt = {};
      }
    }
    const std::size_t start = spans.front().begin;
    const std::size_t cut = start + common_prefix(std::string_view(full).substr(start), prompt);
    std::vector<Span> kept;
    for (Span sp : spans)
      if (sp.end > cut) kept.push_back({std::max(sp.begin, static_cast<uint32_t>(cut)), sp.end});
    spans = std::move(kept);
    return true;
  };

  std::vector<Span> spans;
  if (whole) {
    if (!full.empty()) add_span(out.trained, 0, full.size());
    for (std::size_t i = 0; i < n; ++i) {
      if (train[i]) continue;
      if (!region(i, spans)) return reason;
      for (Span sp : spans) subtract(out.trained, sp.begin, sp.end);
    }
  } else if (generation) {
    for (auto [b, e] : gen) add_span(out.trained, b, e);
    if (last_block) {
      // Built-in templates: the last block is the last assistant's.
      if (out.trained.size() > 1) out.trained.erase(out.trained.begin(), out.trained.end() - 1);
    } else if (regions) {
      for (std::size_t i = 0; i < n; ++i) {
        if (static_cast<bool>(train[i]) == static_cast<bool>(is_assistant[i])) continue;  // what the blocks already say
        if (!region(i, spans)) return reason;
        for (Span sp : spans) {
          if (train[i]) out.trained.push_back(sp);
          else subtract(out.trained, sp.begin, sp.end);
        }
      }
    }
  } else {
    for (std::size_t i = 0; i < n; ++i) {
      if (!train[i]) continue;
      if (!region(i, spans)) return reason;
      out.trained.insert(out.trained.end(), spans.begin(), spans.end());
    }
  }
  normalize(out.trained);
  return {};
}

}  // namespace tokfeed::text

// A chat template: Jinja source parsed once (by the supervisor, before
// fork), rendered many times, each render bounded by a step budget.
#pragma once

#include <cstdint>
#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "template/name.hpp"
#include "template/value.hpp"

namespace tokfeed::tmpl {

struct Parsed;

struct RenderLimits {
  uint64_t max_steps = 2'000'000;      // evaluation steps per render (and one per 4 KiB allocated)
  std::size_t max_output = 64u << 20;  // bytes per render
  std::size_t max_bytes = 256u << 20;  // memory a render may hold at once (strings, lists, dicts, output)
  std::tm now{};                       // what strftime_now() formats
};

// One record's renders share a step budget while a RecordScope is in scope
// on the thread (the label rule renders every prefix of a conversation):
// `max_steps` in all, so a record's work is bounded however many turns it
// has. Scopes do not nest: an inner one is ignored.
class RecordScope {
 public:
  static constexpr uint64_t kRendersPerRecord = 16;  // the record's budget: this many renders' worth of steps
  explicit RecordScope(const RenderLimits& limits) noexcept : RecordScope(kRendersPerRecord * limits.max_steps) {}
  explicit RecordScope(uint64_t max_steps) noexcept;
  ~RecordScope();
  RecordScope(const RecordScope&) = delete;
  RecordScope& operator=(const RecordScope&) = delete;
  uint64_t used() const noexcept { return used_; }

 private:
  friend class Template;
  friend struct RenderRunner;
  uint64_t max_steps_, used_ = 0;
  bool active_;
};

// One record's renders share what depends only on values no template
// changes (lists and dicts other than namespaces): `tojson` of the record's
// tools or tool-call arguments is written once per record, not once per
// render, and so is a pure macro's call with the same arguments
// (macro_memo.hpp), while a MemoScope is in scope on the thread. Scopes do not nest:
// an inner one is ignored. When it ends, the thread keeps a few of its
// entries for the next scopes, those whose object something besides the
// memo still holds (a record's tools reused from a record before are the
// same objects: their text is too; each entry holds its object, so its
// address cannot be reused by another); the rest is freed.
struct MacroMemo;  // macro_memo.hpp

class MemoScope {
 public:
  MemoScope() noexcept;
  ~MemoScope();
  MemoScope(const MemoScope&) = delete;
  MemoScope& operator=(const MemoScope&) = delete;

  struct Entry {
    Value subject;  // keeps the object alive: its address cannot be reused
    std::string options;
    Value result;
    bool used = false;  // kept from the scope before, and read in this one
  };
  std::vector<Entry> entries;
  // The results of pure macros' calls (macro_memo.hpp), kept from one
  // scope to the next on the thread as the tojson texts are: while
  // something besides the memo holds their key's objects.
  std::unique_ptr<MacroMemo> macros;
  uint64_t number = 0;  // the scope's number on its thread

 private:
  bool active_;
  std::size_t kept_ = 0;  // entries[:kept_]: those the scope before left
};

// Every render in the process, now and later, fails at its next step
// ("the daemon is stopping"): SIGTERM does not wait for a long render.
void cancel_renders() noexcept;

// A render's variables, by interned name (copying them copies no string).
using Vars = std::vector<std::pair<Name, Value>>;
using Spans = std::vector<std::pair<std::size_t, std::size_t>>;  // byte [begin, end)

// Which bytes of the output were written for which message
// (docs/data_model.md 2.2): a byte is messages[i]'s when it reaches the
// top-level output while the innermost `for` iteration whose one loop
// variable is a message is bound to messages[i]. A message is known by
// identity: the template sees the very dicts of `messages` (slices keep them).
struct Provenance {
  std::vector<const DictObj*> messages;  // in: messages[i]'s dict
  struct Piece {
    std::size_t begin, end;
    uint32_t message;
  };
  std::vector<Piece> pieces;  // out: in output order, adjacent pieces of one message joined
  std::vector<char> seen;     // out: whether an iteration was bound to messages[i]
  // Which message `d` is (-1: none): the neighbours of the last one found
  // first (loops walk the messages forwards or backwards) where no dict is
  // two messages, else by binary search in `sorted` (the first index), which
  // each render builds from `messages`.
  int64_t index_of(const DictObj* d) const {
    const std::size_t n = messages.size();
    if (distinct && last < n) {
      if (last + 1 < n && messages[last + 1] == d) return static_cast<int64_t>(++last);
      if (last > 0 && messages[last - 1] == d) return static_cast<int64_t>(--last);
      if (messages[last] == d) return static_cast<int64_t>(last);
    }
    return search(d);
  }
  std::vector<std::pair<const DictObj*, uint32_t>> sorted;
  bool distinct = false;  // no dict is two of `messages`

 private:
  int64_t search(const DictObj* d) const;
  mutable std::size_t last = SIZE_MAX;
};

struct ResumeState;

// Renders of a conversation's prefixes, messages[:k], resumed from its full
// render where the template provably renders them as it renders the full
// conversation up to the point where its loop over the messages reaches
// message k (template/resume.hpp). The render's `messages` and
// `add_generation_prompt` are the variables of those names.
// The room every render's output starts with: a short conversation's at
// once, under the size whose allocation costs a step (budget.hpp). Every
// render starts alike, so a resumed one grows as a fresh one does.
inline constexpr std::size_t kOutputReserve = 4000;

struct Resumes {
  std::vector<uint8_t> want;           // in, per k in [0, n]: 1: render(messages[:k], false) wanted; 2: with the prompt
  std::shared_ptr<ResumeState> state;  // out
  mutable std::size_t resumed = 0;     // out: the renders resume() started from a point
  // out: how many bytes at the start of the text resume() last returned
  // were copied from the full render's (0: none, it rendered in full).
  mutable std::size_t same = 0;
  // Whether render(messages[:k], g) can be resumed: from the point for k,
  // or, where the template read before its loop over the messages what the
  // prefix sees differently, from there if the prefix's state is then the
  // full render's (else resume() renders it in full).
  bool ready(std::size_t k, bool g) const noexcept;
  // Gives back a text resume() returned, whose first `same` bytes are still
  // the full render's: its buffer serves a later resumed render, which then
  // copies only the full render's bytes past those.
  // Only outputs that grew past the room every render starts with: copying
  // less than that costs less than keeping it.
  void recycle(std::string&& text, std::size_t same) const {
    if (text.capacity() > kOutputReserve && same != 0) keep(std::move(text), same);
  }

 private:
  void keep(std::string&& text, std::size_t same) const;
};

// A render's failure taken as a value (Template::render's `failed`): what
// the tmpl::Error it would throw says, and whether it would be a
// tmpl::LimitError.
struct RenderFailure {
  bool failed = false;
  bool limit = false;
  std::string message;
};

class Template {
 public:
  // Throws tmpl::Error "line:column: what" for a syntax error or a construct
  // the engine lacks.
  static Template parse(std::string_view source);

  bool has_generation() const noexcept;
  // What the template may fail on at render, found at load: unknown filters
  // and tests where jinja2 defers the error until a render reaches them,
  // each "line:column: unknown filter 'name' ...".
  const std::vector<std::string>& warnings() const noexcept;
  // Renders with `vars` as the template's variables. `generation`, when
  // given, receives the byte spans of {% generation %} blocks; `provenance`,
  // when given, which bytes each message wrote. Throws
  // tmpl::Error (the message, with the line:column reached) when the
  // template raises or fails; where `failed` is given, the failure is put
  // there instead and the text is empty (a caller that expects refusals
  // saves a second exception's unwinding).
  std::string render(const Vars& vars, const RenderLimits& limits, Spans* generation = nullptr,
                     Provenance* provenance = nullptr, Resumes* resumes = nullptr,
                     RenderFailure* failed = nullptr) const;
  // render(vars with messages[:k] and add_generation_prompt = g) from the
  // resume point a render with `resumes` kept (resumes.ready(k, g)): the
  // same text, spans, provenance and errors, and the same steps counted.
  // Nullopt where the record's budget ends before the point: the render in
  // full then says where it stops.
  std::optional<std::string> resume(const Resumes& resumes, std::size_t k, bool g, const RenderLimits& limits,
                                    Spans* generation = nullptr, Provenance* provenance = nullptr) const;

 private:
  std::shared_ptr<const Parsed> p_;
};

// The instant "YYYY-MM-DD[THH:MM[:SS]]" (UTC) as a std::tm; false when malformed.
bool parse_instant(std::string_view text, std::tm& out);

}  // namespace tokfeed::tmpl

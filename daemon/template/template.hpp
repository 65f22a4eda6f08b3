// A chat template: Jinja source parsed once (by the supervisor, before
// fork), rendered many times, each render bounded by a step budget.
#pragma once

#include <cstdint>
#include <ctime>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "template/value.hpp"

namespace tokfeed::tmpl {

struct Parsed;

struct RenderLimits {
  uint64_t max_steps = 2'000'000;      // evaluation steps per render
  std::size_t max_output = 64u << 20;  // bytes per render
  std::tm now{};                       // what strftime_now() formats
};

using Vars = std::vector<std::pair<std::string, Value>>;
using Spans = std::vector<std::pair<std::size_t, std::size_t>>;  // byte [begin, end)

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
  // given, receives the byte spans of {% generation %} blocks. Throws
  // tmpl::Error (the message, with the line:column reached) when the
  // template raises or fails.
  std::string render(const Vars& vars, const RenderLimits& limits, Spans* generation = nullptr) const;

 private:
  std::shared_ptr<const Parsed> p_;
};

// The instant "YYYY-MM-DD[THH:MM[:SS]]" (UTC) as a std::tm; false when malformed.
bool parse_instant(std::string_view text, std::tm& out);

}  // namespace tokfeed::tmpl

#include "template/template.hpp"

#include <algorithm>
#include <cstdio>

#include "template/interp.hpp"
#include "template/parser.hpp"

namespace tokfeed::tmpl {

Template Template::parse(std::string_view source) {
  Template t;
  t.p_ = std::make_shared<const Parsed>(tmpl::parse(source));
  return t;
}

bool Template::has_generation() const noexcept { return p_ && p_->has_generation; }

std::string Template::render(const Vars& vars, const RenderLimits& limits, Spans* generation,
                             Provenance* provenance) const {
  std::string out;
  Interp in;
  in.frames.emplace_back();
  in.frames[0].vars = vars;
  in.out = &out;
  in.root = &out;
  in.generation = generation;
  in.max_steps = limits.max_steps;
  in.max_output = limits.max_output;
  in.now = limits.now;
  if (generation) generation->clear();
  in.provenance = provenance;
  if (provenance) {
    provenance->pieces.clear();
    provenance->seen.assign(provenance->messages.size(), 0);
    auto& sorted = provenance->sorted;
    sorted.clear();
    for (std::size_t k = 0; k < provenance->messages.size(); ++k)
      sorted.emplace_back(provenance->messages[k], static_cast<uint32_t>(k));
    std::sort(sorted.begin(), sorted.end());
  }
  try {
    exec(in, p_->body);
  } catch (const Error& e) {
    throw Error(std::string(e.what()) + " (at template " + where(in.pos) + ")");
  }
  return out;
}

int64_t Provenance::index_of(const DictObj* d) const {
  auto it = std::lower_bound(sorted.begin(), sorted.end(), std::make_pair(d, uint32_t{0}));
  return it != sorted.end() && it->first == d ? static_cast<int64_t>(it->second) : -1;
}

bool parse_instant(std::string_view text, std::tm& out) {
  int y = 0, mo = 0, d = 0, h = 0, mi = 0, s = 0;
  std::string t(text);
  int n = std::sscanf(t.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d", &y, &mo, &d, &h, &mi, &s);
  if (n < 3 || (n > 3 && n < 5) || mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || s > 60) return false;
  std::tm tm{};
  tm.tm_year = y - 1900;
  tm.tm_mon = mo - 1;
  tm.tm_mday = d;
  tm.tm_hour = h;
  tm.tm_min = mi;
  tm.tm_sec = s;
  time_t tt = timegm(&tm);  // normalizes and fills tm_wday/tm_yday
  if (tt == static_cast<time_t>(-1)) return false;
  gmtime_r(&tt, &out);
  return true;
}

}  // namespace tokfeed::tmpl

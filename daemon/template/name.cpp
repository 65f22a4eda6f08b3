// The process's table of interned variable names.
#include "template/name.hpp"

#include "template/budget.hpp"
#include "template/value.hpp"

#include <cstdint>
#include <functional>
#include <mutex>
#include <unordered_set>

namespace tokfeed::tmpl {

namespace {

struct Hash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};

struct Table {
  std::mutex mu;
  std::unordered_set<std::string, Hash, std::equal_to<>> names;  // nodes: a name's address never moves
};

Table& table() {
  static Table* t = new Table;  // never destroyed: names outlive every template and render
  return *t;
}

// The names this thread interned last, by a hash of their bytes: a render's
// globals (`messages`, `add_generation_prompt`, ...) are interned per render
// without the table's lock.
constexpr std::size_t kRecent = 64;
thread_local const std::string* tl_recent[kRecent];

std::size_t recent_slot(std::string_view s) noexcept {
  std::size_t h = s.size();
  if (!s.empty()) h = h * 31 + static_cast<unsigned char>(s[0]) * 7 + static_cast<unsigned char>(s.back());
  if (s.size() > 2) h = h * 31 + static_cast<unsigned char>(s[s.size() / 2]);
  return h % kRecent;
}

}  // namespace

const std::string& Name::none() noexcept {
  static const std::string* n = new std::string("\001none");  // interned by no one: no name equals it
  return *n;
}

const std::string* Name::intern(std::string_view s) {
  const std::size_t slot = recent_slot(s);
  if (const std::string* r = tl_recent[slot]; r && r->size() == s.size() && bytes_equal(r->data(), s.data(), s.size()))
    return r;
  Table& t = table();
  const std::string* p;
  {
    OutsideBudget outside;  // the table is the process's, and lives on
    std::lock_guard<std::mutex> lock(t.mu);
    auto it = t.names.find(s);
    if (it == t.names.end()) it = t.names.emplace(s).first;
    p = &*it;
  }
  tl_recent[slot] = p;
  return p;
}

}  // namespace tokfeed::tmpl

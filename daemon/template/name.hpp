// Variable names, interned: a scope is searched by comparing one word per
// variable instead of the names' bytes.
#pragma once

#include <string>
#include <string_view>

namespace tokfeed::tmpl {

// A variable's name. Equal names are one interned string, kept for the
// process (a template's identifiers, the render's globals: a few hundred
// names in all), so two names are equal iff their pointers are.
class Name {
 public:
  // No name: equal to no variable's.
  Name() noexcept : p_(&none()) {}
  Name(std::string_view s) : p_(intern(s)) {}    // NOLINT: a name from its text
  Name(const char* s) : p_(intern(s)) {}         // NOLINT
  Name(const std::string& s) : p_(intern(s)) {}  // NOLINT
  const std::string& str() const noexcept { return *p_; }
  operator const std::string&() const noexcept { return *p_; }  // NOLINT: read as the string it names
  operator std::string_view() const noexcept { return *p_; }    // NOLINT
  friend bool operator==(Name a, Name b) noexcept { return a.p_ == b.p_; }
  friend bool operator==(Name a, std::string_view b) noexcept { return std::string_view(*a.p_) == b; }
  friend bool operator==(Name a, const char* b) noexcept { return std::string_view(*a.p_) == b; }
  friend bool operator==(Name a, const std::string& b) noexcept { return *a.p_ == b; }

 private:
  static const std::string& none() noexcept;
  static const std::string* intern(std::string_view s);
  const std::string* p_;
};

}  // namespace tokfeed::tmpl

// The Python signatures of jinja2's filters and tests (and transformers'
// tojson): the arguments a call passes are checked against them as Python
// binds a call, so a call jinja2 refuses with a TypeError fails here too.
#include <algorithm>
#include <string>

#include "template/parser.hpp"

namespace tokfeed::tmpl {

namespace {

struct NamedSignature {
  std::string_view name;
  Signature sig;
};

// Parameters in order, the subject first; `required` of them have no
// default. Builtins (len, abs, markupsafe's escape, operator.eq ...) take
// positional arguments only. Filters with *args/**kwargs (map, select,
// format ...) check their own and are not listed.
constexpr NamedSignature kFilterSigs[] = {
    {"abs", {{"x"}, 1, 1, true}},
    {"attr", {{"obj", "name"}, 2, 2, false}},
    {"batch", {{"value", "linecount", "fill_with"}, 3, 2, false}},
    {"capitalize", {{"s"}, 1, 1, false}},
    {"center", {{"value", "width"}, 2, 1, false}},
    {"count", {{"obj"}, 1, 1, true}},
    {"d", {{"value", "default_value", "boolean"}, 3, 1, false}},
    {"default", {{"value", "default_value", "boolean"}, 3, 1, false}},
    {"dictsort", {{"value", "case_sensitive", "by", "reverse"}, 4, 1, false}},
    {"e", {{"s"}, 1, 1, true}},
    {"escape", {{"s"}, 1, 1, true}},
    {"filesizeformat", {{"value", "binary"}, 2, 1, false}},
    {"first", {{"seq"}, 1, 1, false}},
    {"float", {{"value", "default"}, 2, 1, false}},
    {"forceescape", {{"value"}, 1, 1, false}},
    {"groupby", {{"value", "attribute", "default", "case_sensitive"}, 4, 2, false}},
    {"indent", {{"s", "width", "first", "blank"}, 4, 1, false}},
    {"int", {{"value", "default", "base"}, 3, 1, false}},
    {"items", {{"value"}, 1, 1, false}},
    {"join", {{"value", "d", "attribute"}, 3, 1, false}},
    {"last", {{"seq"}, 1, 1, false}},
    {"length", {{"obj"}, 1, 1, true}},
    {"list", {{"value"}, 1, 1, false}},
    {"lower", {{"s"}, 1, 1, false}},
    {"max", {{"value", "case_sensitive", "attribute"}, 3, 1, false}},
    {"min", {{"value", "case_sensitive", "attribute"}, 3, 1, false}},
    {"pprint", {{"value"}, 1, 1, false}},
    {"random", {{"seq"}, 1, 1, false}},
    {"replace", {{"s", "old", "new", "count"}, 4, 3, false}},
    {"reverse", {{"value"}, 1, 1, false}},
    {"round", {{"value", "precision", "method"}, 3, 1, false}},
    {"safe", {{"value"}, 1, 1, false}},
    {"slice", {{"value", "slices", "fill_with"}, 3, 2, false}},
    {"sort", {{"value", "reverse", "case_sensitive", "attribute"}, 4, 1, false}},
    {"string", {{"s"}, 1, 1, false}},
    {"striptags", {{"value"}, 1, 1, false}},
    {"sum", {{"iterable", "attribute", "start"}, 3, 1, false}},
    {"title", {{"s"}, 1, 1, false}},
    {"tojson", {{"x", "ensure_ascii", "indent", "separators", "sort_keys"}, 5, 1, false}},
    {"trim", {{"value", "chars"}, 2, 1, false}},
    {"truncate", {{"s", "length", "killwords", "end", "leeway"}, 5, 1, false}},
    {"unique", {{"value", "case_sensitive", "attribute"}, 3, 1, false}},
    {"upper", {{"s"}, 1, 1, false}},
    {"urlencode", {{"value"}, 1, 1, false}},
    {"wordcount", {{"s"}, 1, 1, false}},
    {"wordwrap", {{"s", "width", "break_long_words", "wrapstring", "break_on_hyphens"}, 5, 1, false}},
    {"xmlattr", {{"d", "autospace"}, 2, 1, false}},
};

constexpr Signature kOne = {{"value"}, 1, 1, false};
constexpr Signature kOperator = {{"a", "b"}, 2, 2, true};  // operator.eq, operator.lt ...
constexpr NamedSignature kTestSigs[] = {
    {"!=", kOperator},
    {"<", kOperator},
    {"<=", kOperator},
    {"==", kOperator},
    {">", kOperator},
    {">=", kOperator},
    {"callable", {{"obj"}, 1, 1, true}},
    {"divisibleby", {{"value", "num"}, 2, 2, false}},
    {"eq", kOperator},
    {"equalto", kOperator},
    {"ge", kOperator},
    {"greaterthan", kOperator},
    {"gt", kOperator},
    {"in", {{"value", "seq"}, 2, 2, false}},
    {"le", kOperator},
    {"lessthan", kOperator},
    {"lt", kOperator},
    {"ne", kOperator},
    {"sameas", {{"value", "other"}, 2, 2, false}},
};
constexpr std::string_view kOneArgTests[] = {
    "boolean", "defined", "escaped", "even", "false",    "filter", "float", "integer", "iterable",  "lower",
    "mapping", "none",    "number",  "odd",  "sequence", "string", "test",  "true",    "undefined", "upper",
};

}  // namespace

const Signature* filter_signature(std::string_view name) {
  for (const auto& f : kFilterSigs)
    if (f.name == name) return &f.sig;
  return nullptr;
}

const Signature* test_signature(std::string_view name) {
  for (const auto& t : kTestSigs)
    if (t.name == name) return &t.sig;
  if (std::find(std::begin(kOneArgTests), std::end(kOneArgTests), name) != std::end(kOneArgTests)) return &kOne;
  return nullptr;
}

void check_call(const Signature& sig, std::string_view name, const Args& args) {
  const std::size_t given = args.pos.size() + 1;                               // the subject is the first
  if (given <= sig.count && args.kw.empty() && given >= sig.required) return;  // the common case
  const std::string fn = std::string(name) + "()";
  if (given > sig.count)
    throw Error(fn + " takes " + std::to_string(sig.count) + " positional argument(s) but " + std::to_string(given) +
                " were given");
  if (!args.kw.empty() && sig.positional_only) throw Error(fn + " takes no keyword arguments");
  std::size_t filled = given;
  for (const auto& [k, v] : args.kw) {
    const std::string_view* end = sig.params + sig.count;
    const std::string_view* p = std::find(sig.params, end, std::string_view(k));
    if (p == end) throw Error(fn + " got an unexpected keyword argument '" + k + "'");
    if (static_cast<std::size_t>(p - sig.params) < given)
      throw Error(fn + " got multiple values for argument '" + k + "'");
    if (static_cast<std::size_t>(p - sig.params) < sig.required) ++filled;
  }
  if (filled < sig.required) throw Error(fn + " missing a required argument");
}

}  // namespace tokfeed::tmpl

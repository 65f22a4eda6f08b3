// Evaluation without copies: values borrowed where they already exist, and
// chains of string concatenation joined in one buffer.
#include <string>

#include "template/filter_util.hpp"
#include "template/interp.hpp"
#include "template/resume.hpp"

namespace tokfeed::tmpl {

const Value& operand_ref(Interp& in, const Expr& e, Value& tmp) {
  const Value& v = eval_ref(in, e, tmp);
  if (tracking(in)) in.track->operand(v);
  return v;
}

// a + b ~ c + ...: a left-nested chain of `+` and `~`, evaluated as the
// nested nodes are (the same steps, operands in the same order, the same
// errors), with the strings joined in one buffer instead of a new string
// per operator.
bool concat_into(Interp& in, const Expr& top, std::string& buf, Value& acc, std::size_t base) {
  constexpr std::size_t kMax = 64;
  const Expr* chain[kMax];
  std::size_t n = 0;
  const Expr* leaf = &top;
  while (n < kMax && is_concat(*leaf)) {
    if (n > 0) in.step(leaf->pos);  // eval() took the top node's step
    chain[n++] = leaf;
    leaf = leaf->a[0].get();
  }
  Value first;
  const Value* accp = &operand_ref(in, *leaf, first);  // acc's value while it is borrowed
  bool in_buf = false;                                 // acc's value is the str in buf[base:]
  for (std::size_t k = n; k-- > 0;) {
    const Expr& node = *chain[k];
    Value tmp;
    // The left operand is borrowed only until the right one is evaluated:
    // a pure right operand changes no variable.
    if (!in_buf && accp != &acc && !node.a[1]->pure) acc = *accp, accp = &acc;
    const Value& r = operand_ref(in, *node.a[1], tmp);
    in.pos = node.pos;
    if (node.name[0] == '~') {
      if (!in_buf) {
        buf.resize(base);
        append_str(*accp, buf);
        in_buf = true;
      }
      append_str(r, buf);
    } else if (r.is_str() && !r.markup && (in_buf || (accp->is_str() && !accp->markup))) {
      if (!in_buf) {
        buf.resize(base);
        buf += *accp->s;
        in_buf = true;
      }
      buf += *r.s;
    } else {
      if (in_buf) {
        acc = Value::str(base == 0 ? std::move(buf) : buf.substr(base));
        buf.resize(base);
        in_buf = false;
      } else if (accp != &acc) {
        acc = *accp;
      }
      accp = &acc;
      acc = binary_op(node.name, acc, r);
    }
  }
  if (!in_buf && accp != &acc) acc = *accp;
  return in_buf;
}

Value concat_chain(Interp& in, const Expr& top) {
  std::string buf;
  Value acc;
  return concat_into(in, top, buf, acc) ? Value::str(std::move(buf)) : acc;
}

namespace {

// eval_ref()'s cases, each in a function of its own that the dispatch
// jumps to: eval_ref() itself then saves no registers.

[[gnu::noinline]] const Value& name_ref(Interp& in, const Expr& e, Value& tmp) {
  in.step(e.pos);
  if (e.prompt && (in.track || in.probe)) [[unlikely]]
    prompt_read(in);
  if (const Value* v = in.find_var(e.var)) return *v;
  return in.global_or_undefined(e, tmp);
}

[[gnu::noinline]] const Value& attr_ref(Interp& in, const Expr& e, Value& tmp) {
  in.step(e.pos);
  Value t;
  const Value& obj = eval_ref(in, *e.a[0], t);
  if (tracking(in)) in.track->attr(obj, e.name);
  in.pos = e.pos;
  // What get_attr would copy, borrowed where `obj` itself is; a miss
  // on a dict without such a method is the node's undefined value.
  if (obj.is_dict() && (e.methods & kMethodsKnown) && (obj.ns || !(e.methods & kMethodDict))) {
    if (const Value* v = obj.dict->find(e.name)) {
      if (&obj != &t) return *v;
      tmp = *v;
      return tmp;
    }
    return e.undef;
  }
  if (&obj != &t && obj.is_dict() && (obj.ns || !has_method(obj, e.name)))
    if (const Value* v = obj.dict->find(e.name)) return *v;
  tmp = get_attr(obj, e.name);
  return tmp;
}

// obj[key]: a dict's value under a str key or a list's item, borrowed
// where `obj` itself is; else what get_item gives, in `tmp`.
[[gnu::noinline]] const Value& item_ref(Interp& in, const Expr& e, Value& tmp) {
  in.step(e.pos);
  Value t, k;
  const Value& obj = e.a[1]->pure ? eval_ref(in, *e.a[0], t) : (t = eval(in, *e.a[0]));
  const Value& key = operand_ref(in, *e.a[1], k);
  if (tracking(in)) in.track->item(obj, key);
  in.pos = e.pos;
  if (&obj != &t) {
    if (obj.kind == Kind::kDict && key.is_str() && !key.s->starts_with('\x01')) {
      if (const Value* v = obj.dict->find(*key.s)) return *v;
    } else if (obj.kind == Kind::kList && !obj.gen && !obj.view && int_like(key)) {
      const auto& items = obj.list->items;
      int64_t i = as_int(key), n = static_cast<int64_t>(items.size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) return items[static_cast<std::size_t>(i)];
    }
  }
  tmp = get_item(obj, key);
  return tmp;
}

[[gnu::noinline]] const Value& value_ref(Interp& in, const Expr& e, Value& tmp) {
  tmp = eval(in, e);
  return tmp;
}

}  // namespace

const Value& eval_ref(Interp& in, const Expr& e, Value& tmp) {
  switch (e.kind) {
    case EK::kLiteral: in.step(e.pos); return e.lit;
    case EK::kName: return name_ref(in, e, tmp);
    case EK::kAttr: return attr_ref(in, e, tmp);
    case EK::kItem: return item_ref(in, e, tmp);
    default: return value_ref(in, e, tmp);
  }
}

}  // namespace tokfeed::tmpl

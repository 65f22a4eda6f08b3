// Evaluation without copies: values borrowed where they already exist, and
// chains of string concatenation joined in one buffer.
#include <string>

#include "template/budget.hpp"
#include "template/filter_util.hpp"
#include "template/interp.hpp"
#include "template/resume.hpp"

namespace tokfeed::tmpl {

const Value& operand_ref(Interp& in, const Expr& e, Value& tmp) {
  const Value& v = eval_ref(in, e, tmp);
  if (tracking(in)) in.track->operand(v);
  return v;
}

namespace {

constexpr std::size_t kMaxChain = 64;

// The nodes of a left-nested chain of `+` and `~` from the top (at most
// kMaxChain), and its leftmost operand: the steps eval() takes for the
// nodes below the top one.
[[gnu::always_inline]] inline std::size_t gather_chain(Interp& in, const Expr& top, const Expr** chain,
                                                       const Expr*& leaf) {
  std::size_t n = 0;
  leaf = &top;
  while (n < kMaxChain && is_concat(*leaf)) {
    if (n > 0) in.step(leaf->pos);  // eval() took the top node's step
    chain[n++] = leaf;
    leaf = leaf->a[0].get();
  }
  return n;
}

// The chain's nodes chain[k-1] down to chain[0], applied to the value so
// far (`*accp`, or the str in buf[base:] where `in_buf`), as concat_into()
// says.
[[gnu::always_inline]] inline bool concat_nodes(Interp& in, const Expr* const* chain, std::size_t k, const Value* accp,
                                                bool in_buf, std::string& buf, Value& acc, std::size_t base) {
  while (k-- > 0) {
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
        append_through(*accp, buf);
        in_buf = true;
      }
      append_through(r, buf);
    } else if (r.is_str() && !r.markup && (in_buf || (accp->is_str() && !accp->markup))) {
      if (!in_buf) {
        buf.resize(base);
        buf += accp->s.through();
        in_buf = true;
      }
      buf += r.s.through();
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

}  // namespace

// a + b ~ c + ...: a left-nested chain of `+` and `~`, evaluated as the
// nested nodes are (the same steps, operands in the same order, the same
// errors), with the strings joined in one buffer instead of a new string
// per operator.
bool concat_into(Interp& in, const Expr& top, std::string& buf, Value& acc, std::size_t base) {
  const Expr* chain[kMaxChain];
  const Expr* leaf;
  const std::size_t n = gather_chain(in, top, chain, leaf);
  Value first;
  const Value& l = operand_ref(in, *leaf, first);
  return concat_nodes(in, chain, n, &l, false, buf, acc, base);
}

Value concat_chain(Interp& in, const Expr& top) {
  std::string buf;
  Value acc;
  return concat_into(in, top, buf, acc) ? Value::str(std::move(buf)) : acc;
}

Value append_to_attribute(Interp& in, const Stmt& s) {
  const Expr& top = *s.exprs[0];
  if (!appends_to(top, s.targets[0], s.text)) return eval(in, top);  // its `~` made markup_join
  in.step(top.pos);                                                  // eval()'s step for the top node
  const Expr* chain[kMaxChain];
  const Expr* leaf;
  const std::size_t n = gather_chain(in, top, chain, leaf);
  Value first;
  const Value& l = operand_ref(in, *leaf, first);
  if (!l.is_str() || l.markup) {
    std::string buf;
    Value acc;
    return concat_nodes(in, chain, n, &l, false, buf, acc, 0) ? Value::str(std::move(buf)) : acc;
  }
  // The attribute's str as it is now, held whatever the operands do to the
  // attribute; what the chain appends to it gathered on its own.
  Value held = l;
  first = Value();
  std::string tail;
  for (std::size_t k = n; k-- > 0;) {
    const Expr& node = *chain[k];
    Value tmp;
    const Value& r = operand_ref(in, *node.a[1], tmp);
    in.pos = node.pos;
    if (node.name[0] == '~' || (r.is_str() && !r.markup)) {
      StepsUncounted uncounted;
      append_through(r, tail);
      continue;
    }
    // `+` of what is no plain str: the str so far, and the rest of the
    // chain as concat_into() takes it.
    std::string buf;
    {
      StepsUncounted uncounted;
      buf.reserve(held.s.unread().size() + tail.size());
      buf += held.s.through();
      buf += tail;
      skeleton::saw_copy();
    }
    charge_steps(in, tail.size());
    Value acc = binary_op(node.name, Value::str(std::move(buf)), r);
    buf.clear();
    return concat_nodes(in, chain, k, &acc, false, buf, acc, 0) ? Value::str(std::move(buf)) : acc;
  }
  charge_steps(in, tail.size());
  StepsUncounted uncounted;
  if (!tracking(in)) {
    // The str grows in place where no other reference can see it: this
    // statement's namespace attribute, which it sets to the result, and
    // `held` alone hold it (or `held` alone, the attribute set otherwise
    // meanwhile).
    const Value* ns = in.find_var(s.names[0]);
    const Value* now = ns && ns->is_dict() && ns->ns && !ns->view ? ns->dict->find(s.text) : nullptr;
    const bool in_attribute = now && now->kind == Kind::kStr && now->s == held.s;
    const uint32_t refs = held.s.references();
    if ((in_attribute && refs == 2 && s.text[0] != '_') || refs == 1) {
      held.s.unshared_text() += tail;
      skeleton::saw_copy();
      return held;
    }
  }
  std::string out;
  out.reserve(held.s.unread().size() + tail.size());
  out += held.s.through();
  out += tail;
  skeleton::saw_copy();
  return Value::str(std::move(out));
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

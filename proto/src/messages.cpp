#include "tokfeed/proto/messages.hpp"

#include <limits>
#include <optional>

#include "tokfeed/proto/frame.hpp"

namespace tokfeed::proto {

namespace {

using Packer = msgpack::packer<msgpack::sbuffer>;

// A map's header with "v" already in it; `fields` counts the others.
void open_map(Packer& pk, uint32_t fields) {
  pk.pack_map(fields + 1);
  pk.pack("v"), pk.pack(kVersion);
}

std::string take(const msgpack::sbuffer& buf) { return std::string(buf.data(), buf.size()); }

// A non-negative integer field no larger than `max`.
std::string get_count(const msgpack::object& map, std::string_view key, uint64_t max, uint64_t& out) {
  const msgpack::object* o = find(map, key);
  if (!o) return "field '" + std::string(key) + "' is missing";
  if (o->type != msgpack::type::POSITIVE_INTEGER) {
    if (o->type == msgpack::type::NEGATIVE_INTEGER) return "field '" + std::string(key) + "' is negative";
    return "field '" + std::string(key) + "' is not an integer";
  }
  if (o->via.u64 > max) return "field '" + std::string(key) + "' is out of range";
  out = o->via.u64;
  return {};
}

std::string get_u32(const msgpack::object& map, std::string_view key, uint32_t& out) {
  uint64_t v = 0;
  std::string e = get_count(map, key, std::numeric_limits<uint32_t>::max(), v);
  out = static_cast<uint32_t>(v);
  return e;
}

std::string get_u64(const msgpack::object& map, std::string_view key, uint64_t& out) {
  return get_count(map, key, std::numeric_limits<uint64_t>::max(), out);
}

// Runs the field readers in order and returns the first error, prefixed.
template <typename... Reads>
std::string first_error(std::string_view what, Reads&&... reads) {
  std::string e;
  ((e.empty() ? (void)(e = reads()) : (void)0), ...);
  return e.empty() ? e : std::string(what) + ": " + e;
}

constexpr std::pair<Op, std::string_view> kOps[] = {
    {Op::kStatus, "status"}, {Op::kAttach, "attach"}, {Op::kPing, "ping"}, {Op::kShutdown, "shutdown"}};

constexpr std::pair<ErrorCode, std::string_view> kCodes[] = {{ErrorCode::kRefused, "refused"},
                                                             {ErrorCode::kInvalidArgument, "invalid_argument"},
                                                             {ErrorCode::kNotReady, "not_ready"},
                                                             {ErrorCode::kBadRequest, "bad_request"},
                                                             {ErrorCode::kInternal, "internal"}};

}  // namespace

std::string_view split_name(Split s) noexcept { return s == Split::kEval ? "eval" : "train"; }

bool parse_split(std::string_view name, Split& out) noexcept {
  if (name == "train") out = Split::kTrain;
  else if (name == "eval") out = Split::kEval;
  else return false;
  return true;
}

namespace {

// An optional bool field: absent is false.
std::string get_optional_bool(const msgpack::object& map, const char* key, bool& out) {
  if (!find(map, key)) return {};
  std::optional<bool> b = get_bool(map, key);
  if (!b) return std::string("field '") + key + "' must be a bool";
  out = *b;
  return {};
}

// An optional "split" field: absent is train.
std::string get_split(const msgpack::object& map, Split& out) {
  const msgpack::object* o = find(map, "split");
  if (!o) return {};
  std::optional<std::string_view> name = get_str(map, "split");
  if (!name || !parse_split(*name, out)) return "field 'split' must be \"train\" or \"eval\"";
  return {};
}

}  // namespace

std::string_view op_name(Op op) noexcept {
  for (auto [o, name] : kOps)
    if (o == op) return name;
  return "?";
}

std::string_view error_code_name(ErrorCode code) noexcept {
  for (auto [c, name] : kCodes)
    if (c == code) return name;
  return "?";
}

std::string decode_op(const msgpack::object& request, Op& out) {
  std::optional<std::string_view> op = get_str(request, "op");
  if (!op) return "field 'op' (a string) is required: status, attach, ping or shutdown";
  for (auto [o, name] : kOps)
    if (name == *op) {
      out = o;
      return {};
    }
  return "unknown op '" + std::string(*op) + "': expected status, attach, ping or shutdown";
}

std::string encode_request(Op op) {
  msgpack::sbuffer buf;
  Packer pk(buf);
  open_map(pk, 1);
  pk.pack("op"), pk.pack(op_name(op));
  return take(buf);
}

std::string AttachRequest::encode() const {
  msgpack::sbuffer buf;
  Packer pk(buf);
  open_map(pk, counts_later ? 8 : 7);
  pk.pack("op"), pk.pack(op_name(Op::kAttach));
  if (counts_later) pk.pack("counts_later"), pk.pack(true);
  pk.pack("rank"), pk.pack(rank);
  pk.pack("split"), pk.pack(split_name(split));
  pk.pack("epoch"), pk.pack(epoch);
  pk.pack("step"), pk.pack(step);
  pk.pack("world_size"), pk.pack(world_size);
  pk.pack("base"), pk.pack(base);
  return take(buf);
}

std::string AttachRequest::decode(const msgpack::object& request, AttachRequest& out) {
  AttachRequest r;
  std::string e = first_error(
      "attach", [&] { return get_u32(request, "rank", r.rank); }, [&] { return get_u64(request, "epoch", r.epoch); },
      [&] { return get_u64(request, "step", r.step); }, [&] { return get_u64(request, "world_size", r.world_size); },
      [&] { return get_u64(request, "base", r.base); }, [&] { return get_split(request, r.split); },
      [&] { return get_optional_bool(request, "counts_later", r.counts_later); });
  if (e.empty()) out = r;
  return e;
}

std::string AttachReply::encode() const {
  msgpack::sbuffer buf;
  Packer pk(buf);
  open_map(pk, counts_pending ? 13 : 12);
  pk.pack("ok"), pk.pack(true);
  if (counts_pending) pk.pack("counts_pending"), pk.pack(true);
  pk.pack("rank"), pk.pack(rank);
  pk.pack("split"), pk.pack(split_name(split));
  pk.pack("ring_base"), pk.pack(ring_base);
  pk.pack("workers"), pk.pack(workers);
  pk.pack("first_epoch"), pk.pack(first_epoch);
  pk.pack("start_base"), pk.pack(start_base);
  pk.pack("epochs"), pk.pack(epochs);
  pk.pack("world_size"), pk.pack(world_size);
  pk.pack("start_index"), pk.pack(start_index);
  pk.pack("replanned"), pk.pack(replanned);
  pk.pack("epoch_batches"), pk.pack(epoch_batches);
  return take(buf);
}

std::string AttachReply::decode(const msgpack::object& reply, AttachReply& out) {
  AttachReply r;
  std::string e = first_error(
      "attach reply", [&] { return get_u32(reply, "rank", r.rank); },
      [&] { return get_u32(reply, "ring_base", r.ring_base); }, [&] { return get_u32(reply, "workers", r.workers); },
      [&] { return get_u64(reply, "first_epoch", r.first_epoch); },
      [&] { return get_u64(reply, "start_base", r.start_base); }, [&] { return get_u64(reply, "epochs", r.epochs); },
      [&] { return get_u64(reply, "world_size", r.world_size); },
      [&] { return get_u64(reply, "start_index", r.start_index); },
      [&]() -> std::string {
        std::optional<bool> b = get_bool(reply, "replanned");
        if (!b) return "field 'replanned' (a bool) is missing";
        r.replanned = *b;
        return {};
      },
      [&]() -> std::string {
        const msgpack::object* eb = find(reply, "epoch_batches");
        if (!eb || eb->type != msgpack::type::ARRAY) return "field 'epoch_batches' (an array) is missing";
        for (uint32_t k = 0; k < eb->via.array.size; ++k) {
          const msgpack::object& o = eb->via.array.ptr[k];
          if (o.type != msgpack::type::POSITIVE_INTEGER) return "field 'epoch_batches' holds a non-count";
          r.epoch_batches.push_back(o.via.u64);
        }
        return {};
      },
      [&] { return get_split(reply, r.split); },
      [&] { return get_optional_bool(reply, "counts_pending", r.counts_pending); });
  if (!e.empty()) return e;
  if (r.workers == 0) return "attach reply: 'workers' is 0";
  if (r.world_size == 0) return "attach reply: 'world_size' is 0";
  if (r.counts_pending && !r.epoch_batches.empty()) return "attach reply: 'epoch_batches' given while 'counts_pending'";
  if (r.first_epoch > r.epochs || (!r.counts_pending && r.epoch_batches.size() != r.epochs - r.first_epoch))
    return "attach reply: 'epoch_batches' does not cover epochs first_epoch.." + std::to_string(r.epochs);
  out = std::move(r);
  return {};
}

std::string ErrorReply::encode() const {
  msgpack::sbuffer buf;
  Packer pk(buf);
  open_map(pk, code == ErrorCode::kNotReady ? 4 : 3);
  pk.pack("ok"), pk.pack(false);
  pk.pack("code"), pk.pack(error_code_name(code));
  pk.pack("error"), pk.pack(message);
  if (code == ErrorCode::kNotReady) pk.pack("retry_ms"), pk.pack(retry_ms);
  return take(buf);
}

std::string ErrorReply::decode(const msgpack::object& reply, ErrorReply& out) {
  ErrorReply r;
  std::optional<std::string_view> code = get_str(reply, "code");
  std::optional<std::string_view> message = get_str(reply, "error");
  if (!code || !message) return "error reply: fields 'code' and 'error' (strings) are required";
  bool known = false;
  for (auto [c, name] : kCodes)
    if (name == *code) r.code = c, known = true;
  if (!known) return "error reply: unknown code '" + std::string(*code) + "'";
  r.message = std::string(*message);
  if (r.code == ErrorCode::kNotReady) {
    if (std::string e = get_u32(reply, "retry_ms", r.retry_ms); !e.empty()) return "error reply: " + e;
  }
  out = std::move(r);
  return {};
}

std::string encode_ok() {
  msgpack::sbuffer buf;
  Packer pk(buf);
  open_map(pk, 1);
  pk.pack("ok"), pk.pack(true);
  return take(buf);
}

bool reply_ok(const msgpack::object& reply) noexcept { return get_bool(reply, "ok") == true; }

}  // namespace tokfeed::proto

// The control protocol refuses oversized and hostile frames before allocating.
#include <doctest/doctest.h>

#include "tokfeed/proto/frame.hpp"

using namespace tokfeed::proto;

TEST_CASE("a frame round-trips") {
  std::string frame = make_request("attach", {{"rank", 3}});
  FrameReader r;
  r.feed(frame.data(), 2);
  std::string payload, error;
  CHECK(r.next(payload, error) == FrameReader::Next::kNeedMore);
  r.feed(frame.data() + 2, frame.size() - 2);
  REQUIRE(r.next(payload, error) == FrameReader::Next::kFrame);
  msgpack::object_handle h;
  REQUIRE(decode_payload(payload, h) == "");
  CHECK(get_str(h.get(), "op") == "attach");
  CHECK(get_int(h.get(), "rank") == 3);
}

TEST_CASE("an oversized length prefix is refused without reading the body") {
  FrameReader r;
  const char huge[4] = {'\xff', '\xff', '\xff', '\x7f'};
  r.feed(huge, 4);
  std::string payload, error;
  CHECK(r.next(payload, error) == FrameReader::Next::kError);
  CHECK(error.find("exceeds the limit") != std::string::npos);
}

TEST_CASE("5 bytes asking for a 4-billion-element array are refused, not allocated") {
  const std::string hostile("\xdd\xff\xff\xff\xff", 5);  // array32 of 2^32-1 elements
  msgpack::object_handle h;
  CHECK(decode_payload(hostile, h).rfind("malformed msgpack", 0) == 0);
  const std::string deep(100, '\x91');  // 100 nested one-element arrays
  CHECK(decode_payload(deep, h).rfind("malformed msgpack", 0) == 0);
}

TEST_CASE("a payload without the protocol version is refused") {
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(buf);
  pk.pack_map(1);
  pk.pack("op");
  pk.pack("status");
  msgpack::object_handle h;
  CHECK(decode_payload(std::string_view(buf.data(), buf.size()), h).find("protocol version") != std::string::npos);
}

// ----- typed messages (proto/messages.hpp)

#include "tokfeed/proto/messages.hpp"

namespace {

msgpack::object_handle unpack_ok(const std::string& payload) {
  msgpack::object_handle h;
  REQUIRE(decode_payload(payload, h) == "");
  return h;
}

// A payload {"v":1, key: value, ...} packed by hand, as a hostile peer would.
template <typename... KV>
std::string hand_map(KV&&... kv) {
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(buf);
  pk.pack_map(1 + sizeof...(kv) / 2);
  pk.pack("v"), pk.pack(kVersion);
  (pk.pack(kv), ...);
  return std::string(buf.data(), buf.size());
}

}  // namespace

TEST_CASE("an attach request round-trips, and its op decodes") {
  AttachRequest sent{7, 2, 130, 16, 4096};
  auto h = unpack_ok(sent.encode());
  Op op{};
  REQUIRE(decode_op(h.get(), op) == "");
  CHECK(op == Op::kAttach);
  AttachRequest got;
  REQUIRE(AttachRequest::decode(h.get(), got) == "");
  CHECK(got.rank == 7);
  CHECK(got.epoch == 2);
  CHECK(got.step == 130);
  CHECK(got.world_size == 16);
  CHECK(got.base == 4096);
}

TEST_CASE("an attach request carries its split; one without a split (an older client) asks for train") {
  AttachRequest sent{3, 1, 2, 0, 0, Split::kEval};
  AttachRequest got;
  REQUIRE(AttachRequest::decode(unpack_ok(sent.encode()).get(), got) == "");
  CHECK(got.split == Split::kEval);
  CHECK(got.epoch == 1);
  auto old = unpack_ok(hand_map("op", "attach", "rank", 1, "epoch", 0, "step", 0, "world_size", 0, "base", 0));
  got.split = Split::kEval;
  REQUIRE(AttachRequest::decode(old.get(), got) == "");
  CHECK(got.split == Split::kTrain);
  auto bad = unpack_ok(
      hand_map("op", "attach", "rank", 1, "epoch", 0, "step", 0, "world_size", 0, "base", 0, "split", "test"));
  CHECK(AttachRequest::decode(bad.get(), got) == "attach: field 'split' must be \"train\" or \"eval\"");
  auto typed =
      unpack_ok(hand_map("op", "attach", "rank", 1, "epoch", 0, "step", 0, "world_size", 0, "base", 0, "split", 1));
  CHECK(AttachRequest::decode(typed.get(), got) == "attach: field 'split' must be \"train\" or \"eval\"");
}

TEST_CASE("an attach request with a missing, negative, mistyped or oversized field is refused by name") {
  AttachRequest got;
  auto missing = unpack_ok(hand_map("op", "attach", "rank", 1));
  CHECK(AttachRequest::decode(missing.get(), got) == "attach: field 'epoch' is missing");
  auto negative = unpack_ok(hand_map("op", "attach", "rank", -1, "epoch", 0, "step", 0, "world_size", 0, "base", 0));
  CHECK(AttachRequest::decode(negative.get(), got) == "attach: field 'rank' is negative");
  auto text = unpack_ok(hand_map("op", "attach", "rank", "0", "epoch", 0, "step", 0, "world_size", 0, "base", 0));
  CHECK(AttachRequest::decode(text.get(), got) == "attach: field 'rank' is not an integer");
  auto huge =
      unpack_ok(hand_map("op", "attach", "rank", uint64_t{1} << 32, "epoch", 0, "step", 0, "world_size", 0, "base", 0));
  CHECK(AttachRequest::decode(huge.get(), got) == "attach: field 'rank' is out of range");
}

TEST_CASE("an unknown or missing op is named in the error") {
  Op op{};
  auto unknown = unpack_ok(hand_map("op", "reboot"));
  CHECK(decode_op(unknown.get(), op) == "unknown op 'reboot': expected status, attach, ping or shutdown");
  auto none = unpack_ok(hand_map("rank", 1));
  CHECK(decode_op(none.get(), op).find("field 'op'") != std::string::npos);
  for (Op o : {Op::kStatus, Op::kPing, Op::kShutdown}) {
    auto h = unpack_ok(encode_request(o));
    REQUIRE(decode_op(h.get(), op) == "");
    CHECK(op == o);
  }
}

TEST_CASE("an attach reply round-trips and is checked for consistency") {
  AttachReply sent;
  sent.rank = 3;
  sent.ring_base = 6;
  sent.workers = 2;
  sent.first_epoch = 1;
  sent.start_base = 64;
  sent.epochs = 3;
  sent.world_size = 4;
  sent.start_index = 17;
  sent.replanned = true;
  sent.epoch_batches = {40, 41};
  auto h = unpack_ok(sent.encode());
  CHECK(reply_ok(h.get()));
  AttachReply got;
  REQUIRE(AttachReply::decode(h.get(), got) == "");
  CHECK(got.rank == 3);
  CHECK(got.ring_base == 6);
  CHECK(got.workers == 2);
  CHECK(got.first_epoch == 1);
  CHECK(got.start_base == 64);
  CHECK(got.epochs == 3);
  CHECK(got.world_size == 4);
  CHECK(got.start_index == 17);
  CHECK(got.replanned);
  CHECK(got.epoch_batches == std::vector<uint64_t>{40, 41});
  CHECK(got.split == Split::kTrain);
  sent.split = Split::kEval;
  REQUIRE(AttachReply::decode(unpack_ok(sent.encode()).get(), got) == "");
  CHECK(got.split == Split::kEval);
  sent.split = Split::kTrain;

  sent.epoch_batches = {40};  // epochs 1..3 need two counts
  auto short_plan = unpack_ok(sent.encode());
  CHECK(AttachReply::decode(short_plan.get(), got).find("'epoch_batches' does not cover") != std::string::npos);
  sent.epoch_batches = {40, 41};
  sent.workers = 0;
  auto no_workers = unpack_ok(sent.encode());
  CHECK(AttachReply::decode(no_workers.get(), got) == "attach reply: 'workers' is 0");
}

TEST_CASE("an error reply carries its code, message and, when not ready, when to retry") {
  ErrorReply sent{ErrorCode::kNotReady, "attach: not ready: indexing 40%", 200};
  auto h = unpack_ok(sent.encode());
  CHECK_FALSE(reply_ok(h.get()));
  ErrorReply got;
  REQUIRE(ErrorReply::decode(h.get(), got) == "");
  CHECK(got.code == ErrorCode::kNotReady);
  CHECK(got.message == "attach: not ready: indexing 40%");
  CHECK(got.retry_ms == 200);

  for (ErrorCode c : {ErrorCode::kRefused, ErrorCode::kInvalidArgument, ErrorCode::kBadRequest, ErrorCode::kInternal}) {
    auto e = unpack_ok(ErrorReply{c, "why"}.encode());
    REQUIRE(ErrorReply::decode(e.get(), got) == "");
    CHECK(got.code == c);
    CHECK(error_code_name(got.code) == get_str(e.get(), "code"));
  }
  auto odd = unpack_ok(hand_map("ok", false, "code", "teapot", "error", "x"));
  CHECK(ErrorReply::decode(odd.get(), got) == "error reply: unknown code 'teapot'");
  auto ok = unpack_ok(encode_ok());
  CHECK(reply_ok(ok.get()));
}

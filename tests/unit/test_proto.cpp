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

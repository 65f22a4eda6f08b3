// Fuzz target: the control protocol's decoder, as the daemon runs it on
// every connection: split a byte stream into frames, unpack each payload
// under the bounded msgpack limits, and read the request's fields the way
// the dispatcher does.
#include <cstdint>
#include <string>

#include "tokfeed/proto/frame.hpp"

using namespace tokfeed::proto;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FrameReader reader;
  // Feed in two pieces, as a stream would arrive.
  size_t half = size / 2;
  reader.feed(reinterpret_cast<const char*>(data), half);
  std::string payload, error;
  for (int round = 0; round < 2; ++round) {
    for (;;) {
      FrameReader::Next n = reader.next(payload, error);
      if (n != FrameReader::Next::kFrame) break;
      msgpack::object_handle h;
      if (!decode_payload(payload, h).empty()) continue;
      const msgpack::object& req = h.get();
      (void)get_str(req, "op");
      (void)get_int(req, "rank");
      (void)get_bool(req, "ok");
      (void)to_json(req);
    }
    if (round == 0) reader.feed(reinterpret_cast<const char*>(data) + half, size - half);
  }
  return 0;
}

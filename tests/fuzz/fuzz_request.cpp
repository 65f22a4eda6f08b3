// Fuzz target: the control plane end to end inside one process. A byte
// stream is split into frames, each payload is unpacked under the bounded
// msgpack limits, and every request that decodes is dispatched to a real
// Supervisor (real config, tokenizer and segments; no workers forked),
// exactly as a connection does: status, attach, ping, unknown ops, wrong
// field types. run() is never called, so the datasets are not indexed and
// the daemon answers as it does while indexing (attach says "not ready").
// After each input the attachment is dropped as a closing connection would
// drop it.
//
// "shutdown" is decoded but not dispatched: it would end the daemon, and
// its path is covered by the lifecycle tests.
#include <spdlog/spdlog.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <memory>
#include <string>

#include "config/config.hpp"
#include "supervisor/supervisor.hpp"
#include "tokfeed/proto/frame.hpp"

using namespace tokfeed;

namespace {

Supervisor& supervisor() {
  static std::unique_ptr<Supervisor> sup = [] {
    spdlog::set_level(spdlog::level::off);
    char tmpl[] = "/tmp/tokfeed-fuzz.XXXXXX";
    std::string dir = mkdtemp(tmpl);
    std::string cfg = dir + "/job.toml";
    std::string tag = std::to_string(getpid());
    std::ofstream(cfg) << "[dataset]\npath = \"" TOKFEED_TEST_DATA "/sft/mixed-300.jsonl\"\n"
                       << "[tokenizer]\ntype = \"sentencepiece\"\npath = \"" TOKFEED_TEST_DATA
                          "/tokenizers/sp32k/tokenizer.model\"\n"
                       << "[workers]\ncount = 2\n[ranks]\nworld_size = 2\n"
                       << "[server]\nsocket = \"" << dir << "/fuzz.sock\"\nshm_prefix = \"fuzz-" << tag << "\"\n";
    auto made = std::make_unique<Supervisor>(load_config(cfg));
    ::unlink(cfg.c_str());  // loaded; the socket is never bound
    ::rmdir(dir.c_str());
    return made;
  }();
  return *sup;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Supervisor& sup = supervisor();
  proto::FrameReader reader;
  size_t half = size / 2;  // arrives in two pieces, as from a stream
  reader.feed(reinterpret_cast<const char*>(data), half);
  Peer peer{1, getpid(), getuid(), getgid()};
  std::string payload, error;
  for (int round = 0; round < 2; ++round) {
    while (reader.next(payload, error) == proto::FrameReader::Next::kFrame) {
      msgpack::object_handle h;
      if (!proto::decode_payload(payload, h).empty()) continue;
      const msgpack::object& req = h.get();
      if (proto::get_str(req, "op") == "shutdown") continue;
      Reply r = sup.handle(peer, req);
      for (int fd : r.fds) ::close(fd);
      msgpack::object_handle reply;
      if (std::string e = proto::decode_payload(r.payload, reply); !e.empty()) abort();  // replies always decode
      (void)proto::to_json(reply.get());
    }
    if (round == 0) reader.feed(reinterpret_cast<const char*>(data) + half, size - half);
  }
  sup.closed(peer);
  return 0;
}

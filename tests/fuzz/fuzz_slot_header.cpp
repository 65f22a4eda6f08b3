// Fuzz target: validate_slot_header over arbitrary bytes.
//
// Input: the first sizeof(SlotHeader) bytes are the header (zero-padded when
// the input is shorter), the rest is the slot's payload, so the slot is
// exactly sizeof(SlotHeader) + (size - sizeof(SlotHeader)) bytes and lives in
// its own heap block: AddressSanitizer flags any byte read outside it.
// The expected seq and session are the header's own (so the fuzzer gets past
// those checks), except when bit 0 of reserved[0] asks for a mismatch.
//
// When validation passes, every byte of every tensor is read and the header
// checksum is computed, proving the bounds the validator promises.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "tokfeed/shm/slot.hpp"

using namespace tokfeed::shm;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  SlotHeader h;
  std::memset(&h, 0, sizeof h);
  std::memcpy(&h, data, size < sizeof h ? size : sizeof h);
  const uint64_t slot_bytes = sizeof h + (size > sizeof h ? size - sizeof h : 0);
  std::unique_ptr<char[]> slot(new char[slot_bytes]);
  std::memcpy(slot.get(), &h, sizeof h);
  if (size > sizeof h) std::memcpy(slot.get() + sizeof h, data + sizeof h, size - sizeof h);

  const bool mismatch = h.reserved[0] & 1;
  const uint64_t seq = h.seq + (mismatch && (h.reserved[0] & 2) ? 1 : 0);
  const uint64_t session = h.session + (mismatch && !(h.reserved[0] & 2) ? 1 : 0);
  SlotFault f = validate_slot_header(h, slot_bytes, seq, session);
  if (mismatch && f == SlotFault::kNone) std::abort();  // a wrong seq or session must be refused
  if (f != SlotFault::kNone) return 0;

  // What a passing header promises (docs/ring_format.md, "Validation").
  if (h.tensor_count > kMaxTensors || h.payload_bytes > slot_bytes - sizeof h) std::abort();
  volatile uint8_t sink = 0;
  for (uint32_t i = 0; i < h.tensor_count; ++i) {
    const TensorDesc& t = h.tensors[i];
    if (t.offset < sizeof h || t.offset % 8 != 0 || t.offset + t.nbytes > slot_bytes ||
        t.offset + t.nbytes > sizeof h + h.payload_bytes || std::memchr(t.name, 0, kTensorNameBytes) == nullptr)
      std::abort();
    uint64_t elems = 1;
    for (uint32_t d = 0; d < t.ndim; ++d) elems *= static_cast<uint64_t>(t.shape[d]);
    if (elems * dtype_bytes(t.dtype) != t.nbytes) std::abort();
    const auto* p = reinterpret_cast<const uint8_t*>(slot.get() + t.offset);
    uint8_t acc = 0;
    for (uint64_t b = 0; b < t.nbytes; ++b) acc ^= p[b];
    sink = sink ^ acc;
  }
  (void)slot_checksum(slot.get(), h);  // reads payload_bytes after the header
  (void)sink;
  return 0;
}

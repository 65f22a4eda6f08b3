#include "tokfeed/shm/slot.hpp"

#include <xxhash.h>

#include <algorithm>
#include <cstring>

namespace tokfeed::shm {

std::string_view slot_fault_name(SlotFault f) noexcept {
  switch (f) {
    case SlotFault::kNone: return "ok";
    case SlotFault::kBadMagic: return "bad slot magic";
    case SlotFault::kBadHeaderSize: return "bad slot header size";
    case SlotFault::kWrongSeq: return "slot holds another sequence number";
    case SlotFault::kWrongSession: return "slot belongs to another session";
    case SlotFault::kBadTensorCount: return "bad tensor count";
    case SlotFault::kBadTensorName: return "tensor name not NUL-terminated";
    case SlotFault::kBadDtype: return "unknown tensor dtype";
    case SlotFault::kBadShape: return "bad tensor shape";
    case SlotFault::kBadSize: return "tensor byte size does not match its shape";
    case SlotFault::kOutOfBounds: return "tensor lies outside its slot";
    case SlotFault::kMisaligned: return "tensor data misaligned";
    case SlotFault::kBadChecksum: return "slot checksum mismatch";
  }
  return "unknown fault";
}

SlotFault validate_slot_header(const SlotHeader& h, uint64_t slot_bytes, uint64_t expected_seq,
                               uint64_t expected_session) noexcept {
  if (h.magic != kSlotMagic) return SlotFault::kBadMagic;
  if (h.header_bytes != sizeof(SlotHeader) || slot_bytes < sizeof(SlotHeader)) return SlotFault::kBadHeaderSize;
  if (h.seq != expected_seq) return SlotFault::kWrongSeq;
  if (h.session != expected_session) return SlotFault::kWrongSession;
  if (h.tensor_count > kMaxTensors) return SlotFault::kBadTensorCount;
  if (h.payload_bytes > slot_bytes - sizeof(SlotHeader)) return SlotFault::kOutOfBounds;
  for (uint32_t i = 0; i < h.tensor_count; ++i) {
    const TensorDesc& t = h.tensors[i];
    if (memchr(t.name, '\0', kTensorNameBytes) == nullptr || t.name[0] == '\0') return SlotFault::kBadTensorName;
    if (t.dtype != Dtype::kInt32 && t.dtype != Dtype::kInt64) return SlotFault::kBadDtype;
    if (t.ndim > 2) return SlotFault::kBadShape;
    uint64_t elems = 1;
    for (uint32_t d = 0; d < t.ndim; ++d) {
      if (t.shape[d] < 0 || t.shape[d] > int64_t{1} << 40) return SlotFault::kBadShape;
      if (__builtin_mul_overflow(elems, static_cast<uint64_t>(t.shape[d]), &elems)) return SlotFault::kBadShape;
    }
    uint64_t bytes = 0;
    if (__builtin_mul_overflow(elems, uint64_t{dtype_bytes(t.dtype)}, &bytes) || bytes != t.nbytes)
      return SlotFault::kBadSize;
    uint64_t end = 0;
    if (t.offset < sizeof(SlotHeader) || __builtin_add_overflow(t.offset, t.nbytes, &end) || end > slot_bytes ||
        end > sizeof(SlotHeader) + h.payload_bytes)
      return SlotFault::kOutOfBounds;
    if (t.offset % 8 != 0) return SlotFault::kMisaligned;
  }
  return SlotFault::kNone;
}

uint64_t slot_checksum(const char* slot, const SlotHeader& h) noexcept {
  return XXH3_64bits(slot + sizeof(SlotHeader), h.payload_bytes);
}

void* SlotWriter::add(std::string_view name, Dtype dtype, uint32_t ndim, int64_t d0, int64_t d1) noexcept {
  if (header_.tensor_count >= kMaxTensors || name.size() >= kTensorNameBytes || ndim > 2) return nullptr;
  // A negative or huge shape must not wrap into a size that passes the bounds
  // check below (the memset after it would then write past the slot).
  if ((ndim >= 1 && d0 < 0) || (ndim >= 2 && d1 < 0)) return nullptr;
  uint64_t elems = ndim == 0 ? 1 : uint64_t(d0);
  uint64_t bytes = 0, end = 0;
  if ((ndim == 2 && __builtin_mul_overflow(elems, uint64_t(d1), &elems)) ||
      __builtin_mul_overflow(elems, uint64_t{dtype_bytes(dtype)}, &bytes) ||
      __builtin_add_overflow(cursor_, bytes, &end) || end > slot_bytes_)
    return nullptr;
  TensorDesc& t = header_.tensors[header_.tensor_count++];
  std::memset(&t, 0, sizeof t);
  std::memcpy(t.name, name.data(), name.size());
  t.dtype = dtype;
  t.ndim = ndim;
  t.shape[0] = ndim >= 1 ? d0 : 0;
  t.shape[1] = ndim >= 2 ? d1 : 0;
  t.offset = cursor_;
  t.nbytes = bytes;
  uint64_t next = std::min(align_up(cursor_ + bytes, kCacheLine), slot_bytes_);
  // Zero the alignment gap, so the checksum covers only bytes this batch wrote.
  std::memset(slot_ + cursor_ + bytes, 0, next - (cursor_ + bytes));
  cursor_ = next;
  return slot_ + t.offset;
}

void SlotWriter::finish(uint64_t seq, uint64_t session, uint64_t stream_index, uint32_t epoch, uint32_t step,
                        uint32_t rows, uint32_t seq_len, uint64_t real_tokens) noexcept {
  header_.magic = kSlotMagic;
  header_.header_bytes = sizeof(SlotHeader);
  header_.seq = seq;
  header_.session = session;
  header_.stream_index = stream_index;
  header_.epoch = epoch;
  header_.step = step;
  header_.rows = rows;
  header_.seq_len = seq_len;
  header_.real_tokens = real_tokens;
  uint64_t end = sizeof(SlotHeader);
  for (uint32_t i = 0; i < header_.tensor_count; ++i)
    end = std::max(end, header_.tensors[i].offset + header_.tensors[i].nbytes);
  header_.payload_bytes = end - sizeof(SlotHeader);
  header_.checksum = XXH3_64bits(slot_ + sizeof(SlotHeader), header_.payload_bytes);
  std::memcpy(slot_, &header_, sizeof header_);
}

uint64_t slot_bytes_for(uint32_t tensors_2d, uint64_t rows, uint64_t seq_len, Dtype dtype, uint32_t tensors_1d,
                        uint64_t extra_elems) noexcept {
  uint64_t bytes = align_up(sizeof(SlotHeader), kCacheLine);
  bytes += tensors_2d * align_up(rows * seq_len * dtype_bytes(dtype), kCacheLine);
  bytes += tensors_1d * align_up(extra_elems * 8, kCacheLine);
  return align_up(bytes, kCacheLine);
}

}  // namespace tokfeed::shm

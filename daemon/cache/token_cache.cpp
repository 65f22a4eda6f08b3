#include "cache/token_cache.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "chat/chat_jinja.hpp"
#include "common/hash128.hpp"

namespace tokfeed {

namespace {

constexpr char kMagic[8] = {'T', 'O', 'K', 'F', 'I', 'D', 'X', '1'};
constexpr uint32_t kFormatVersion = 2;

// The .idx header; offsets and flags follow it.
struct IdxHeader {
  char magic[8];
  uint32_t version;
  uint32_t reserved0;
  uint64_t records;
  uint64_t tokens;
  uint64_t key_hi, key_lo;
  uint8_t reserved1[16];
};
static_assert(sizeof(IdxHeader) == 64);

uint64_t idx_bytes_for(uint64_t records) { return sizeof(IdxHeader) + (records + 1) * 8 + records; }

// A file's name and bytes, into the cache key.
void hash_file(Hash128& h, const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    throw std::runtime_error(fmt::format("{}: cannot read for the cache key: {}", path, std::strerror(errno)));
  h.field(path.substr(path.find_last_of('/') + 1));
  char buf[1 << 16];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) h.add(buf, static_cast<std::size_t>(n));
  ::close(fd);
}

void write_all(int fd, const void* p, std::size_t n, const std::string& path) {
  const char* c = static_cast<const char*>(p);
  while (n) {
    ssize_t w = ::write(fd, c, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) throw std::runtime_error(fmt::format("{}: write failed: {}", path, std::strerror(errno)));
    c += w;
    n -= static_cast<std::size_t>(w);
  }
}

}  // namespace

std::string CacheKey::hex() const { return fmt::format("{:016x}{:016x}", hi, lo); }

CacheKey cache_key(const JobConfig& cfg, const Dataset& data) {
  Hash128 h;
  h.field(fmt::format("tokfeed token cache v{}", kFormatVersion));
  // Tokens depend on the valid records' bytes and order. A shard is known by
  // what its saved index is known by (its path, size, mtime, inode and first
  // and last 64 KiB, or a spool's content hash): a shard that would be
  // indexed again gets another store, and no start reads every record to
  // name one.
  uint64_t n = data.size();
  h.add(&n, sizeof n);
  for (const auto& [valid, name] : data.identities()) {
    h.add(&valid, sizeof valid);
    h.field(name);
  }
  h.field(cfg.tokenizer.type);
  hash_file(h, cfg.tokenizer.path);
  if (cfg.tokenizer.type == "hf") {
    for (const char* name : {"tokenizer_config.json", "special_tokens_map.json"}) {
      std::string side = std::filesystem::path(cfg.tokenizer.path).parent_path() / name;
      if (::access(side.c_str(), R_OK) == 0) hash_file(h, side), h.field(name);
    }
  }
  h.field(text::template_name(cfg.tokenizer.tmpl));
  h.field("labels: one rule (generation blocks, else the prefix rule)");
  h.field("plain text: post_processor specials, eos appended, trained past the prompt's common prefix");
  h.field(cfg.tokenizer.chat ? "jinja\n" + cfg.tokenizer.chat->key
                             : "built-in\n" + text::builtin_template_source(cfg.tokenizer.tmpl));
  h.field(cfg.tokenizer.default_system ? "1" + *cfg.tokenizer.default_system : "0");
  h.field(std::string(text::loss_name(cfg.batch.loss)));
  h.field(std::to_string(cfg.batch.max_length));
  h.field(truncation_name(cfg.batch.truncation));
  for (std::size_t i = 0; i < cfg.datasets.size(); ++i) {
    const DatasetConfig& d = cfg.datasets[i];
    h.field(std::to_string(data.datasets()[i].valid));  // which records these rules read
    h.field(text::format_name(d.format));
    for (const auto& [k, v] : d.placeholders) h.field(k), h.field(v);
    h.field("columns");
    for (const auto& [k, v] : d.columns) h.field(k), h.field(v);
  }
  XXH128_hash_t d = h.digest();
  return {d.high64, d.low64};
}

std::string store_path(const std::string& dir, const CacheKey& key, std::string_view ext) {
  return fmt::format("{}/{}.{}", dir, key.hex(), ext);
}

void append_sample(const text::EncodedSample& s, std::vector<uint32_t>& out) {
  for (std::size_t k = 0; k < s.ids.size(); ++k)
    out.push_back(static_cast<uint32_t>(s.ids[k]) | (s.labels[k] == text::kIgnoreIndex ? 0u : kTrainedBit));
}

uint8_t sample_flags(const text::EncodedSample& s) {
  return static_cast<uint8_t>((s.truncated ? cache_flags::kTruncated : 0) | (s.dropped ? cache_flags::kDropped : 0) |
                              (s.all_masked ? cache_flags::kAllMasked : 0));
}

void TokenStore::get(uint64_t i, text::EncodedSample& out) const { decode_sample(data(i), length(i), flags(i), out); }

void decode_sample(const uint32_t* t, uint32_t n, uint8_t f, text::EncodedSample& out) {
  out.ids.resize(n);
  out.labels.resize(n);
  for (uint32_t k = 0; k < n; ++k) {
    int32_t id = static_cast<int32_t>(t[k] & ~kTrainedBit);
    out.ids[k] = id;
    out.labels[k] = (t[k] & kTrainedBit) ? id : text::kIgnoreIndex;
  }
  out.truncated = f & cache_flags::kTruncated;
  out.dropped = f & (cache_flags::kDropped | cache_flags::kBad);
  out.all_masked = f & cache_flags::kAllMasked;
}

std::unique_ptr<TokenStore> TokenStore::open(const std::string& dir, const CacheKey& key, uint64_t records,
                                             std::string& why) {
  std::unique_ptr<TokenStore> s(new TokenStore);
  s->idx_path_ = store_path(dir, key, "idx");
  std::string bin_path = store_path(dir, key, "bin");
  auto map_file = [&](const std::string& path, void*& map, uint64_t& bytes) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      why = errno == ENOENT ? "none yet" : fmt::format("{}: {}", path, std::strerror(errno));
      return false;
    }
    struct stat st;
    fstat(fd, &st);
    bytes = static_cast<uint64_t>(st.st_size);
    map = bytes ? mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0) : nullptr;
    ::close(fd);
    if (map == MAP_FAILED) {
      map = nullptr;
      why = fmt::format("{}: cannot map: {}", path, std::strerror(errno));
      return false;
    }
    return true;
  };
  if (!map_file(s->idx_path_, s->idx_map_, s->idx_bytes_)) return nullptr;
  const auto* h = static_cast<const IdxHeader*>(s->idx_map_);
  if (s->idx_bytes_ < sizeof(IdxHeader) || std::memcmp(h->magic, kMagic, 8) != 0 || h->version != kFormatVersion ||
      h->key_hi != key.hi || h->key_lo != key.lo || h->records != records || s->idx_bytes_ != idx_bytes_for(records)) {
    why = fmt::format("{} does not match this job (another format, key or record count)", s->idx_path_);
    return nullptr;
  }
  s->records_ = h->records;
  s->tokens_ = h->tokens;
  s->offsets_ = reinterpret_cast<const uint64_t*>(static_cast<const char*>(s->idx_map_) + sizeof(IdxHeader));
  s->flags_ = reinterpret_cast<const uint8_t*>(s->offsets_ + records + 1);
  if (s->offsets_[records] != s->tokens_) {
    why = fmt::format("{}: offsets do not add up to its token count", s->idx_path_);
    return nullptr;
  }
  if (!map_file(bin_path, s->bin_map_, s->bin_bytes_)) return nullptr;
  if (s->bin_bytes_ != s->tokens_ * 4) {
    why = fmt::format("{} holds {} bytes, its index says {}", bin_path, s->bin_bytes_, s->tokens_ * 4);
    return nullptr;
  }
  s->bin_ = static_cast<const uint32_t*>(s->bin_map_);
  madvise(s->bin_map_, s->bin_bytes_, MADV_RANDOM);
  return s;
}

TokenStore::~TokenStore() {
  if (idx_map_) munmap(idx_map_, idx_bytes_);
  if (bin_map_) munmap(bin_map_, bin_bytes_);
}

void TokenStore::publish(const std::string& dir, const CacheKey& key, const uint32_t* lengths, const uint8_t* flags,
                         uint64_t records, const std::string& bin_tmp) {
  std::string idx_tmp = fmt::format("{}.tmp.{}", store_path(dir, key, "idx"), getpid());
  int fd = ::open(idx_tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error(fmt::format("{}: cannot create: {}", idx_tmp, std::strerror(errno)));
  std::vector<uint64_t> offsets(records + 1);
  for (uint64_t i = 0; i < records; ++i) offsets[i + 1] = offsets[i] + lengths[i];
  IdxHeader h{};
  std::memcpy(h.magic, kMagic, 8);
  h.version = kFormatVersion;
  h.records = records;
  h.tokens = offsets[records];
  h.key_hi = key.hi;
  h.key_lo = key.lo;
  write_all(fd, &h, sizeof h, idx_tmp);
  write_all(fd, offsets.data(), offsets.size() * 8, idx_tmp);
  write_all(fd, flags, records, idx_tmp);
  ::fdatasync(fd);
  ::close(fd);
  int bfd = ::open(bin_tmp.c_str(), O_RDONLY | O_CLOEXEC);
  if (bfd >= 0) ::fdatasync(bfd), ::close(bfd);
  // The .bin first: a store is complete once its .idx is in place.
  if (::rename(bin_tmp.c_str(), store_path(dir, key, "bin").c_str()) != 0 ||
      ::rename(idx_tmp.c_str(), store_path(dir, key, "idx").c_str()) != 0)
    throw std::runtime_error(
        fmt::format("{}: cannot rename the token cache into place: {}", dir, std::strerror(errno)));
}

}  // namespace tokfeed

// Order, packing and sharding (docs/data_model.md section 4).
#include <doctest/doctest.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <random>

#include "pipeline/schedule.hpp"
#include "cache/token_cache.hpp"

using tokfeed::BatchRows;
using tokfeed::JobConfig;
using tokfeed::Padding;
using tokfeed::Schedule;

// One dataset taken whole: n records, n samples per epoch.
static tokfeed::Mixture whole(uint64_t n) { return tokfeed::Mixture({{0, n, n}}); }
using tokfeed::StreamStart;
using tokfeed::TokenStore;

namespace {

JobConfig job(uint32_t world, uint32_t size, bool shuffle = false, bool drop_last = false, uint32_t epochs = 1) {
  JobConfig c;
  c.ranks.world_size = world;
  c.batch.size = size;
  c.schedule.shuffle = shuffle;
  c.schedule.drop_last = drop_last;
  c.schedule.epochs = epochs;
  return c;
}

std::vector<uint64_t> samples(Schedule& s, uint64_t i) {
  BatchRows b;
  s.batch_rows(i, b);
  return b.samples;
}

// A real token store with the given lengths (tokens all 0), in a temp dir.
struct Store {
  std::string dir;
  std::unique_ptr<TokenStore> store;
  explicit Store(const std::vector<uint32_t>& lengths, const std::vector<uint8_t>& flags = {}) {
    char tmpl[] = "/tmp/tokfeed-store-XXXXXX";
    dir = mkdtemp(tmpl);
    std::vector<uint8_t> f = flags.empty() ? std::vector<uint8_t>(lengths.size(), 0) : flags;
    uint64_t tokens = 0;
    for (uint32_t l : lengths) tokens += l;
    std::string bin = dir + "/bin.tmp";
    int fd = ::open(bin.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    REQUIRE(ftruncate(fd, static_cast<off_t>(tokens * 4)) == 0);
    ::close(fd);
    tokfeed::CacheKey key{1, 2};
    TokenStore::publish(dir, key, lengths.data(), f.data(), lengths.size(), bin);
    std::string why;
    store = TokenStore::open(dir, key, lengths.size(), why);
    REQUIRE_MESSAGE(store, why);
  }
  ~Store() { std::filesystem::remove_all(dir); }
};

std::vector<uint32_t> random_lengths(std::size_t n, uint32_t max, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint32_t> out(n);
  for (auto& l : out) l = 1 + rng() % max;
  return out;
}

}  // namespace

TEST_CASE("splitmix64 matches its published reference values") {
  uint64_t s = 1234567;
  CHECK(tokfeed::splitmix64(s) == 6457827717110365317ULL);
  CHECK(tokfeed::splitmix64(s) == 3203168211198807973ULL);
}

TEST_CASE("without shuffle, one rank reads records in file order") {
  JobConfig c = job(1, 4);
  Schedule s(c, whole(10), 0, {}, nullptr);
  CHECK(s.epoch_batches() == std::vector<uint64_t>{3});
  CHECK(samples(s, 0) == std::vector<uint64_t>{0, 1, 2, 3});
  CHECK(samples(s, 2) == std::vector<uint64_t>{8, 9});  // the short last batch is kept
}

TEST_CASE("DistributedSampler semantics: padding by wrap-around, or drop_last") {
  // 10 samples over 4 ranks: 12 positions, the last two repeat samples 0 and 1.
  JobConfig c = job(4, 8);
  std::map<uint64_t, int> seen;
  for (uint32_t r = 0; r < 4; ++r) {
    Schedule s(c, whole(10), r, {}, nullptr);
    std::vector<uint64_t> b = samples(s, 0);
    CHECK(b.size() == 3);
    for (auto x : b) ++seen[x];
    CHECK(b[0] == r);
  }
  CHECK(seen[0] == 2);
  CHECK(seen[1] == 2);
  CHECK(seen[9] == 1);
  JobConfig d = job(4, 2, false, true);
  Schedule s(d, whole(10), 3, {}, nullptr);
  CHECK(s.epoch_batches() == std::vector<uint64_t>{1});
  CHECK(samples(s, 0) == std::vector<uint64_t>{3, 7});
}

TEST_CASE("a shuffled epoch is a permutation, different per epoch and fixed per seed") {
  JobConfig c = job(1, 100, true, false, 2);
  Schedule s(c, whole(100), 0, {}, nullptr), t(c, whole(100), 0, {}, nullptr);
  std::vector<uint64_t> e0 = samples(s, 0), e1 = samples(s, 1), again = samples(t, 0);
  CHECK(e0 == again);
  CHECK(e0 != e1);
  std::sort(e1.begin(), e1.end());
  for (uint64_t i = 0; i < 100; ++i) CHECK(e1[i] == i);
}

TEST_CASE("best-fit decreasing packs a window as the spec works it out") {
  // Capacity 10. By length: s4 (7), s0 (6), s1 (4), s2 (3), s3 (3), s5 (2).
  // s4 opens row 0 (free 3); s0 opens row 1 (free 4); s1 fits row 1 exactly;
  // s2 fills row 0; s3 opens row 2 (free 7); s5 goes to row 2.
  std::vector<uint32_t> len = {6, 4, 3, 3, 7, 2};
  tokfeed::EpochRows rows;
  tokfeed::pack_rows(
      {0, 1, 2, 3, 4, 5}, [&](uint32_t s) { return len[s]; }, 10, 1000, rows);
  CHECK(rows.samples == std::vector<uint32_t>{4, 2, 0, 1, 3, 5});
  CHECK(rows.row_start == std::vector<uint32_t>{0, 2, 4, 6});
  // Windows pack on their own: with a window of 3, {s0, s1, s2} then {s3, s4, s5}.
  tokfeed::pack_rows(
      {0, 1, 2, 3, 4, 5}, [&](uint32_t s) { return len[s]; }, 10, 3, rows);
  CHECK(rows.samples == std::vector<uint32_t>{0, 1, 2, 4, 3, 5});
  CHECK(rows.row_start == std::vector<uint32_t>{0, 2, 3, 5, 6});
}

TEST_CASE("packed: every sample once per epoch, equal steps on every rank, no empty batch") {
  for (auto [n, world, size] : {std::tuple{500u, 3u, 2u}, {37u, 4u, 1u}, {5u, 8u, 2u}, {1000u, 2u, 4u}}) {
    CAPTURE(n);
    CAPTURE(world);
    std::vector<uint32_t> len = random_lengths(n, 700, n);
    std::vector<uint8_t> flags(n, 0);
    flags[1] = tokfeed::cache_flags::kDropped;  // left out of every row
    Store st(len, flags);
    JobConfig c = job(world, size, true, false, 2);
    c.batch.padding = Padding::kPacked;
    c.batch.max_length = 1024;
    c.batch.pack_window = 64;
    for (uint64_t epoch = 0; epoch < 2; ++epoch) {
      std::map<uint64_t, int> seen;
      uint64_t steps = 0;
      for (uint32_t r = 0; r < world; ++r) {
        Schedule s(c, whole(n), r, {}, st.store.get());
        if (r == 0) steps = s.epoch_batches()[epoch];
        CHECK(s.epoch_batches()[epoch] == steps);
        uint64_t first = s.index_of(epoch, 0);
        for (uint64_t k = 0; k < steps; ++k) {
          BatchRows b;
          s.batch_rows(first + k, b);
          CHECK(b.rows() <= size);
          CHECK(b.rows() >= 1);  // no rank gets an empty batch
          for (uint32_t row = 0; row < b.rows(); ++row) {
            uint32_t used = 0;
            for (uint32_t x = b.row_start[row]; x < b.row_start[row + 1]; ++x) used += len[b.samples[x]];
            CHECK(used <= 1024);
          }
          for (uint64_t x : b.samples) ++seen[x];
        }
      }
      CHECK(seen.size() == static_cast<std::size_t>(n - 1));
      CHECK(seen.count(1) == 0);
      // Once each, but for the one-sample rows a last step with fewer
      // samples than ranks repeats (fewer than `world` of them).
      uint64_t delivered = 0;
      for (auto [x, count] : seen) {
        CHECK(count >= 1);
        CHECK(count <= 2);
        delivered += count;
      }
      CHECK(delivered - (n - 1) < world);
    }
  }
}

TEST_CASE("elastic resume: 4 ranks to 2 delivers every remaining row once") {
  const uint32_t n = 400;
  std::vector<uint32_t> len = random_lengths(n, 600, 7);
  Store st(len);
  for (Padding mode : {Padding::kPacked, Padding::kPaddingFree}) {
    JobConfig c4 = job(4, 2, true, false, 1);
    c4.batch.padding = mode;
    c4.batch.max_length = 1024;
    c4.batch.tokens = 2048;
    c4.batch.pack_window = 100;
    JobConfig c2 = c4;
    c2.ranks.world_size = 2;
    Schedule probe(c4, whole(n), 0, {}, st.store.get());
    const uint64_t B = probe.epoch_batches()[0];
    for (uint64_t step : {uint64_t{0}, uint64_t{1}, B / 2, B - 1, B}) {
      CAPTURE(step);
      std::map<uint64_t, int> seen;
      for (uint32_t r = 0; r < 4; ++r) {
        Schedule s(c4, whole(n), r, {}, st.store.get());
        for (uint64_t k = 0; k < step; ++k)
          for (uint64_t x : samples(s, k)) ++seen[x];
      }
      StreamStart start{0, step * 4 * c4.batch.rows()};
      for (uint32_t r = 0; r < 2; ++r) {
        Schedule s(c2, whole(n), r, start, st.store.get());
        for (uint64_t k = 0; k < s.epoch_batches()[0]; ++k)
          for (uint64_t x : samples(s, k)) ++seen[x];
      }
      CHECK(seen.size() == n);
      for (auto [x, count] : seen) CHECK(count == 1);
    }
  }
}

TEST_CASE("a stream started mid-epoch locates its batches and the epochs after it") {
  JobConfig c = job(2, 3, true, false, 3);
  Schedule full(c, whole(30), 1, {}, nullptr);
  CHECK(full.epoch_batches() == std::vector<uint64_t>{5, 5, 5});
  // Same world size, same base: the same batches at the same positions.
  Schedule later(c, whole(30), 1, {1, 0}, nullptr);
  CHECK(later.epoch_batches() == std::vector<uint64_t>{5, 5});
  CHECK(samples(later, later.index_of(2, 3)) == samples(full, full.index_of(2, 3)));
  uint64_t e, k;
  later.locate(7, e, k);
  CHECK(e == 2);
  CHECK(k == 2);
  CHECK(later.index_of(3, 0) == later.total_batches());
  // A segment from row 24 of epoch 1: 6 rows over 2 ranks.
  Schedule seg(c, whole(30), 0, {1, 24}, nullptr);
  CHECK(seg.epoch_batches() == std::vector<uint64_t>{1, 5});
}

// ------------------------------------------------------------ mixing (1.1)

namespace {

tokfeed::DatasetConfig entry(std::optional<uint64_t> samples, std::optional<double> weight) {
  tokfeed::DatasetConfig d;
  d.samples = samples;
  d.weight = weight;
  return d;
}

// How often each record appears in a sample list.
std::map<uint32_t, int> histogram(const std::vector<uint32_t>& list) {
  std::map<uint32_t, int> h;
  for (uint32_t r : list) ++h[r];
  return h;
}

}  // namespace

TEST_CASE("mix counts: samples, whole datasets and weights, with largest remainders") {
  using tokfeed::mix_counts;
  CHECK(mix_counts({entry(500, {}), entry({}, {})}, {100, 40}, "job.toml") == std::vector<uint64_t>{500, 40});
  // F = 60, weights 0.4 in all: T = floor(60 / 0.6 + 0.5) = 100; 40 shared 25 : 15.
  CHECK(mix_counts({entry(60, {}), entry({}, 0.25), entry({}, 0.15)}, {100, 100, 100}, "job.toml") ==
        std::vector<uint64_t>{60, 25, 15});
  // All weighted: T = 10 + 20 + 30 = 60 shared 1 : 1 : 1.
  CHECK(mix_counts({entry({}, 1.0), entry({}, 1.0), entry({}, 1.0)}, {10, 20, 30}, "job.toml") ==
        std::vector<uint64_t>{20, 20, 20});
  // 7 shared 1 : 1 : 1 is 2.33 each: the remainder goes to the first (ties by config order).
  CHECK(mix_counts({entry({}, 1.0), entry({}, 1.0), entry({}, 1.0)}, {3, 2, 2}, "job.toml") ==
        std::vector<uint64_t>{3, 2, 2});
  CHECK_THROWS_AS(mix_counts({entry(10, {}), entry({}, 1.0)}, {10, 10}, "job.toml"), tokfeed::ConfigError);
}

TEST_CASE("sample lists: exact counts per dataset, N above the size repeats, deterministic, new draws each epoch") {
  // Dataset 0: 10 records, 4 drawn; dataset 1: 6 records, 15 = 2 x 6 + 3; dataset 2: 5 records, whole.
  tokfeed::Mixture mix({{0, 10, 4}, {10, 6, 15}, {16, 5, 5}});
  CHECK(mix.per_epoch() == 24);
  CHECK_FALSE(mix.whole());
  std::vector<uint32_t> e0, again, e1;
  mix.sample_list(42, 0, e0);
  mix.sample_list(42, 0, again);
  mix.sample_list(42, 1, e1);
  REQUIRE(e0.size() == 24);
  CHECK(e0 == again);
  CHECK(e0 != e1);
  for (const auto* list : {&e0, &e1}) {
    auto h = histogram(*list);
    int d0 = 0, d1 = 0, d2 = 0;
    for (auto [r, n] : h) {
      if (r < 10) {
        d0 += n;
        CHECK(n == 1);  // without replacement
      } else if (r < 16) {
        d1 += n;
        CHECK((n == 2 || n == 3));  // twice, and the 3 drawn once more
      } else {
        d2 += n;
        CHECK(n == 1);
      }
    }
    CHECK(d0 == 4);
    CHECK(d1 == 15);
    CHECK(d2 == 5);
  }
  // One whole dataset is the identity, and a schedule over it is unchanged.
  tokfeed::Mixture one({{0, 7, 7}});
  CHECK(one.whole());
}

TEST_CASE("padded: samples left out by their facts take no row; the next ones move up (4.1)") {
  using tokfeed::cache_flags::kAllMasked;
  using tokfeed::cache_flags::kDropped;
  const uint32_t n = 11;
  std::vector<uint8_t> flags(n, 0);
  flags[2] = kDropped;
  flags[5] = kAllMasked;
  flags[6] = kAllMasked;
  Store st(std::vector<uint32_t>(n, 4), flags);
  for (bool keep : {false, true}) {
    CAPTURE(keep);
    JobConfig c = job(2, 2);
    c.batch.keep_untrained = keep;
    std::vector<uint64_t> kept;
    for (uint32_t s = 0; s < n; ++s)
      if (s != 2 && (keep || (s != 5 && s != 6))) kept.push_back(s);
    for (uint32_t r = 0; r < 2; ++r) {
      Schedule s(c, whole(n), r, {}, st.store.get());
      // DistributedSampler over the kept samples: rank r takes kept[r], kept[r + 2], ...
      uint64_t per_rank = (kept.size() + 1) / 2;
      CHECK(s.total_batches() == (per_rank + 1) / 2);
      std::vector<uint64_t> got, want;
      for (uint64_t j = r; want.size() < per_rank; j += 2) want.push_back(kept[j % kept.size()]);
      for (uint64_t i = 0; i < s.total_batches(); ++i) {
        auto b = samples(s, i);
        CHECK(b.size() == (i + 1 < s.total_batches() ? 2u : per_rank - 2 * i));
        got.insert(got.end(), b.begin(), b.end());
      }
      CHECK(got == want);
    }
  }
  // Without facts (the cache off, keep_untrained) every sample is a row.
  JobConfig c = job(1, 4);
  c.batch.keep_untrained = true;
  Schedule s(c, whole(n), 0, {}, nullptr);
  CHECK(s.total_batches() == 3);
}

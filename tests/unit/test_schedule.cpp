// Order and sharding (docs/data_model.md section 4).
#include <doctest/doctest.h>

#include <algorithm>
#include <map>

#include "schedule.hpp"

using tokfeed::Schedule;
using tokfeed::ScheduleConfig;

TEST_CASE("splitmix64 matches its published reference values") {
  uint64_t s = 1234567;
  CHECK(tokfeed::splitmix64(s) == 6457827717110365317ULL);
  CHECK(tokfeed::splitmix64(s) == 3203168211198807973ULL);
}

TEST_CASE("without shuffle, one rank reads records in file order") {
  ScheduleConfig c;
  c.shuffle = false;
  Schedule s(10, c, 1, 0, 4);
  CHECK(s.batches_per_epoch() == 3);
  std::vector<uint64_t> b;
  s.batch_records(0, b);
  CHECK(b == std::vector<uint64_t>{0, 1, 2, 3});
  s.batch_records(2, b);
  CHECK(b == std::vector<uint64_t>{8, 9});  // the short last batch is kept
}

TEST_CASE("DistributedSampler semantics: padding by wrap-around, or drop_last") {
  ScheduleConfig c;
  c.shuffle = false;
  // 10 samples over 4 ranks: 12 positions, the last two repeat samples 0 and 1.
  std::map<uint64_t, int> seen;
  for (uint32_t r = 0; r < 4; ++r) {
    Schedule s(10, c, 4, r, 8);
    CHECK(s.samples_per_rank() == 3);
    std::vector<uint64_t> b;
    s.batch_records(0, b);
    CHECK(b.size() == 3);
    for (auto x : b) ++seen[x];
    CHECK(b[0] == r);
  }
  CHECK(seen[0] == 2);
  CHECK(seen[1] == 2);
  CHECK(seen[9] == 1);
  c.drop_last = true;
  Schedule d(10, c, 4, 3, 2);
  CHECK(d.samples_per_rank() == 2);
  CHECK(d.batches_per_epoch() == 1);
}

TEST_CASE("a shuffled epoch is a permutation, different per epoch and fixed per seed") {
  ScheduleConfig c;
  c.epochs = 2;
  Schedule s(100, c, 1, 0, 100), t(100, c, 1, 0, 100);
  std::vector<uint64_t> e0, e1, again;
  s.batch_records(0, e0);
  s.batch_records(1, e1);
  t.batch_records(0, again);
  CHECK(e0 == again);
  CHECK(e0 != e1);
  std::sort(e1.begin(), e1.end());
  for (uint64_t i = 0; i < 100; ++i) CHECK(e1[i] == i);
}

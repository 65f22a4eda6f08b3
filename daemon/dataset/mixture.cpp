#include "dataset/mixture.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "common/random.hpp"

namespace tokfeed {

std::vector<uint64_t> mix_counts(const std::vector<DatasetConfig>& datasets, const std::vector<uint64_t>& valid,
                                 const std::string& config_file) {
  const std::size_t n = datasets.size();
  std::vector<uint64_t> c(n, 0);
  uint64_t fixed = 0, all = 0;
  double weights = 0;
  bool any_fixed = false;
  for (std::size_t d = 0; d < n; ++d) {
    all += valid[d];
    if (datasets[d].weight) {
      weights += *datasets[d].weight;
      continue;
    }
    c[d] = datasets[d].samples ? *datasets[d].samples : valid[d];
    fixed += c[d];
    any_fixed = true;
  }
  if (weights == 0) return c;
  uint64_t total;
  if (!any_fixed) {
    total = all;
  } else {
    if (weights >= 1.0)
      throw ConfigError(
          fmt::format("{}: [[datasets]] weights add up to {}: beside datasets without a weight they "
                      "must add up to less than 1",
                      config_file, weights));
    total = static_cast<uint64_t>(std::floor(static_cast<double>(fixed) / (1.0 - weights) + 0.5));
  }
  const uint64_t share = total - std::min(total, fixed);
  std::vector<double> frac(n, -1.0);
  uint64_t given = 0;
  for (std::size_t d = 0; d < n; ++d) {
    if (!datasets[d].weight) continue;
    double x = static_cast<double>(share) * *datasets[d].weight / weights;
    double f = std::floor(x);
    c[d] = static_cast<uint64_t>(f);
    frac[d] = x - f;
    given += c[d];
  }
  // Largest remainders first; ties by config order.
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return frac[a] > frac[b]; });
  for (std::size_t k = 0; given < share && k < n; ++k)
    if (datasets[order[k]].weight) ++c[order[k]], ++given;
  return c;
}

std::vector<uint32_t> held_out(uint64_t seed, std::size_t d, uint64_t records, double ratio) {
  std::vector<uint32_t> out;
  if (!(ratio > 0) || records == 0) return out;
  uint64_t h = std::max<uint64_t>(1, static_cast<uint64_t>(std::floor(static_cast<double>(records) * ratio)));
  h = std::min(h, records);
  std::vector<uint32_t> draw(records);
  std::iota(draw.begin(), draw.end(), 0u);
  uint64_t state = seed ^ 0xE7037ED1A0B428DBULL ^ ((d + 1) * 0xD1B54A32D192ED03ULL);
  for (uint64_t i = records - 1; i >= 1; --i) std::swap(draw[i], draw[splitmix64(state) % (i + 1)]);
  out.assign(draw.begin(), draw.begin() + static_cast<std::ptrdiff_t>(h));
  std::sort(out.begin(), out.end());
  return out;
}

Mixture::Mixture(std::vector<MixPart> parts) : parts_(std::move(parts)) {
  for (const MixPart& p : parts_) per_epoch_ += p.count;
  whole_ = parts_.size() == 1 && parts_[0].count == parts_[0].records && parts_[0].ids.empty() && parts_[0].first == 0;
}

bool Mixture::holds(uint64_t rec) const {
  for (const MixPart& p : parts_) {
    if (p.count == 0) continue;
    if (p.ids.empty() ? rec >= p.first && rec < p.first + p.records
                      : std::binary_search(p.ids.begin(), p.ids.end(), static_cast<uint32_t>(rec)))
      return true;
  }
  return false;
}

void Mixture::sample_list(uint64_t seed, uint64_t epoch, std::vector<uint32_t>& out) const {
  out.clear();
  out.reserve(per_epoch_);
  std::vector<uint32_t> draw;
  for (std::size_t d = 0; d < parts_.size(); ++d) {
    const MixPart& p = parts_[d];
    if (p.records == 0 || p.count == 0) continue;
    const uint64_t q = p.count / p.records, m = p.count % p.records;
    for (uint64_t k = 0; k < q; ++k)
      for (uint64_t i = 0; i < p.records; ++i) out.push_back(static_cast<uint32_t>(p.record(i)));
    if (m == 0) continue;
    draw.resize(p.records);
    std::iota(draw.begin(), draw.end(), 0u);
    uint64_t state = seed ^ (epoch * 0x9E3779B97F4A7C15ULL) ^ ((d + 1) * 0xD1B54A32D192ED03ULL);
    for (uint64_t i = p.records - 1; i >= 1; --i) std::swap(draw[i], draw[splitmix64(state) % (i + 1)]);
    std::sort(draw.begin(), draw.begin() + static_cast<std::ptrdiff_t>(m));
    for (uint64_t i = 0; i < m; ++i) out.push_back(static_cast<uint32_t>(p.record(draw[i])));
  }
}

}  // namespace tokfeed

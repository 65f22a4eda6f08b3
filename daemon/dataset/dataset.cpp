#include "dataset/dataset.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <chrono>
#include <filesystem>
#include <thread>

#include "chat/chat_jinja.hpp"
#include "common/hash128.hpp"
#include "records/record_fields.hpp"
#include "tokfeed/shm/futex.hpp"

namespace tokfeed {

namespace {

constexpr uint64_t kEdgeBytes = 64 * 1024;

// The name of a shard's saved index: its identity (path, size, mtime, inode;
// or the spool's content hash), a hash of its first and last 64 KiB, and
// every rule that decides which records are valid. An object's identity is
// its name in `[cache] dir/objects/` (`object`: a hash of its URL, ETag and
// size), the same while it is fetched footer first and once it is whole.
// `unchecked`: a JSONL index of every non-blank line, none checked
// (check_rows = "when_read").
std::string index_name(const ShardBytes& b, const text::RecordRules& rules, const std::string& object, bool unchecked) {
  Hash128 h;
  h.field("tokfeed shard index v1");
  if (unchecked) h.field("records unchecked: every non-blank line");
  if (!object.empty()) {
    h.field("object\n" + std::filesystem::path(object).filename().string());
  } else {
    h.field(b.identity());
    uint64_t head = std::min(b.size(), kEdgeBytes);
    h.field(std::string_view(b.data(), head));
    h.field(std::string_view(b.data() + b.size() - std::min(b.size() - head, kEdgeBytes),
                             std::min(b.size() - head, kEdgeBytes)));
  }
  h.field(text::format_name(rules.format));
  h.field("formats: messages sharegpt alpaca query_response prompt_completion text");
  h.field(rules.require_alternation ? "alternate" : "any order");
  for (const auto& [k, v] : rules.placeholders) h.field(k), h.field(v);
  h.field("columns");
  for (const auto& [k, v] : rules.columns) h.field(k), h.field(v);
  if (rules.max_bytes) h.field(fmt::format("max_bytes {}", rules.max_bytes));
  if (rules.chat) h.field("chat template"), h.field(rules.chat->key), h.field(std::string(text::loss_name(rules.loss)));
  return h.hex() + ".tfx";
}

// A Parquet or Arrow shard needs a column that a format reads, under its own
// name or renamed by `columns`; else every row would be bad.
void check_columns(const std::string& path, const ColumnarLayout& layout, const text::RecordRules& rules) {
  for (const std::string& c : layout.columns) {
    if (text::detail::key_of(c) < text::detail::kKeys) return;
    for (const auto& [from, to] : rules.columns)
      if (from == c && text::detail::key_of(to) < text::detail::kKeys) return;
  }
  std::string have, want;
  for (const std::string& c : layout.columns) have += (have.empty() ? "" : ", ") + c;
  for (std::string_view k : text::detail::kKeyNames) want += (want.empty() ? "" : ", ") + std::string(k);
  throw DatasetError(
      fmt::format("{}: no column holds records: the columns are [{}], and tokfeed reads {}; rename yours in the "
                  "dataset's `columns` (e.g. columns = {{ \"conversation\" = \"messages\" }})",
                  path, have, want));
}

}  // namespace

text::RecordRules record_rules(const JobConfig& cfg, std::size_t dataset) {
  const DatasetConfig& d = cfg.datasets[dataset];
  text::RecordRules r;
  r.format = d.format;
  r.require_alternation = text::template_requires_alternation(cfg.tokenizer.tmpl);
  r.placeholders = d.placeholders;
  r.columns = d.columns;
  r.max_bytes = d.max_record_bytes;
  r.chat = cfg.tokenizer.chat;
  if (!r.chat && text::builtin_takes_tools(cfg.tokenizer.tmpl)) {
    r.tool_chat = text::builtin_chat_spec(cfg.tokenizer.tmpl, cfg.tokenizer.default_system);
    r.tool_reasoning = text::builtin_reads_reasoning(cfg.tokenizer.tmpl);
  }
  r.loss = cfg.batch.loss;
  return r;
}

Dataset::Dataset(const JobConfig& cfg, IndexProgress* progress, bool check_rows) : t0_(shm::monotonic_ns()) {
  // Each dataset's shards (as messages name them, the file read, its size as
  // stored, for progress). Objects in a store are fetched into `[cache]
  // dir/objects/` and read from there, each once it is complete.
  struct Located {
    std::string path, local;
    uint64_t bytes;
  };
  // Under check_rows = "when_read" no row is read before serving: Parquet
  // objects come footer first, and their groups are read as they arrive
  // (TOKFEED_OBJECT_FOOTERS_FIRST=0: whole, as under "start").
  const char* env = std::getenv("TOKFEED_OBJECT_FOOTERS_FIRST");
  const bool footers_allowed = !(env && std::string_view(env) == "0");
  auto footers_first = [&](const DatasetConfig& d) {
    return footers_allowed && d.columnar_when_read() && !check_rows && columnar_supported();
  };
  std::vector<std::vector<Located>> shards;
  // Each s3:// dataset's fetch, under way while the shards before are indexed.
  std::vector<std::unique_ptr<ObjectFetch>> fetches(cfg.datasets.size());
  uint64_t on_disk = 0, count = 0;
  for (const DatasetConfig& d : cfg.datasets) {
    auto& list = shards.emplace_back();
    if (is_object_url(d.path)) {
      auto& f = fetches[shards.size() - 1];
      f = std::make_unique<ObjectFetch>(d.name, d.path, cfg.cache.dir, progress ? &progress->objects : nullptr,
                                        progress ? &progress->cancel : nullptr, footers_first(d));
      for (const FetchedObject& o : f->objects()) {
        on_disk += o.size;
        ++count;
        list.push_back({o.url, "", o.size});
      }
      continue;
    }
    for (std::string& p : resolve_shards(d.name, d.path)) {
      struct stat st;
      uint64_t bytes = ::stat(p.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
      on_disk += bytes;
      ++count;
      list.push_back({p, std::move(p), bytes});
    }
  }
  if (progress) {
    progress->bytes_total.store(on_disk, std::memory_order_relaxed);
    progress->shards_total.store(count, std::memory_order_relaxed);
  }
  for (std::size_t d = 0; d < cfg.datasets.size(); ++d) {
    rules_.push_back(record_rules(cfg, d));
    index_rules_.push_back(rules_.back());
    index_rules_.back().defer_render = rules_.back().renders();
  }
  for (std::size_t d = 0; d < cfg.datasets.size(); ++d) {
    for (std::size_t k = 0; k < shards[d].size(); ++k) {
      Located& l = shards[d][k];
      if (!fetches[d]) {
        load_shard(cfg, d, l.path, l.local, l.bytes, progress, check_rows, {}, nullptr);
        continue;
      }
      // Waits for that object alone: whole, or its footer.
      ObjectFetch::Readable r = fetches[d]->readable(k);
      std::shared_ptr<PartialObject> partial;
      if (!r.map.empty()) {
        try {
          partial = std::make_shared<PartialObject>(r.map, l.path, l.bytes);
        } catch (const DatasetError&) {
          if (std::filesystem::exists(r.map)) throw;  // else complete meanwhile: its map is gone
        }
      }
      try {
        load_shard(cfg, d, l.path, partial ? r.data : fetches[d]->local(k), l.bytes, progress, check_rows, r.local,
                   partial);
      } catch (const DatasetError&) {
        if (!partial || std::filesystem::exists(r.data)) throw;
        // Complete (renamed) between its map and its file: read it whole.
        load_shard(cfg, d, l.path, fetches[d]->local(k), l.bytes, progress, check_rows, r.local, nullptr);
      }
    }
    // A fetch footer first goes on while the daemon serves.
    if (fetches[d] && footers_first(cfg.datasets[d]) && !fetches[d]->done()) fetches_.push_back(std::move(fetches[d]));
    fetches[d].reset();
  }
  if (!pending()) finish(cfg);
}

std::string Dataset::poll_objects() {
  for (auto it = fetches_.begin(); it != fetches_.end();) {
    if (std::string err = (*it)->poll(); !err.empty()) return err;
    if ((*it)->done()) it = fetches_.erase(it);
    else ++it;
  }
  return {};
}

void Dataset::want_soon(const std::vector<uint64_t>& records, uint32_t per_batch) const {
  for (std::size_t k = 0; k < records.size(); ++k) {
    if (records[k] >= size()) continue;
    const Shard& s = shard_of(records[k]);
    if (!s.rows || !s.rows->partial()) continue;
    const uint64_t row = s.index.offset(records[k] - s.first);
    s.rows->partial()->want(s.rows->group_of(row), 2 + static_cast<uint32_t>(k / std::max(1u, per_batch)));
  }
}

bool Dataset::pending() const {
  for (const Shard& s : shards_)
    if (s.pending) return true;
  return false;
}

std::vector<std::pair<uint64_t, uint64_t>> Dataset::pending_ranges() const {
  std::vector<std::pair<uint64_t, uint64_t>> out;
  for (const Shard& s : shards_)
    if (s.pending && s.index.valid()) out.emplace_back(s.first, s.first + s.index.valid());
  return out;
}

std::string Dataset::check(uint64_t i) const {
  const Shard& s = shard_of(i);
  if (!s.rows) return record_verdict(record(i), rules_[s.dataset]);
  const RowText& t = row_text(s, s.index.offset(i - s.first));
  return t.error.empty() ? record_verdict(t.text, rules_[s.dataset]) : t.error;
}

void Dataset::apply_verdicts(const JobConfig& cfg, const std::map<uint64_t, std::string>& bad) {
  for (Shard& s : shards_) {
    if (!s.pending) continue;
    std::vector<std::pair<uint64_t, std::string>> drop;
    for (auto it = bad.lower_bound(s.first); it != bad.end() && it->first < s.first + s.index.valid(); ++it)
      drop.emplace_back(it->first - s.first, it->second);
    if (s.rows && s.when_read) {
      // Reported only: the plan keeps them, and verdict() leaves them out.
      for (auto& [i, reason] : drop) s.reported.push_back({s.index.offset(i), std::move(reason)});
      std::sort(s.reported.begin(), s.reported.end(),
                [](const ColumnarBad& a, const ColumnarBad& b) { return a.row < b.row; });
    } else if (!drop.empty()) {
      s.index = s.index.without(drop, s.rows ? nullptr : s.bytes.data());
    }
    s.pending = false;
    save_checked(cfg, s);
  }
  finish(cfg);
}

void Dataset::finish(const JobConfig& cfg) {
  shard_first_.assign(1, 0);
  for (Shard& s : shards_) {
    s.first = shard_first_.back();
    shard_first_.push_back(s.first + s.index.valid());
  }
  // A Parquet or Arrow row's "line" is its 1-based number in the file; the
  // reason names its group.
  auto reason = [](const Shard& s, const ShardBad& b) {
    return s.rows ? s.rows->layout().where(b.line - 1) + ": " + b.reason : b.reason;
  };
  // Each dataset's records in the plan: its valid records, and its
  // Parquet and Arrow rows, bad ones reported under check_rows = "when_read"
  // included.
  std::vector<uint64_t> valid;
  for (std::size_t d = 0; d < cfg.datasets.size(); ++d) {
    const DatasetConfig& dc = cfg.datasets[d];
    DatasetInfo info;
    info.name = dc.name;
    const std::size_t first_bad = bad_.size();
    uint64_t planned = 0, reported = 0;
    for (const Shard& s : shards_) {
      if (s.dataset != d) continue;
      ++info.shards;
      info.bytes += s.bytes.size();
      planned += s.index.valid();
      info.bad += s.index.bad().size() + s.reported.size();
      reported += s.reported.size();
      info.indexed += s.indexed;
      if (!s.index.bad().empty() && !dc.skip_bad) {
        const ShardBad& b = s.index.bad()[0];
        throw DatasetError(
            fmt::format("{}:{}: bad record: {} (set on_bad_record = \"skip\" for this dataset to skip "
                        "such records)",
                        s.path, b.line, reason(s, b)));
      }
      for (const ShardBad& b : s.index.bad()) bad_.push_back({s.path, b.line, reason(s, b)});
      for (const ColumnarBad& b : s.reported) {
        if (!s.rows) bad_.push_back({s.path, static_cast<uint32_t>(b.row), b.reason});  // a JSONL line
        else
          bad_.push_back({s.path, static_cast<uint32_t>(b.row + 1), s.rows->layout().where(b.row) + ": " + b.reason});
      }
    }
    info.valid = planned - reported;
    info.records = info.valid + info.bad;
    if (info.valid == 0) {
      if (info.bad == 0) throw DatasetError(fmt::format("{}: no valid records: it holds no records", info.name));
      const BadRecord& b = bad_[first_bad];  // this dataset's first
      throw DatasetError(
          fmt::format("{}: no valid records: all {} records are bad; the first: {}:{}: {} (check the "
                      "dataset's format and columns)",
                      info.name, info.bad, b.file, b.line, b.reason));
    }
    valid.push_back(planned);
    bytes_ += info.bytes;
    info_.push_back(std::move(info));
  }
  // Section 7: each training dataset's held-out records leave it before its
  // counts and draws; the evaluation set is them, then [[eval.datasets]].
  const std::size_t T = cfg.train_datasets;
  std::vector<std::vector<uint32_t>> held(info_.size());
  std::vector<uint64_t> kept(valid.begin(), valid.begin() + static_cast<std::ptrdiff_t>(T));
  for (std::size_t d = 0; d < T; ++d) {
    held[d] = held_out(cfg.schedule.seed, d, valid[d], cfg.eval.split_ratio);
    if (held[d].size() >= valid[d])
      throw ConfigError(fmt::format(
          "{}: [eval] split_ratio = {} holds out all {} valid record(s) of dataset {}: lower split_ratio, or give "
          "the evaluation set as [[eval.datasets]]",
          cfg.file, cfg.eval.split_ratio, valid[d], info_[d].name));
    kept[d] -= held[d].size();
  }
  std::vector<uint64_t> counts = mix_counts(
      std::vector<DatasetConfig>(cfg.datasets.begin(), cfg.datasets.begin() + static_cast<std::ptrdiff_t>(T)), kept,
      cfg.file);
  std::vector<MixPart> parts, eval_parts;
  uint64_t first = 0;
  for (std::size_t d = 0; d < info_.size(); ++d) {
    if (d < T) {
      MixPart p{first, kept[d], counts[d], {}};
      MixPart e{first, held[d].size(), held[d].size(), {}};
      if (!held[d].empty()) {
        // Valid-record numbers of what is kept and what is held out.
        std::size_t h = 0;
        for (uint64_t i = 0; i < valid[d]; ++i) {
          if (h < held[d].size() && held[d][h] == i) e.ids.push_back(static_cast<uint32_t>(first + held[d][h++]));
          else p.ids.push_back(static_cast<uint32_t>(first + i));
        }
      }
      info_[d].samples = counts[d];
      info_[d].held_out = held[d].size();
      parts.push_back(std::move(p));
      eval_parts.push_back(std::move(e));
    } else {
      const DatasetConfig& dc = cfg.datasets[d];
      info_[d].samples = dc.samples ? *dc.samples : valid[d];
      eval_parts.push_back({first, valid[d], info_[d].samples, {}});
    }
    first += valid[d];
  }
  if (first > UINT32_MAX) throw DatasetError(fmt::format("{} valid records: at most 2^32 are supported", first));
  mixture_ = Mixture(std::move(parts));
  if (cfg.eval.enabled()) eval_mixture_ = Mixture(std::move(eval_parts));
  if (mixture_.per_epoch() > UINT32_MAX || eval_mixture_.per_epoch() > UINT32_MAX)
    throw DatasetError(fmt::format("{} samples per epoch: at most 2^32 are supported; lower `samples`",
                                   std::max(mixture_.per_epoch(), eval_mixture_.per_epoch())));
  seconds_ = (shm::monotonic_ns() - t0_) / 1e9;
}

void Dataset::load_shard(const JobConfig& cfg, std::size_t d, const std::string& path, const std::string& local,
                         uint64_t disk_bytes, IndexProgress* progress, bool check_rows, const std::string& object,
                         std::shared_ptr<PartialObject> partial) {
  const DatasetConfig& dc = cfg.datasets[d];
  const text::RecordRules& rules = index_rules_[d];
  const bool cache = cfg.cache.enabled && !cfg.cache.dir.empty();
  const bool compressed = compression_of(path) != Compression::kNone;
  const uint64_t before = progress ? progress->bytes_done.load(std::memory_order_relaxed) : 0;

  Shard s;
  s.path = path;
  s.dataset = d;
  s.first = shard_first_.back();
  ShardProgress report;
  if (progress) {
    report.bytes = &progress->bytes_done;
    report.records = &progress->records;
    report.cancel = &progress->cancel;
    report.slow_chunk_ms = progress->slow_chunk_ms;
  }
  report.max_row_bytes = dc.max_record_bytes;
  s.bytes = ShardBytes::open(local, cache ? cfg.cache.dir + "/spool" : "", report);
  // The name comes from the full rules: a saved index holds every verdict.
  const ColumnarKind kind = columnar_kind(path);
  // Under check_rows = "when_read" a JSONL shard's index is a newline scan:
  // its records are checked as they are encoded (verdict()).
  s.unchecked = kind == ColumnarKind::kNone && dc.jsonl_when_read();
  s.index_name = index_name(s.bytes, rules_[d], object, s.unchecked);
  s.object = object;
  if (kind != ColumnarKind::kNone) {
    s.rows = std::make_unique<ColumnarRows>(path, kind, s.bytes.data(), s.bytes.size(), report.max_row_bytes);
    s.rows->set_partial(std::move(partial));
    check_columns(path, s.rows->layout(), rules);
    load_columnar(cfg, d, s, report, check_rows);
  } else {
    std::optional<ShardIndex> hit;
    if (cache) hit = ShardIndex::load(cfg.cache.dir + "/index/" + s.index_name, s.bytes.size());
    if (hit) {
      s.index = std::move(*hit);
    } else {
      s.indexed = true;
      unsigned threads = std::max(1u, std::min(8u, std::thread::hardware_concurrency()));
      if (compressed) report.bytes = nullptr;  // counted as read
      // The shard is a read-only shared file mapping; the daemon reads it
      // again only to name a record's line.
      s.index = ShardIndex::build(path, s.bytes.data(), s.bytes.size(), s.unchecked ? nullptr : &rules, threads, report,
                                  /*file_mapping=*/true);
      // Records a template renders are judged in children (apply_verdicts()).
      s.pending = rules.defer_render && !s.unchecked;
      if (!s.pending) save_checked(cfg, s);
    }
    if (s.unchecked && check_rows) report_unchecked(s);
  }
  if (progress) {
    progress->bytes_done.store(before + disk_bytes, std::memory_order_relaxed);
    progress->shards_done.fetch_add(1, std::memory_order_relaxed);
    if (!s.indexed) progress->records.fetch_add(s.index.records(), std::memory_order_relaxed);
  }
  // A bad record found here fails its dataset at once under "fail".
  if (!s.index.bad().empty() && !dc.skip_bad) {
    const ShardBad& b = s.index.bad()[0];
    throw DatasetError(
        fmt::format("{}:{}: bad record: {} (set on_bad_record = \"skip\" for this dataset to skip such records)", path,
                    b.line, s.rows ? s.rows->layout().where(b.line - 1) + ": " + b.reason : b.reason));
  }
  shard_first_.push_back(s.first + s.index.valid());
  shards_.push_back(std::move(s));
}

void Dataset::save_checked(const JobConfig& cfg, Shard& s) {
  if (!cfg.cache.enabled || cfg.cache.dir.empty()) return;
  const std::string saved = cfg.cache.dir + "/index/" + s.index_name;
  std::error_code ec;
  std::filesystem::create_directories(cfg.cache.dir + "/index", ec);
  if (s.rows) {
    if (s.index.bad().empty() && s.reported.empty()) {
      if (FILE* f = std::fopen(rows_ok_name(saved).c_str(), "w")) std::fclose(f);
    } else if (!s.when_read) {
      if (std::string err = s.index.save(saved); !err.empty())
        spdlog::warn("{}: the rows' verdicts are not kept ({}); the next start checks them again", s.path, err);
    }
    return;
  }
  // A cache that cannot be written costs the next start an index, no more.
  if (std::string err = s.index.save(saved); !err.empty()) {
    spdlog::warn("{}: the shard index is not kept ({}); the next start indexes it again", s.path, err);
  } else if (auto mapped = ShardIndex::load(saved, s.bytes.size())) {
    s.index = std::move(*mapped);  // the page cache holds it, shared with later starts
  }
}

void Dataset::load_columnar(const JobConfig& cfg, std::size_t d, Shard& s, const ShardProgress& report,
                            bool check_rows) {
  const DatasetConfig& dc = cfg.datasets[d];
  const uint64_t n = s.rows->layout().rows();
  const bool when_read = dc.columnar_when_read();
  // What a start that checked every row left in the cache: a mark that all
  // passed under these rules, or an index of the valid rows.
  const bool cache = cfg.cache.enabled && !cfg.cache.dir.empty();
  const std::string saved = cache ? cfg.cache.dir + "/index/" + s.index_name : "";
  struct stat st;
  if (cache && ::stat(rows_ok_name(saved).c_str(), &st) == 0) {
    s.index = ShardIndex::rows(n);
    s.rows_checked = true;
    return;
  }
  if (when_read && !check_rows) {
    s.index = ShardIndex::rows(n);
    return;
  }
  std::optional<ShardIndex> hit;
  if (cache && !when_read) hit = ShardIndex::load(saved, n);
  if (hit) {
    s.index = std::move(*hit);
    s.rows_checked = true;
    return;
  }
  // Every row is read and checked now, on several threads; nothing is
  // written but the verdicts. Rows a template renders are rendered later,
  // in children (apply_verdicts()).
  s.indexed = true;
  const unsigned threads = std::max(1u, std::min(8u, std::thread::hardware_concurrency()));
  const text::RecordRules& rules = index_rules_[d];
  std::vector<ColumnarBad> bad =
      s.rows->check_rows([&](std::string_view rec) { return record_verdict(rec, rules); }, threads, report);
  s.when_read = when_read;
  if (when_read) {
    s.index = ShardIndex::rows(n);  // the plan keeps them: reported only
    s.reported = std::move(bad);
  } else {
    std::vector<ShardBad> out;
    for (ColumnarBad& b : bad) out.push_back({static_cast<uint32_t>(b.row + 1), std::move(b.reason)});
    s.index = ShardIndex::rows(n, std::move(out));
    s.rows_checked = true;
  }
  s.pending = rules.defer_render;
  if (!s.pending) save_checked(cfg, s);
}

const Dataset::Shard& Dataset::shard_of(uint64_t i) const {
  if (shards_.size() == 1) return shards_[0];
  auto it = std::upper_bound(shard_first_.begin(), shard_first_.end(), i);
  return shards_[static_cast<std::size_t>(it - shard_first_.begin()) - 1];
}

const Dataset::RowText& Dataset::row_text(const Shard& s, uint64_t row) const {
  thread_local RowText last;
  if (last.shard != s.rows->id() || last.row != row) {
    last.shard = s.rows->id();
    last.row = row;
    last.error.clear();
    try {
      s.rows->row(row, last.text);
    } catch (const DatasetError& e) {
      last.text.clear();
      last.error = e.what();
    }
  }
  return last;
}

// Bad records of an unchecked JSONL shard, listed (tokfeedd --check-config):
// the plan keeps them, as it keeps rows reported under "when_read".
void Dataset::report_unchecked(Shard& s) {
  const text::RecordRules& rules = index_rules_[s.dataset];
  uint64_t at = 0;
  uint32_t line = 1;
  for (uint64_t i = 0; i < s.index.valid(); ++i) {
    const uint64_t off = s.index.offset(i);
    std::string why = record_verdict(record_at(s.bytes.data(), s.bytes.size(), s.index.kind(), off), rules);
    if (why.empty()) continue;
    line += static_cast<uint32_t>(std::count(s.bytes.data() + at, s.bytes.data() + off, '\n'));
    at = off;
    s.reported.push_back({line, std::move(why)});
  }
}

std::string Dataset::verdict(uint64_t i) const {
  const Shard& s = shard_of(i);
  // An unchecked JSONL record: its size here; its parse, fields and render
  // are the encoder's, whose reasons are the index's (SampleEncoder::render).
  if (s.unchecked) return record_size_verdict(record(i).size(), rules_[s.dataset]);
  if (!s.rows || s.rows_checked) return {};
  const RowText& t = row_text(s, s.index.offset(i - s.first));
  return t.error.empty() ? record_verdict(t.text, rules_[s.dataset]) : t.error;
}

uint32_t Dataset::line(uint64_t i) const {
  const Shard& s = shard_of(i);
  if (s.rows) return static_cast<uint32_t>(s.index.offset(i - s.first) + 1);
  return line_at(s.bytes.data(), s.index.offset(i - s.first));
}

std::string Dataset::where(uint64_t i) const {
  const Shard& s = shard_of(i);
  if (s.rows) {
    const uint64_t row = s.index.offset(i - s.first);
    return fmt::format("{}:{} ({})", s.path, row + 1, s.rows->layout().where(row));
  }
  return fmt::format("{}:{}", s.path, line_at(s.bytes.data(), s.index.offset(i - s.first)));
}

}  // namespace tokfeed

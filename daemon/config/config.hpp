// The job configuration (TOML). Every key is checked: an unknown key, a wrong
// type or a bad value is a ConfigError that names the file, the key and what
// is expected.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "chat/chat_jinja.hpp"
#include "chat/chat_template.hpp"
#include "records/records.hpp"
#include "chat/sample.hpp"
#include "tokfeed/shm/layout.hpp"

namespace tokfeed {

class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class Padding : uint8_t { kLongest, kMaxLength, kPacked, kPaddingFree };

// True for the modes whose rows hold several samples (docs/data_model.md 4.1).
inline bool is_packed(Padding p) { return p == Padding::kPacked || p == Padding::kPaddingFree; }

// One dataset of the job (docs/data_model.md section 1.1).
struct DatasetConfig {
  std::string name;  // `path` as the config wrote it, for status and messages
  std::string path;  // a file, a glob or a directory, resolved against the config file's directory
  text::Format format = text::Format::kAuto;
  bool skip_bad = true;  // on_bad_record = "skip"
  // check_rows: "when_read" checks records when read (a bad one is left out
  // where the plan puts it), not all at start: a JSONL shard is only
  // scanned for its lines, a Parquet or Arrow shard's rows not read.
  // Unset, a JSONL shard is checked when read and a Parquet or Arrow shard
  // at start; under on_bad_record = "fail" every shard is checked at start.
  enum class CheckRows : uint8_t { kDefault, kStart, kWhenRead };
  CheckRows check_rows = CheckRows::kDefault;
  bool jsonl_when_read() const { return skip_bad && check_rows != CheckRows::kStart; }
  bool columnar_when_read() const { return skip_bad && check_rows == CheckRows::kWhenRead; }
  std::vector<std::pair<std::string, std::string>> placeholders;
  std::vector<std::pair<std::string, std::string>> columns;  // source field -> the field it is read as
  std::optional<uint64_t> samples;                           // per epoch, ms-swift's `#N`
  std::optional<double> weight;                              // a share of the mixed epoch
  uint64_t max_record_bytes = kDefaultMaxRecordBytes;        // longer records are bad, unparsed; 0: no bound
  bool eval = false;                                         // an [[eval.datasets]] entry
  static constexpr uint64_t kDefaultMaxRecordBytes = 8u << 20;
};

struct TokenizerConfig {
  std::string type = "sentencepiece";
  std::string path;
  text::Template tmpl = text::Template::kChatml;
  std::optional<std::string> default_system;
  // template = "jinja", or "auto" finding one: a model's own chat template,
  // loaded and parsed once here, before fork (docs/chat_templates.md).
  std::shared_ptr<const text::ChatSpec> chat;
  std::string chat_template;       // as configured ("" unless template = "jinja")
  std::string chat_template_name;  // for a list of named templates
};

struct BatchConfig {
  uint32_t size = 4;
  uint32_t max_length = 2048;
  Padding padding = Padding::kLongest;
  text::Truncation truncation = text::Truncation::kRight;
  text::Loss loss = text::Loss::kAllAssistant;
  // Keep samples with no trained token after truncation (TRL drops them; so
  // does tokfeed unless asked).
  bool keep_untrained = false;
  shm::Dtype dtype = shm::Dtype::kInt64;
  uint32_t pack_window = 1000;  // samples packed together, best-fit decreasing
  uint32_t tokens = 0;          // padding_free: token budget of a batch's one row

  // Row capacity in tokens of a packed row.
  uint32_t capacity() const { return padding == Padding::kPaddingFree ? tokens : max_length; }
  // Rows per batch (padding_free has one).
  uint32_t rows() const { return padding == Padding::kPaddingFree ? 1 : size; }
  // Whether a sample may be left out of the batches by what tokenizing it
  // finds (docs/data_model.md 4.1): the plan then needs every sample's facts.
  bool leaves_samples_out() const { return truncation == text::Truncation::kDrop || !keep_untrained; }
};

struct ScheduleConfig {
  uint32_t epochs = 1;
  bool shuffle = true;
  uint64_t seed = 42;
  bool drop_last = false;
  // The evaluation stream (eval_job): the one epoch is a pass that repeats
  // without end, dealt by docs/data_model.md section 7.
  bool passes = false;
};

struct WorkersConfig {
  uint32_t count = 2;
  uint32_t slots = 4;
  uint32_t max_crashes = 3;   // crashes on one record before it is isolated
  std::string cpus;           // "" unpinned | "auto" (the GPU's NUMA node) | "16-23,30": workers and builders
  int32_t nice = 0;           // 0..19, for workers and builders
  bool batch_policy = false;  // policy = "batch": SCHED_BATCH
  // What each worker and cache builder may map beyond what it inherits from
  // the supervisor (RLIMIT_AS), so one record cannot take the node. Written
  // in GB (10^9 bytes) as max_memory; unset: default_child_memory(); 0: no cap.
  std::optional<uint64_t> max_memory;
};

struct RanksConfig {
  uint32_t world_size = 1;
  uint32_t node_rank = 0;
  uint32_t local_ranks = 0;     // ranks per node; 0 = unset
  std::vector<uint32_t> serve;  // global ranks served here; default: all, or node_rank's local ranks
};

// The token cache (docs/data_model.md section 6).
struct CacheConfig {
  bool enabled = true;
  std::string dir;  // default: $CACHE_DIRECTORY, $XDG_CACHE_HOME/tokfeed, ~/.cache/tokfeed
  // Bytes the directory may hold; at start the least recently used entries
  // go until it fits (0: no bound). Written in GB (10^9 bytes) as max_gb.
  uint64_t max_bytes = 0;
  // mode = "group": the directory is shared with its group (dirs 02770,
  // files 0640); default "private": 0700 and 0600, whatever the umask.
  bool group = false;
};

struct ServerConfig {
  std::string socket = "/run/tokfeed/default.sock";
  std::string shm_prefix = "tokfeed-default";
  std::string shm_dir = "/dev/shm";
  uint32_t heartbeat_ms = 100;
  // Peers (by SO_PEERCRED) allowed on the control socket besides the
  // daemon's own uid and root: these uids, and any peer with a gid in
  // allow_gids as its primary or a supplementary group.
  std::vector<uint32_t> allow_uids;
  std::vector<uint32_t> allow_gids;
  // metrics_listen = "host:port": serve GET /metrics over HTTP. Empty: off.
  std::string metrics_listen;
  std::string metrics_host;   // an IP literal, without brackets
  uint16_t metrics_port = 0;  // 0: any free port (shown in status)
};

// [eval]: the evaluation stream (docs/data_model.md section 7).
struct EvalConfig {
  double split_ratio = 0;   // share of each training dataset held out, [0, 1)
  uint32_t batch_size = 0;  // rows per batch ([batch] size unless set)
  uint32_t tokens = 0;      // padding_free: a batch's token budget ([batch] tokens unless set)
  uint32_t workers = 1;     // workers per served rank building its eval batches
  bool enabled() const { return split_ratio > 0 || has_datasets; }
  bool has_datasets = false;  // [[eval.datasets]] given
};

struct JobConfig {
  std::string file;  // the config file itself
  // [dataset] or [[datasets]] (at least one), then the [[eval.datasets]]
  // entries (eval = true): valid records are numbered over all of them.
  std::vector<DatasetConfig> datasets;
  std::size_t train_datasets = 0;  // datasets[0 .. train_datasets) are the training ones
  EvalConfig eval;
  TokenizerConfig tokenizer;
  BatchConfig batch;
  ScheduleConfig schedule;
  WorkersConfig workers;
  RanksConfig ranks;
  ServerConfig server;
  CacheConfig cache;
};

// Parses and validates `path`. Throws ConfigError.
JobConfig load_config(const std::string& path);

// The job the evaluation stream is planned and built by: [eval]'s batch
// size and token budget, no shuffle, no drop_last, one pass per "epoch",
// [eval] workers.
JobConfig eval_job(const JobConfig& c);

// The resolved settings as TOML, for --check-config and status.
std::string describe(const JobConfig& c);
// Bytes of address space each worker or cache builder may add to what it
// inherits ([workers] max_memory, else the default share of RAM); 0: no cap.
uint64_t child_memory_cap(const JobConfig& c);

std::string_view padding_name(Padding p) noexcept;
std::string_view truncation_name(text::Truncation t) noexcept;

}  // namespace tokfeed

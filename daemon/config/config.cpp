#include "config/config.hpp"

#include "config/cpu_policy.hpp"

#include <fmt/format.h>
#include <arpa/inet.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>
#include <sstream>
#include <toml++/toml.h>

namespace tokfeed {

std::string_view padding_name(Padding p) noexcept {
  switch (p) {
    case Padding::kLongest: return "longest";
    case Padding::kMaxLength: return "max_length";
    case Padding::kPacked: return "packed";
    case Padding::kPaddingFree: return "padding_free";
  }
  return "?";
}

std::string_view truncation_name(text::Truncation t) noexcept {
  switch (t) {
    case text::Truncation::kRight: return "right";
    case text::Truncation::kLeft: return "left";
    case text::Truncation::kDrop: return "drop";
  }
  return "?";
}

namespace {

namespace fs = std::filesystem;

// "127.0.0.1:9464" or "[::1]:9464" -> host, port; "" or what is wrong. Only IP
// literals: a name would need a resolver the daemon does not want at start-up.
std::string parse_listen(const std::string& v, std::string& host, uint16_t& port) {
  const std::string usage = "expected \"host:port\" with an IP address, e.g. \"127.0.0.1:9464\" or \"[::1]:9464\"";
  std::size_t colon = v.rfind(':');
  if (colon == std::string::npos) return fmt::format("'{}' has no port: {}", v, usage);
  std::string h = v.substr(0, colon), p = v.substr(colon + 1);
  bool v6 = h.size() >= 2 && h.front() == '[' && h.back() == ']';
  if (v6) h = h.substr(1, h.size() - 2);
  else if (h.find(':') != std::string::npos) return fmt::format("'{}': an IPv6 address goes in brackets: {}", v, usage);
  unsigned char addr[sizeof(in6_addr)];
  if (h.empty() || inet_pton(v6 ? AF_INET6 : AF_INET, h.c_str(), addr) != 1)
    return fmt::format("'{}' is not an IP{} address: {}", h, v6 ? "v6" : "v4", usage);
  if (p.empty() || p.size() > 5 || p.find_first_not_of("0123456789") != std::string::npos || std::stoul(p) > 65535)
    return fmt::format("port '{}' is not a number in [0, 65535] (0 picks a free port): {}", p, usage);
  host = h;
  port = static_cast<uint16_t>(std::stoul(p));
  return {};
}

// Reads one table, remembering which keys were used so that leftovers can be
// reported as unknown.
class Section {
 public:
  Section(const std::string& file, const toml::table* table, std::string name)
      : file_(file), table_(table), name_(std::move(name)) {}

  [[noreturn]] void fail(std::string_view key, std::string_view what) const {
    throw ConfigError(fmt::format("{}: [{}] {}: {}", file_, name_, key, what));
  }

  const toml::node* get(std::string_view key) {
    used_.insert(std::string(key));
    return table_ ? table_->get(key) : nullptr;
  }

  std::string str(std::string_view key, std::string def) {
    const toml::node* n = get(key);
    if (!n) return def;
    if (!n->is_string()) fail(key, "expected a string");
    return std::string(n->as_string()->get());
  }

  std::optional<std::string> opt_str(std::string_view key) {
    const toml::node* n = get(key);
    if (!n) return std::nullopt;
    if (!n->is_string()) fail(key, "expected a string");
    return std::string(n->as_string()->get());
  }

  int64_t integer(std::string_view key, int64_t def, int64_t lo, int64_t hi) {
    const toml::node* n = get(key);
    if (!n) return def;
    if (!n->is_integer()) fail(key, fmt::format("expected an integer in [{}, {}]", lo, hi));
    int64_t v = n->as_integer()->get();
    if (v < lo || v > hi) fail(key, fmt::format("{} is out of range: expected an integer in [{}, {}]", v, lo, hi));
    return v;
  }

  bool boolean(std::string_view key, bool def) {
    const toml::node* n = get(key);
    if (!n) return def;
    if (!n->is_boolean()) fail(key, "expected true or false");
    return n->as_boolean()->get();
  }

  std::optional<std::string> opt_choice(std::string_view key, std::initializer_list<std::string_view> allowed) {
    std::optional<std::string> v = opt_str(key);
    if (!v) return v;
    for (auto a : allowed)
      if (a == *v) return v;
    std::string list;
    for (auto a : allowed) list += (list.empty() ? "" : " | ") + std::string(a);
    fail(key, fmt::format("'{}' is not one of: {}", *v, list));
  }

  std::string choice(std::string_view key, std::string def, std::initializer_list<std::string_view> allowed) {
    return opt_choice(key, allowed).value_or(std::move(def));
  }

  // Any key this section did not read is a typo or an unsupported option.
  void check_unknown() const {
    if (!table_) return;
    for (const auto& [k, v] : *table_) {
      std::string key(k.str());
      if (!used_.count(key)) throw ConfigError(fmt::format("{}: [{}] unknown key '{}'", file_, name_, key));
    }
  }

  const toml::table* table() const { return table_; }

 private:
  const std::string& file_;
  const toml::table* table_;
  std::string name_;
  std::set<std::string> used_;
};

std::string resolve(const std::string& file, const std::string& p) {
  if (p.empty() || fs::path(p).is_absolute()) return p;
  return fs::absolute(fs::path(file).parent_path() / p).lexically_normal().string();
}

// [tokenizer] template = "jinja" (chat_template = PATH) or "auto" (the
// tokenizer folder's chat template when it has one, else chatml): the model's
// own template, parsed here (docs/chat_templates.md). Built-in names select
// a bundled template.
void read_chat_template(const std::string& path, Section& s, const std::string& tmpl, TokenizerConfig& t) {
  std::optional<std::string> file = s.opt_str("chat_template");
  text::ChatSource src;
  src.name = s.str("chat_template_name", "");
  src.instant = s.str("template_time", "2024-07-26");
  src.max_steps = static_cast<uint64_t>(s.integer("template_max_steps", 2'000'000, 1000, int64_t{1} << 40));
  if (const toml::node* kw = s.get("template_kwargs")) {
    if (!kw->is_table()) s.fail("template_kwargs", "expected a table, e.g. { enable_thinking = false }");
    std::stringstream ss;
    ss << toml::json_formatter{*kw->as_table()};
    src.kwargs_json = ss.str();
  }
  if (tmpl == "jinja" && !file)
    s.fail("chat_template",
           "template = \"jinja\" needs chat_template = PATH (.jinja, tokenizer_config.json or a model folder)");
  if (file && tmpl != "jinja" && tmpl != "auto")
    s.fail("chat_template", "is read only with template = \"jinja\" or \"auto\"; template is \"" + tmpl + "\"");
  if (tmpl != "jinja" && tmpl != "auto") {
    text::parse_template(tmpl, t.tmpl);
    return;
  }
  if (file) {
    src.path = resolve(path, *file);
  } else if (auto found = text::auto_chat_template(t.path)) {
    src.path = *found;
  } else {
    t.tmpl = text::Template::kChatml;  // "auto" without a model template
    return;
  }
  if (t.default_system) s.fail("default_system", "applies to the built-in templates; a model's template has its own");
  try {
    t.chat = text::load_chat_template(src);
  } catch (const std::exception& e) {
    s.fail(file ? "chat_template" : "template", e.what());
  }
  t.chat_template = src.path;
  t.chat_template_name = src.name;
}

void require_file(const std::string& file, std::string_view section, std::string_view key, const std::string& p) {
  struct stat st;
  if (p.empty()) throw ConfigError(fmt::format("{}: [{}] {}: a path is required", file, section, key));
  if (stat(p.c_str(), &st) != 0)
    throw ConfigError(fmt::format("{}: [{}] {}: file not found: {}", file, section, key, p));
  if (!S_ISREG(st.st_mode))
    throw ConfigError(fmt::format("{}: [{}] {}: not a regular file: {}", file, section, key, p));
}

// systemd's CacheDirectory=, then the XDG base directory, then ~/.cache.
std::string default_cache_dir() {
  if (const char* d = getenv("CACHE_DIRECTORY"); d && *d) return std::string(d);
  if (const char* d = getenv("XDG_CACHE_HOME"); d && *d) return std::string(d) + "/tokfeed";
  if (const char* d = getenv("HOME"); d && *d) return std::string(d) + "/.cache/tokfeed";
  return "";
}

const toml::table* subtable(const std::string& file, const toml::table& root, std::string_view name) {
  const toml::node* n = root.get(name);
  if (!n) return nullptr;
  if (!n->is_table()) throw ConfigError(fmt::format("{}: [{}] must be a table", file, name));
  return n->as_table();
}

// A table of NAME = "value" strings, in file order.
std::vector<std::pair<std::string, std::string>> string_table(Section& s, std::string_view key, std::string_view what) {
  std::vector<std::pair<std::string, std::string>> out;
  const toml::node* n = s.get(key);
  if (!n) return out;
  if (!n->is_table()) s.fail(key, fmt::format("expected a table of {}", what));
  for (const auto& [k, v] : *n->as_table()) {
    if (!v.is_string()) s.fail(fmt::format("{}.{}", key, k.str()), "expected a string");
    out.emplace_back(std::string(k.str()), std::string(v.as_string()->get()));
  }
  return out;
}

DatasetConfig read_dataset(const std::string& file, Section& s) {
  DatasetConfig d;
  d.name = s.str("path", "");
  if (d.name.empty()) s.fail("path", "a path is required: a file, a glob or a directory of shards");
  // An object store's URL (s3://) is listed when the datasets are indexed.
  const bool object = d.name.starts_with("s3://");
  d.path = object ? d.name : resolve(file, d.name);
  if (!object && d.path.find_first_of("*?[") == std::string::npos) {
    struct stat st;
    if (stat(d.path.c_str(), &st) != 0) s.fail("path", "file not found: " + d.path);
    if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) s.fail("path", "not a regular file or a directory: " + d.path);
  }
  text::parse_format(
      s.choice("format", "auto",
               {"auto", "messages", "sharegpt", "alpaca", "query_response", "prompt_completion", "text"}),
      d.format);
  d.skip_bad = s.choice("on_bad_record", "skip", {"skip", "fail"}) == "skip";
  // Unset: JSONL checked when read, Parquet and Arrow at start (under
  // on_bad_record = "fail" all at start).
  if (std::optional<std::string> rows = s.opt_choice("check_rows", {"start", "when_read"}))
    d.check_rows = *rows == "when_read" ? DatasetConfig::CheckRows::kWhenRead : DatasetConfig::CheckRows::kStart;
  if (d.check_rows == DatasetConfig::CheckRows::kWhenRead && !d.skip_bad)
    s.fail("check_rows",
           "\"when_read\" leaves bad rows out as they are read; with on_bad_record = \"fail\" every "
           "row is checked at start: set one or the other");
  d.max_record_bytes =
      static_cast<uint64_t>(s.integer("max_record_bytes", DatasetConfig::kDefaultMaxRecordBytes, 0, int64_t{1} << 32));
  d.placeholders = string_table(s, "placeholders", "NAME = \"value\"");
  d.columns = string_table(s, "columns", "source = \"target\" field names");
  for (const auto& [from, to] : d.columns)
    if (from.empty() || to.empty()) s.fail("columns", "field names must not be empty");
  if (s.get("samples")) d.samples = static_cast<uint64_t>(s.integer("samples", 1, 1, INT64_MAX));
  if (const toml::node* w = s.get("weight")) {
    if (d.samples) s.fail("weight", "give samples or weight, not both");
    if (!w->is_number()) s.fail("weight", "expected a number > 0");
    double v = w->is_integer() ? static_cast<double>(w->as_integer()->get()) : w->as_floating_point()->get();
    if (!(v > 0) || !std::isfinite(v)) s.fail("weight", fmt::format("{} is out of range: expected a number > 0", v));
    d.weight = v;
  }
  s.check_unknown();
  return d;
}

// [dataset] (one) or [[datasets]] (a list); section 1.1 of docs/data_model.md.
std::vector<DatasetConfig> read_datasets(const std::string& file, const toml::table& root) {
  std::vector<DatasetConfig> out;
  const toml::node* one = root.get("dataset");
  const toml::node* many = root.get("datasets");
  if (one && many)
    throw ConfigError(fmt::format("{}: both [dataset] and [[datasets]]: use [[datasets]] entries only", file));
  if (many) {
    const toml::array* list = many->as_array();
    if (!list || list->empty() || !list->is_array_of_tables())
      throw ConfigError(fmt::format("{}: [[datasets]] must be a non-empty array of tables", file));
    for (std::size_t i = 0; i < list->size(); ++i) {
      Section s(file, list->get(i)->as_table(), fmt::format("datasets.{}", i));
      out.push_back(read_dataset(file, s));
    }
  } else {
    Section s(file, subtable(file, root, "dataset"), "dataset");
    out.push_back(read_dataset(file, s));
  }
  double weights = 0;
  bool fixed = false;
  for (const DatasetConfig& d : out) {
    if (d.weight) weights += *d.weight;
    else fixed = true;
  }
  if (fixed && weights >= 1.0)
    throw ConfigError(
        fmt::format("{}: [[datasets]] weights add up to {} beside datasets without a weight: weights "
                    "are shares of the epoch and must add up to less than 1 there",
                    file, weights));
  return out;
}

// [eval] and [[eval.datasets]] (docs/data_model.md section 7), after [batch].
void read_eval(const std::string& file, const toml::table& root, JobConfig& c) {
  Section s(file, subtable(file, root, "eval"), "eval");
  EvalConfig& e = c.eval;
  if (const toml::node* r = s.get("split_ratio")) {
    const char* want = "expected a number in [0, 1): the share of each training dataset held out";
    if (!r->is_number()) s.fail("split_ratio", want);
    e.split_ratio = r->is_integer() ? static_cast<double>(r->as_integer()->get()) : r->as_floating_point()->get();
    if (!(e.split_ratio >= 0 && e.split_ratio < 1))
      s.fail("split_ratio", fmt::format("{} is out of range: {}", e.split_ratio, want));
  }
  e.batch_size = static_cast<uint32_t>(s.integer("batch_size", c.batch.size, 1, 65536));
  e.tokens = static_cast<uint32_t>(s.integer("tokens", c.batch.tokens, 1, 1 << 28));
  if (c.batch.padding == Padding::kPaddingFree && e.tokens < c.batch.max_length)
    s.fail("tokens", fmt::format("{} is below max_length {}: a padding_free row must fit the longest sample", e.tokens,
                                 c.batch.max_length));
  if (uint64_t{e.batch_size} * c.batch.max_length > (uint64_t{1} << 28))
    s.fail("batch_size", "batch_size x max_length exceeds 2^28 tokens per batch");
  e.workers = static_cast<uint32_t>(s.integer("workers", 1, 1, 256));
  if (const toml::node* many = s.get("datasets")) {
    const toml::array* list = many->as_array();
    if (!list || list->empty() || !list->is_array_of_tables())
      s.fail("datasets", "expected a non-empty array of tables: [[eval.datasets]] entries");
    for (std::size_t i = 0; i < list->size(); ++i) {
      Section d(file, list->get(i)->as_table(), fmt::format("eval.datasets.{}", i));
      if (d.get("weight"))
        d.fail("weight", "an evaluation set is not mixed: every record is taken (samples = N takes N)");
      DatasetConfig dc = read_dataset(file, d);
      dc.eval = true;
      c.datasets.push_back(std::move(dc));
    }
    e.has_datasets = true;
  }
  s.check_unknown();
}
}  // namespace

JobConfig eval_job(const JobConfig& c) {
  JobConfig e = c;
  e.batch.size = c.eval.batch_size;
  e.batch.tokens = c.eval.tokens;
  e.schedule.shuffle = false;
  e.schedule.drop_last = false;
  e.schedule.epochs = 1;
  e.schedule.passes = true;
  e.workers.count = c.eval.workers;
  return e;
}

JobConfig load_config(const std::string& path) {
  JobConfig c;
  c.file = path;
  toml::table root;
  try {
    root = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    const auto& src = e.source();
    throw ConfigError(
        fmt::format("{}:{}:{}: invalid TOML: {}", path, src.begin.line, src.begin.column, e.description()));
  }
  static const std::set<std::string> kSections = {"dataset", "datasets", "tokenizer", "batch", "schedule",
                                                  "workers", "ranks",    "server",    "cache", "eval"};
  for (const auto& [k, v] : root) {
    if (!kSections.count(std::string(k.str())))
      throw ConfigError(
          fmt::format("{}: unknown section [{}]; expected one of dataset, datasets, tokenizer, "
                      "batch, schedule, workers, ranks, server, cache, eval",
                      path, k.str()));
  }

  c.datasets = read_datasets(path, root);
  c.train_datasets = c.datasets.size();
  {
    Section s(path, subtable(path, root, "tokenizer"), "tokenizer");
    c.tokenizer.type = s.choice("type", "sentencepiece", {"sentencepiece", "hf"});
    c.tokenizer.path = resolve(path, s.str("path", ""));
    std::string tmpl =
        s.choice("template", "auto", {"auto", "jinja", "mistral", "llama2", "chatml", "qwen2_5", "qwen3", "llama3"});
    c.tokenizer.default_system = s.opt_str("default_system");
    read_chat_template(path, s, tmpl, c.tokenizer);
    s.check_unknown();
    require_file(path, "tokenizer", "path", c.tokenizer.path);
  }
  {
    Section s(path, subtable(path, root, "batch"), "batch");
    c.batch.size = static_cast<uint32_t>(s.integer("size", 4, 1, 65536));
    c.batch.max_length = static_cast<uint32_t>(s.integer("max_length", 2048, 1, 1 << 20));
    std::string pad = s.choice("padding", "longest", {"longest", "max_length", "packed", "padding_free"});
    c.batch.padding = pad == "longest"      ? Padding::kLongest
                      : pad == "max_length" ? Padding::kMaxLength
                      : pad == "packed"     ? Padding::kPacked
                                            : Padding::kPaddingFree;
    c.batch.pack_window = static_cast<uint32_t>(s.integer("pack_window", 1000, 1, 1 << 24));
    c.batch.tokens = static_cast<uint32_t>(s.integer("tokens", c.batch.max_length, 1, 1 << 28));
    if (c.batch.padding == Padding::kPaddingFree && c.batch.tokens < c.batch.max_length)
      s.fail("tokens", fmt::format("{} is below max_length {}: a padding_free row must fit the longest sample",
                                   c.batch.tokens, c.batch.max_length));
    std::string t = s.choice("truncation", "right", {"right", "left", "drop"});
    c.batch.truncation = t == "right"  ? text::Truncation::kRight
                         : t == "left" ? text::Truncation::kLeft
                                       : text::Truncation::kDrop;
    text::parse_loss(s.choice("loss", "all_assistant", {"all_assistant", "last_assistant", "all"}), c.batch.loss);
    c.batch.keep_untrained = s.boolean("keep_untrained", false);
    c.batch.dtype = s.choice("dtype", "int64", {"int64", "int32"}) == "int64" ? shm::Dtype::kInt64 : shm::Dtype::kInt32;
    s.check_unknown();
    if (uint64_t{c.batch.size} * c.batch.max_length > (uint64_t{1} << 28))
      s.fail("size", "size x max_length exceeds 2^28 tokens per batch");
  }
  read_eval(path, root, c);
  {
    Section s(path, subtable(path, root, "schedule"), "schedule");
    c.schedule.epochs = static_cast<uint32_t>(s.integer("epochs", 1, 1, 1'000'000));
    c.schedule.shuffle = s.boolean("shuffle", true);
    c.schedule.seed = static_cast<uint64_t>(s.integer("seed", 42, INT64_MIN, INT64_MAX));
    c.schedule.drop_last = s.boolean("drop_last", false);
    s.check_unknown();
  }
  {
    Section s(path, subtable(path, root, "workers"), "workers");
    c.workers.count = static_cast<uint32_t>(s.integer("count", 2, 1, 256));
    c.workers.slots = static_cast<uint32_t>(s.integer("slots", 4, 1, 1024));
    c.workers.max_crashes = static_cast<uint32_t>(s.integer("max_crashes", 3, 1, 100));
    c.workers.cpus = s.str("cpus", "");
    if (std::vector<int> cpus; !c.workers.cpus.empty() && c.workers.cpus != "auto")
      if (std::string why = parse_cpu_list(c.workers.cpus, cpus); !why.empty())
        s.fail("cpus", why + ": expected \"auto\" or a list such as \"16-23,30\"");
    c.workers.nice = static_cast<int32_t>(s.integer("nice", 0, 0, 19));
    c.workers.batch_policy = s.choice("policy", "other", {"other", "batch"}) == "batch";
    if (const toml::node* m = s.get("max_memory")) {
      double gb = m->is_integer()          ? static_cast<double>(m->as_integer()->get())
                  : m->is_floating_point() ? m->as_floating_point()->get()
                                           : -1;
      if (!(gb >= 0) || !std::isfinite(gb) || gb > 1e9)
        s.fail("max_memory", "expected a number of GB >= 0 per worker, e.g. 4 (0: no cap)");
      c.workers.max_memory = static_cast<uint64_t>(gb * 1e9);
    }
    s.check_unknown();
  }
  {
    Section s(path, subtable(path, root, "ranks"), "ranks");
    c.ranks.world_size = static_cast<uint32_t>(s.integer("world_size", 1, 1, 65536));
    c.ranks.node_rank = static_cast<uint32_t>(s.integer("node_rank", 0, 0, 65535));
    c.ranks.local_ranks = static_cast<uint32_t>(s.integer("local_ranks", 0, 0, 65536));
    const toml::node* serve = s.get("serve");
    if (c.ranks.local_ranks) {
      // torchrun's numbering: global rank = node_rank * local_ranks + local_rank.
      if (serve) s.fail("serve", "set either serve or local_ranks, not both");
      if (c.ranks.world_size % c.ranks.local_ranks)
        s.fail("local_ranks", fmt::format("world_size {} is not a multiple of local_ranks {}", c.ranks.world_size,
                                          c.ranks.local_ranks));
      if (c.ranks.node_rank >= c.ranks.world_size / c.ranks.local_ranks)
        s.fail("node_rank", fmt::format("{} is outside [0, {}) nodes of {} ranks", c.ranks.node_rank,
                                        c.ranks.world_size / c.ranks.local_ranks, c.ranks.local_ranks));
      for (uint32_t l = 0; l < c.ranks.local_ranks; ++l)
        c.ranks.serve.push_back(c.ranks.node_rank * c.ranks.local_ranks + l);
    } else if (c.ranks.node_rank) {
      s.fail("node_rank", "needs local_ranks (the ranks per node)");
    } else if (const toml::node* n = serve) {
      if (!n->is_array()) s.fail("serve", "expected an array of rank numbers");
      for (const auto& el : *n->as_array()) {
        if (!el.is_integer()) s.fail("serve", "expected an array of rank numbers");
        int64_t r = el.as_integer()->get();
        if (r < 0 || r >= c.ranks.world_size)
          s.fail("serve", fmt::format("rank {} is outside [0, world_size={})", r, c.ranks.world_size));
        for (uint32_t x : c.ranks.serve)
          if (x == r) s.fail("serve", fmt::format("rank {} is listed twice", r));
        c.ranks.serve.push_back(static_cast<uint32_t>(r));
      }
      if (c.ranks.serve.empty()) s.fail("serve", "must list at least one rank");
    } else {
      for (uint32_t r = 0; r < c.ranks.world_size; ++r) c.ranks.serve.push_back(r);
    }
    s.check_unknown();
  }
  {
    Section s(path, subtable(path, root, "server"), "server");
    c.server.socket = resolve(path, s.str("socket", c.server.socket));
    c.server.shm_prefix = s.str("shm_prefix", c.server.shm_prefix);
    c.server.shm_dir = s.str("shm_dir", c.server.shm_dir);
    c.server.heartbeat_ms = static_cast<uint32_t>(s.integer("heartbeat_ms", 100, 10, 10000));
    // allow_uids / allow_gids: arrays of numeric ids, each listed once.
    for (auto [key, out] : {std::pair<const char*, std::vector<uint32_t>*>{"allow_uids", &c.server.allow_uids},
                            {"allow_gids", &c.server.allow_gids}}) {
      const toml::node* n = s.get(key);
      if (!n) continue;
      const char* what = "expected an array of numeric ids in [0, 4294967294], e.g. [1001, 1002]";
      if (!n->is_array()) s.fail(key, what);
      for (const auto& el : *n->as_array()) {
        if (!el.is_integer()) s.fail(key, what);
        int64_t id = el.as_integer()->get();
        if (id < 0 || id > 4294967294LL) s.fail(key, fmt::format("{} is out of range: {}", id, what));
        for (uint32_t x : *out)
          if (x == id) s.fail(key, fmt::format("id {} is listed twice", id));
        out->push_back(static_cast<uint32_t>(id));
      }
    }
    if (auto listen = s.opt_str("metrics_listen")) {
      std::string why = parse_listen(*listen, c.server.metrics_host, c.server.metrics_port);
      if (!why.empty()) s.fail("metrics_listen", why);
      c.server.metrics_listen = *listen;
    }
    s.check_unknown();
    if (c.server.shm_prefix.empty() || c.server.shm_prefix.find('/') != std::string::npos)
      s.fail("shm_prefix", "expected a non-empty name without '/'");
    if (c.server.socket.size() >= 100) s.fail("socket", "path too long for a unix socket (max 99 bytes)");
  }
  {
    Section s(path, subtable(path, root, "cache"), "cache");
    c.cache.enabled = s.boolean("enabled", true);
    c.cache.dir = resolve(path, s.str("dir", default_cache_dir()));
    c.cache.group = s.choice("mode", "private", {"private", "group"}) == "group";
    if (const toml::node* m = s.get("max_gb")) {
      if (!m->is_number()) s.fail("max_gb", "expected a number of GB >= 0 (0: no bound)");
      double gb = m->is_integer() ? static_cast<double>(m->as_integer()->get()) : m->as_floating_point()->get();
      if (!(gb >= 0) || !std::isfinite(gb) || gb > 1e9)
        s.fail("max_gb", fmt::format("{} is out of range: expected a number of GB >= 0 (0: no bound)", gb));
      c.cache.max_bytes = static_cast<uint64_t>(gb * 1e9);
    }
    s.check_unknown();
    if (!c.cache.enabled && is_packed(c.batch.padding))
      s.fail("enabled", fmt::format("padding = \"{}\" packs by token counts, which need the token cache; set "
                                    "enabled = true",
                                    padding_name(c.batch.padding)));
    if (c.cache.enabled && c.cache.dir.empty())
      s.fail("dir", "no default cache directory (no $CACHE_DIRECTORY, $XDG_CACHE_HOME or $HOME): set one");
  }
  return c;
}

uint64_t child_memory_cap(const JobConfig& c) {
  if (c.workers.max_memory) return *c.workers.max_memory;
  // Half the node's memory, shared by the workers of every served rank; at
  // least 1 GiB each.
  uint64_t ram = static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  uint64_t children = std::max<uint64_t>(1, uint64_t{c.workers.count} * std::max<std::size_t>(1, c.ranks.serve.size()));
  return std::max<uint64_t>(uint64_t{1} << 30, ram / 2 / children);
}

std::string describe(const JobConfig& c) {
  std::string out;
  auto q = [](const std::string& s) { return "\"" + s + "\""; };
  for (const DatasetConfig& d : c.datasets) {
    if (d.eval) continue;
    out += fmt::format("[[datasets]]\npath = {}\nformat = \"{}\"\non_bad_record = \"{}\"\n", q(d.path),
                       text::format_name(d.format), d.skip_bad ? "skip" : "fail");
    if (d.check_rows == DatasetConfig::CheckRows::kWhenRead) out += "check_rows = \"when_read\"\n";
    if (d.check_rows == DatasetConfig::CheckRows::kStart) out += "check_rows = \"start\"\n";
    if (d.samples) out += fmt::format("samples = {}\n", *d.samples);
    if (d.weight) out += fmt::format("weight = {}\n", *d.weight);
    out += fmt::format("max_record_bytes = {}\n", d.max_record_bytes);
    for (const auto& [k, v] : d.placeholders) out += fmt::format("placeholders.{} = {}\n", q(k), q(v));
    for (const auto& [k, v] : d.columns) out += fmt::format("columns.{} = {}\n", q(k), q(v));
  }
  out += fmt::format("[tokenizer]\ntype = \"{}\"\npath = {}\ntemplate = \"{}\"\n", c.tokenizer.type,
                     q(c.tokenizer.path), c.tokenizer.chat ? "jinja" : text::template_name(c.tokenizer.tmpl));
  if (c.tokenizer.chat) out += fmt::format("chat_template = {}\n", q(c.tokenizer.chat_template));
  if (!c.tokenizer.chat_template_name.empty())
    out += fmt::format("chat_template_name = {}\n", q(c.tokenizer.chat_template_name));
  if (c.tokenizer.default_system) out += fmt::format("default_system = {}\n", q(*c.tokenizer.default_system));
  out += fmt::format(
      "[batch]\nsize = {}\nmax_length = {}\npadding = \"{}\"\ntruncation = \"{}\"\nloss = \"{}\"\nkeep_untrained = {}\n"
      "dtype = \"{}\"\n",
      c.batch.size, c.batch.max_length, padding_name(c.batch.padding), truncation_name(c.batch.truncation),
      text::loss_name(c.batch.loss), c.batch.keep_untrained, c.batch.dtype == shm::Dtype::kInt64 ? "int64" : "int32");
  if (is_packed(c.batch.padding))
    out += fmt::format("pack_window = {}\ntokens = {}\n", c.batch.pack_window, c.batch.tokens);
  out += fmt::format("[schedule]\nepochs = {}\nshuffle = {}\nseed = {}\ndrop_last = {}\n", c.schedule.epochs,
                     c.schedule.shuffle, static_cast<int64_t>(c.schedule.seed), c.schedule.drop_last);
  out += fmt::format("[workers]\ncount = {}\nslots = {}\nmax_crashes = {}\ncpus = {}\nnice = {}\npolicy = \"{}\"\n",
                     c.workers.count, c.workers.slots, c.workers.max_crashes, q(c.workers.cpus), c.workers.nice,
                     c.workers.batch_policy ? "batch" : "other");
  out += fmt::format("max_memory = {}  # GB per worker beyond what it inherits{}\n", child_memory_cap(c) / 1e9,
                     c.workers.max_memory ? "" : " (default: a share of RAM)");
  std::string serve;
  for (uint32_t r : c.ranks.serve) serve += (serve.empty() ? "" : ", ") + std::to_string(r);
  out += fmt::format("[ranks]\nworld_size = {}\nserve = [{}]\n", c.ranks.world_size, serve);
  if (c.ranks.local_ranks)
    out += fmt::format("node_rank = {}\nlocal_ranks = {}\n", c.ranks.node_rank, c.ranks.local_ranks);
  out += fmt::format("[server]\nsocket = {}\nshm_prefix = {}\nshm_dir = {}\nheartbeat_ms = {}\n", q(c.server.socket),
                     q(c.server.shm_prefix), q(c.server.shm_dir), c.server.heartbeat_ms);
  out += fmt::format("allow_uids = [{}]\nallow_gids = [{}]\n", fmt::join(c.server.allow_uids, ", "),
                     fmt::join(c.server.allow_gids, ", "));
  if (!c.server.metrics_listen.empty()) out += fmt::format("metrics_listen = {}\n", q(c.server.metrics_listen));
  out += fmt::format("[cache]\nenabled = {}\ndir = {}\nmax_gb = {}\nmode = \"{}\"\n", c.cache.enabled, q(c.cache.dir),
                     c.cache.max_bytes / 1e9, c.cache.group ? "group" : "private");
  if (c.eval.enabled()) {
    out += fmt::format("[eval]\nsplit_ratio = {}\nbatch_size = {}\nworkers = {}\n", c.eval.split_ratio,
                       c.eval.batch_size, c.eval.workers);
    if (c.batch.padding == Padding::kPaddingFree) out += fmt::format("tokens = {}\n", c.eval.tokens);
    for (const DatasetConfig& d : c.datasets) {
      if (!d.eval) continue;
      out += fmt::format("[[eval.datasets]]\npath = {}\nformat = \"{}\"\non_bad_record = \"{}\"\n", q(d.path),
                         text::format_name(d.format), d.skip_bad ? "skip" : "fail");
      if (d.samples) out += fmt::format("samples = {}\n", *d.samples);
      out += fmt::format("max_record_bytes = {}\n", d.max_record_bytes);
      for (const auto& [k, v] : d.placeholders) out += fmt::format("placeholders.{} = {}\n", q(k), q(v));
      for (const auto& [k, v] : d.columns) out += fmt::format("columns.{} = {}\n", q(k), q(v));
    }
  }
  return out;
}

}  // namespace tokfeed

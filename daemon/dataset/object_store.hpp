// Datasets in an object store (docs/data_model.md 1.1): a dataset path
// `s3://bucket/prefix/*.parquet` names objects that are fetched into
// `[cache] dir/objects/` and then read as local shards: whole, or footer
// first (a Parquet object read while its row groups arrive).
//
// Process model. The AWS SDK under Arrow's S3FileSystem starts threads and
// keeps global state, and is not safe across fork(): a worker forked from a
// process that initialised it inherits locks held by threads that no longer
// exist. The daemon forks its workers, so the supervisor never initialises
// S3. Every object-store call runs in a fetcher: the daemon's own program
// started again through posix_spawn (`tokfeedd --object-fetcher`), a fresh
// process image that initialises S3, lists, fetches and exits. It reports on
// a pipe, one line per event (fetch_objects() reads them); the supervisor
// only maps the files it names once they are complete.
//
// Invariants.
// - A file under `objects/` is complete: the fetcher writes a temporary
//   (`<name>.tmp.<pid>`), checks its size and that the object did not change
//   (its ETag) while it was read, syncs it and renames it. A fetcher that
//   fails or gets SIGTERM removes its temporaries; one killed outright
//   leaves a temporary, which the next fetch of that object removes.
// - Footer first (ObjectFetch's `footers`, check_rows = "when_read"): a
//   Parquet object's temporary is sparse, its footer written first, with a
//   completion map beside it (object_partial.hpp); a row group is read only
//   once the map says it is whole, and the temporary is renamed as above
//   once every group is. The fetch then outlives the planning: the
//   supervisor follows it (Dataset::poll_objects()).
// - An object's file name is a hash of its URL, ETag and size: an object
//   rewritten in the store gets a new file, and a file is reused only for the
//   object it was fetched from.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace tokfeed {

// Where fetching stands, for status (docs/status.md `dataset.objects`).
struct ObjectProgress {
  std::atomic<uint64_t> objects_total{0};
  std::atomic<uint64_t> objects_done{0};    // fetched or found complete in the cache
  std::atomic<uint64_t> objects_reused{0};  // of those, found in the cache
  std::atomic<uint64_t> bytes_total{0};
  std::atomic<uint64_t> bytes_done{0};
  std::atomic<uint64_t> retries{0};
  mutable std::mutex mu;
  std::string current;     // the latest object whose fetch began ("" when none is being fetched)
  std::string last_retry;  // the latest failure that was retried ("" when none)
};

// "fetching objects: 2/4, 12.0/40.0 MB, 1 retries; now s3://..." while an
// object is being fetched, else "".
std::string fetch_line(const ObjectProgress& p);

// One object of a dataset, fetched: its URL and the complete local copy.
struct FetchedObject {
  std::string url;    // s3://bucket/key
  std::string local;  // `[cache] dir/objects/<hash>-<basename>`
  uint64_t size = 0;
};

// Whether `path` names objects in a store (s3://) rather than local files.
bool is_object_url(const std::string& path) noexcept;

// A fetch under way: the objects `url` names, listed, each usable once
// local() returns it, while the others are still fetched (so that a shard is
// indexed while the next ones arrive). Destroying it stops the fetcher.
class ObjectFetch {
 public:
  // Starts the fetcher and waits for its listing (fetch_objects() says what
  // it lists and throws). `footers`: Parquet objects come footer first
  // (object_partial.hpp), readable() before they are complete.
  ObjectFetch(const std::string& name, const std::string& url, const std::string& cache_dir, ObjectProgress* progress,
              const std::atomic<bool>* cancel, bool footers = false);
  ~ObjectFetch();
  ObjectFetch(const ObjectFetch&) = delete;
  ObjectFetch& operator=(const ObjectFetch&) = delete;

  // The objects, sorted; `local` is set once local() returned it.
  const std::vector<FetchedObject>& objects() const;
  // Waits until object `i` is complete in the cache; its file.
  const std::string& local(std::size_t i);

  // Object `i` as it can be read first: its footer written and a completion
  // map beside (`data` the sparse temporary, `map` the map), or complete
  // (`data` and `map` empty). `local` is its file once complete.
  struct Readable {
    std::string local, data, map;
  };
  // Waits until object `i` is readable.
  Readable readable(std::size_t i);

  // Takes what the report says now, without waiting: "" while all is well
  // (or all is done), else why the fetch failed, naming the object (the
  // fetcher's error, or its death). For a fetch that goes on after the
  // daemon planned; status follows it through `progress`.
  std::string poll();
  // Every object is complete.
  bool done() const;

 private:
  struct State;
  std::unique_ptr<State> s_;
};

// The objects `url` names (one object; every object a glob matches, `*` not
// crossing `/`; or every dataset file under a prefix), sorted bytewise,
// each fetched into `cache_dir/objects/` unless a complete copy is there.
// Runs a fetcher process and waits for it; `progress` (may be null) follows
// it, `cancel` (may be null) stops it. Throws DatasetError naming the object
// and what to do when the store cannot be reached after its retries, an
// object or bucket does not exist, credentials are refused, or `cache_dir`
// cannot be written. `name` is the path as the config wrote it.
std::vector<FetchedObject> fetch_objects(const std::string& name, const std::string& url, const std::string& cache_dir,
                                         ObjectProgress* progress, const std::atomic<bool>* cancel);

// The fetcher's entry point: `tokfeedd --object-fetcher CACHE_DIR URL`
// (object_fetcher.cpp). Returns the process's exit code.
int object_fetcher_main(int argc, char** argv);

}  // namespace tokfeed

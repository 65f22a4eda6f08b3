// The fetcher process's state shared by its threads (object_fetcher.cpp):
// the temporaries it writes, removed on every exit but a kill -9; its report
// to the supervisor, one line at a time (object_store.cpp documents the
// lines); and its settings, read from the environment.
#pragma once

#include <cstdint>
#include <string>

namespace tokfeed::fetcher {

// Removes every temporary and exits. No temporary is created meanwhile.
[[noreturn]] void remove_tmps_and_exit(int code);
// One line of the report (its newlines flattened). A supervisor that is gone
// ends the fetcher (its temporaries removed).
void report(const std::string& line);
// Creates the temporary `tmp` (read-write), known to every exit path before
// it exists; -1 with errno when it cannot.
int create_tmp(const std::string& tmp);
// Makes `path` known to every exit path before it is created.
void track(const std::string& path);
// `tmp` was renamed into place, or removed: no exit path removes it.
void kept(const std::string& tmp);
// Removes every temporary, then reports `message` and exits: the supervisor
// that reads the error finds nothing half written. The report waits at most
// 2 s for another line to go out (a supervisor that reads nothing is
// stopping and needs no message).
[[noreturn]] void fail(const std::string& message);

// Objects fetched at once: TOKFEED_OBJECT_STREAMS (default 4).
unsigned streams();
// Whether a key under a prefix names a dataset file.
bool is_dataset_key(const std::string& key);
// How many times a failed request is tried again, and the first wait
// (doubled each time, at most 8 s): TOKFEED_OBJECT_RETRIES (default 6: about
// 30 s of waiting in all) and TOKFEED_OBJECT_BACKOFF_MS (default 500).
int max_retries();
int first_backoff_ms();
// Objects are read in ranged reads of 8 MiB; a failed one is retried alone.
// Test-only fault hook (TOKFEED_FAULT_HOOKS): TOKFEED_FAULT_OBJECT_CHUNK =
// "BYTES:MS" reads BYTES at a time and waits MS after each (chunk_pause()).
int64_t chunk_bytes();
void chunk_pause();
// Test-only fault hook: TOKFEED_FAULT_OBJECT_WANTED_ONLY=1 fetches, footer
// first, only the row groups readers wait for, so an object stays partial
// until every group was read (objects fetched whole are not fetched).
bool wanted_only();

}  // namespace tokfeed::fetcher

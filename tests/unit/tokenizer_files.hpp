// Where the unit tests find a real tokenizer.json: the archives unpacked
// into the build's test data (NAME/ or NAME/NAME/), else ../shared.
#pragma once

#include <filesystem>
#include <string>

namespace tokfeed::test {

// tokenizer.json of tokenizer `name`, or "" where none is present.
inline std::string tokenizer_json(const std::string& name) {
  namespace fs = std::filesystem;
  for (fs::path p : {fs::path(TOKFEED_TEST_BUILD_DATA) / name / "tokenizer.json",
                     fs::path(TOKFEED_TEST_BUILD_DATA) / name / name / "tokenizer.json"})
    if (fs::exists(p)) return p.string();
#ifdef TOKFEED_SHARED_DIR
  fs::path p = fs::path(TOKFEED_SHARED_DIR) / "tokenizers" / name / "tokenizer.json";
  if (fs::exists(p)) return p.string();
#endif
  return "";
}

}  // namespace tokfeed::test

// Tests only: testing/llamacpp_server_counts.txt, llama-server 0.7.0's own timings.draft_n and
// draft_n_accepted for 148 requests of the cycle model at four settings (the file's header says
// how they were measured), read for llamacpp_test.cc and analysis_test.cc.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "specdec/llamacpp.h"

namespace llmtap::specdec::testing {

// testing/llamacpp_server_counts.txt: llama-server 0.7.0's timings for 148 requests of the
// cycle model at four settings (the file's header says how they were made).
struct ServerRequest {
  uint64_t n_predict = 0;
  uint64_t draft_n = 0, draft_n_accepted = 0;
  std::vector<uint32_t> prompt, generated;
};
struct ServerSetting {
  std::string mode;
  LlamacppOptions options;
  std::vector<ServerRequest> requests;
};

inline std::vector<uint32_t> ParseIds(const std::string& line) {
  std::vector<uint32_t> out;
  std::istringstream in(line);
  uint32_t v;
  while (in >> v) out.push_back(v);
  return out;
}

inline std::vector<ServerSetting> LoadServerCounts() {
  const std::filesystem::path path =
      std::filesystem::path(__FILE__).parent_path() / "llamacpp_server_counts.txt";
  std::ifstream in(path);
  EXPECT_TRUE(in) << path;
  std::vector<ServerSetting> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    if (line.rfind("setting ", 0) == 0) {
      std::istringstream s(line.substr(8));
      ServerSetting& st = out.emplace_back();
      s >> st.mode >> st.options.size_n >> st.options.size_m >> st.options.min_hits >>
          st.options.n_ctx;
      st.options.mode = st.mode == "ngram-simple"  ? LlamacppMode::kNgramSimple
                        : st.mode == "ngram-map-k" ? LlamacppMode::kNgramMapK
                                                   : LlamacppMode::kNgramMapK4v;
      EXPECT_EQ(LlamacppModeName(st.options.mode), st.mode);
      continue;
    }
    ServerRequest r;
    std::istringstream s(line);
    s >> r.n_predict >> r.draft_n >> r.draft_n_accepted;
    std::string ids;
    std::getline(in, ids);
    r.prompt = ParseIds(ids);
    std::getline(in, ids);
    r.generated = ParseIds(ids);
    out.back().requests.push_back(std::move(r));
  }
  return out;
}

}  // namespace llmtap::specdec::testing

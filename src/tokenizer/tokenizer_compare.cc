// tokenizer_compare: checks our tokenizer against a reference's ids on a framed corpus
// (tests/node/tokenizer_corpus.mjs, tokenizer_reference.mjs) and times it.
//
//   tokenizer_compare exact SPEC CORPUS IDS      ids must be equal; prints mismatching
//                                                documents (the first few in detail); exit 1
//                                                on any mismatch
//   tokenizer_compare count SPEC CORPUS IDS [MAX_TOTAL MAX_MEAN]
//                                                token-count error only (for "builtin"); with
//                                                bounds (percent), exit 1 when the total error's
//                                                magnitude or the mean per-document error
//                                                exceeds them
//   tokenizer_compare raw SPEC RAW REPLACED      invalid UTF-8: Decode(Encode(raw)) == raw for
//                                                every document, valid documents encode as
//                                                their replaced text does, and pre-tokenized
//                                                pieces line up one to one with the U+FFFD text
//   tokenizer_compare requests SPEC JSONL IDS    EncodeRequest on each chat body vs the ids of
//                                                the reference's own template rendering
//                                                (tokenizer_template.mjs): prompt_tokens
//                                                deviation; exit 1 unless all are equal
//   tokenizer_compare bench SPEC CORPUS [REPS]   single-thread encode throughput (MB/s), best
//                                                of REPS passes, each with a tokenizer loaded
//                                                anew (its caches empty: a pass over the same
//                                                texts would otherwise find them all cached)
//
// Single-threaded; a test and benchmark driver, not part of the llmtap binary.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer.h"

namespace {

using llmtap::tokenizer::Tokenizer;

bool ReadFile(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream s;
  s << in.rdbuf();
  *out = s.str();
  return true;
}

uint32_t U32(const std::string& buf, size_t off) {
  uint32_t v;
  std::memcpy(&v, buf.data() + off, 4);
  return v;
}

bool ReadDocs(const std::string& path, std::string* storage, std::vector<std::string_view>* docs) {
  if (!ReadFile(path, storage)) return false;
  for (size_t off = 0; off + 4 <= storage->size();) {
    uint32_t len = U32(*storage, off);
    if (off + 4 + len > storage->size()) return false;
    docs->emplace_back(storage->data() + off + 4, len);
    off += 4 + len;
  }
  return true;
}

bool ReadIds(const std::string& path, std::vector<std::vector<uint32_t>>* out) {
  std::string buf;
  if (!ReadFile(path, &buf)) return false;
  for (size_t off = 0; off + 4 <= buf.size();) {
    uint32_t n = U32(buf, off);
    off += 4;
    if (off + 4ull * n > buf.size()) return false;
    std::vector<uint32_t> ids(n);
    if (n) std::memcpy(ids.data(), buf.data() + off, 4ull * n);
    off += 4ull * n;
    out->push_back(std::move(ids));
  }
  return true;
}

std::string Printable(std::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    if (c == '\n') {
      out += "\\n";
    } else if (c < 0x20 || c == 0x7F) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02X", c);
      out += b;
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  return out;
}

std::string IdList(const std::vector<uint32_t>& ids, size_t from, size_t n) {
  std::string s;
  for (size_t i = from; i < ids.size() && i < from + n; ++i) s += std::to_string(ids[i]) + " ";
  return s;
}

// `max_total_pct` < 0: no bounds on the count error.
int Exact(const Tokenizer& tok, const std::vector<std::string_view>& docs,
          const std::vector<std::vector<uint32_t>>& ref, bool count_only, double max_total_pct,
          double max_mean_pct) {
  if (docs.size() != ref.size()) {
    std::cerr << "corpus has " << docs.size() << " documents, ids file " << ref.size() << "\n";
    return 2;
  }
  size_t mismatched = 0, reported = 0, ours_total = 0, ref_total = 0, bytes = 0;
  double abs_err_sum = 0;
  std::vector<uint32_t> ids;
  for (size_t d = 0; d < docs.size(); ++d) {
    ids.clear();
    tok.Encode(docs[d], &ids);
    bytes += docs[d].size();
    ours_total += ids.size();
    ref_total += ref[d].size();
    if (!ref[d].empty()) {
      abs_err_sum += std::abs(double(ids.size()) - double(ref[d].size())) / ref[d].size();
    }
    if (count_only || ids == ref[d]) continue;
    ++mismatched;
    if (reported++ < 5) {
      size_t i = 0;
      while (i < ids.size() && i < ref[d].size() && ids[i] == ref[d][i]) ++i;
      std::string ctx = tok.Decode(std::span<const uint32_t>(ref[d]).subspan(
          i >= 3 ? i - 3 : 0, std::min<size_t>(10, ref[d].size() - (i >= 3 ? i - 3 : 0))));
      std::cout << "  doc " << d << ": first difference at token " << i
                << "\n    ours: " << IdList(ids, i >= 3 ? i - 3 : 0, 10)
                << "\n    ref:  " << IdList(ref[d], i >= 3 ? i - 3 : 0, 10) << "\n    text: \""
                << Printable(ctx) << "\"\n";
    }
  }
  double err = ref_total ? 100.0 * (double(ours_total) - double(ref_total)) / ref_total : 0;
  std::cout << tok.Describe() << "\n  corpus: " << docs.size() << " documents, " << bytes
            << " bytes; tokens ours " << ours_total << ", reference " << ref_total << "\n";
  if (count_only) {
    const double mean = 100.0 * abs_err_sum / std::max<size_t>(1, docs.size());
    std::printf("  token count error: total %+.2f%%, mean |per-document| %.2f%%\n", err, mean);
    if (max_total_pct >= 0 && (std::abs(err) > max_total_pct || mean > max_mean_pct)) {
      std::printf("  FAIL: bounds are |total| <= %.1f%%, mean <= %.1f%%\n", max_total_pct,
                  max_mean_pct);
      return 1;
    }
    return 0;
  }
  std::cout << "  mismatching documents: " << mismatched << " of " << docs.size() << "\n";
  return mismatched == 0 ? 0 : 1;
}

int Raw(const Tokenizer& tok, const std::vector<std::string_view>& raw,
        const std::vector<std::string_view>& replaced) {
  if (raw.size() != replaced.size()) return 2;
  size_t invalid_docs = 0, failures = 0;
  std::vector<uint32_t> a, b, ea, eb;
  for (size_t d = 0; d < raw.size(); ++d) {
    a.clear();
    tok.Encode(raw[d], &a);
    if (tok.Decode(a) != raw[d]) {
      if (failures++ < 5) std::cout << "  doc " << d << ": Decode(Encode(raw)) != raw\n";
      continue;
    }
    if (raw[d] == replaced[d]) {
      continue;
    }
    ++invalid_docs;
    // Same piece boundaries as the U+FFFD text: as many pieces (the Qwen pattern is the finest).
    ea.clear();
    eb.clear();
    llmtap::tokenizer::PreTokenize(llmtap::tokenizer::SplitPattern::kQwen2, raw[d], &ea);
    llmtap::tokenizer::PreTokenize(llmtap::tokenizer::SplitPattern::kQwen2, replaced[d], &eb);
    if (ea.size() != eb.size()) {
      if (failures++ < 5) {
        std::cout << "  doc " << d << ": " << ea.size() << " pieces raw, " << eb.size()
                  << " with U+FFFD\n";
      }
    }
  }
  std::cout << tok.Describe() << "\n  raw bytes: " << raw.size() << " documents round-trip, "
            << invalid_docs << " hold invalid UTF-8; failures: " << failures << "\n";
  return failures == 0 ? 0 : 1;
}

int Requests(const Tokenizer& tok, const std::string& jsonl,
             const std::vector<std::vector<uint32_t>>& ref) {
  std::vector<std::string_view> lines;
  for (size_t pos = 0; pos < jsonl.size();) {
    size_t nl = jsonl.find('\n', pos);
    if (nl == std::string::npos) nl = jsonl.size();
    if (nl > pos) lines.emplace_back(jsonl.data() + pos, nl - pos);
    pos = nl + 1;
  }
  if (lines.size() != ref.size()) return 2;
  size_t equal_ids = 0, equal_count = 0, reported = 0;
  double abs_dev = 0, max_dev = 0;
  std::vector<uint32_t> ids;
  std::string error;
  for (size_t i = 0; i < lines.size(); ++i) {
    ids.clear();
    if (!tok.EncodeRequest(lines[i], &ids, &error)) {
      std::cout << "  request " << i << ": " << error << "\n";
      return 1;
    }
    double dev = std::abs(double(ids.size()) - double(ref[i].size()));
    abs_dev += dev / std::max<size_t>(1, ref[i].size());
    max_dev = std::max(max_dev, dev);
    equal_count += dev == 0;
    if (ids == ref[i]) {
      ++equal_ids;
    } else if (reported++ < 3) {
      std::cout << "  request " << i << ": ours " << ids.size() << " tokens, reference "
                << ref[i].size() << "\n    ours: \"" << Printable(tok.Decode(ids))
                << "\"\n    ref:  \"" << Printable(tok.Decode(ref[i])) << "\"\n";
    }
  }
  std::cout << tok.Describe() << "\n  chat requests: " << lines.size() << "; identical ids "
            << equal_ids << ", identical prompt_tokens " << equal_count << "\n";
  std::printf("  prompt_tokens deviation: mean |relative| %.3f%%, max %.0f tokens\n",
              100.0 * abs_dev / std::max<size_t>(1, lines.size()), max_dev);
  return equal_ids == lines.size() ? 0 : 1;
}

int Bench(const std::string& spec, const std::vector<std::string_view>& docs, int reps) {
  size_t bytes = 0, tokens = 0;
  std::vector<uint32_t> ids;
  double best = 1e100;
  std::unique_ptr<Tokenizer> tok;
  for (int r = 0; r < reps; ++r) {
    std::string error;
    tok = Tokenizer::Load(spec, &error);  // new caches (they are per tokenizer)
    if (!tok) {
      std::cerr << error << "\n";
      return 2;
    }
    auto t0 = std::chrono::steady_clock::now();
    bytes = tokens = 0;
    for (auto d : docs) {
      ids.clear();
      tok->Encode(d, &ids);
      bytes += d.size();
      tokens += ids.size();
    }
    best = std::min(best,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::printf("llmtap  %s: %zu bytes, %zu tokens, best of %d: %.3f s, %.1f MB/s\n",
              tok->Describe().c_str(), bytes, tokens, reps, best, bytes / best / 1e6);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::cerr << "usage: tokenizer_compare exact|count|raw|requests|bench SPEC CORPUS "
                 "[IDS|REPLACED|REPS]\n";
    return 2;
  }
  std::string mode = argv[1];
  std::string error;
  auto t0 = std::chrono::steady_clock::now();
  auto tok = Tokenizer::Load(argv[2], &error);
  if (!tok) {
    std::cerr << error << "\n";
    return 2;
  }
  double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (mode == "requests" && argc >= 5) {
    std::string jsonl;
    std::vector<std::vector<uint32_t>> ref;
    if (!ReadFile(argv[3], &jsonl) || !ReadIds(argv[4], &ref)) return 2;
    return Requests(*tok, jsonl, ref);
  }
  std::string storage, storage2;
  std::vector<std::string_view> docs, docs2;
  if (!ReadDocs(argv[3], &storage, &docs)) {
    std::cerr << argv[3] << ": cannot read a framed corpus\n";
    return 2;
  }
  if (mode == "bench") {
    std::printf("llmtap  load %s: %.3f s\n", argv[2], load_s);
    return Bench(argv[2], docs, argc > 4 ? std::atoi(argv[4]) : 3);
  }
  if (argc < 5) return 2;
  if (mode == "raw") {
    if (!ReadDocs(argv[4], &storage2, &docs2)) return 2;
    return Raw(*tok, docs, docs2);
  }
  std::vector<std::vector<uint32_t>> ref;
  if (!ReadIds(argv[4], &ref)) {
    std::cerr << argv[4] << ": cannot read an ids file\n";
    return 2;
  }
  const bool bounded = mode == "count" && argc >= 7;
  return Exact(*tok, docs, ref, mode == "count", bounded ? std::atof(argv[5]) : -1,
               bounded ? std::atof(argv[6]) : -1);
}

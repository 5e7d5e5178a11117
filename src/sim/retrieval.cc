#include "sim/retrieval.h"

#include <algorithm>
#include <cmath>

#include "sim/text.h"

namespace llmtap::sim {

void TextEmbedding(std::string_view text, uint32_t dimensions, uint64_t seed,
                   std::vector<float>* out) {
  out->assign(dimensions, 0.0f);
  std::vector<uint64_t> hashes;
  std::vector<uint32_t> offsets;
  ApproxTokenize(text, &hashes, &offsets);
  if (hashes.empty()) hashes.push_back(HashBytes(text, seed));
  for (uint64_t h : hashes) {
    // Each token adds to three coordinates, with a sign each: fewer collisions at small sizes.
    uint64_t x = HashCombine(h, seed);
    for (int k = 0; k < 3; ++k) {
      x = HashCombine(x, static_cast<uint64_t>(k) + 1);
      (*out)[x % dimensions] += (x >> 63) ? -1.0f : 1.0f;
    }
  }
  double norm = 0;
  for (float v : *out) norm += double{v} * v;
  if (norm == 0) {  // every token cancelled out
    (*out)[HashBytes(text, seed) % dimensions] = 1.0f;
    return;
  }
  const double scale = 1.0 / std::sqrt(norm);
  for (float& v : *out) v = static_cast<float>(v * scale);
}

double Relevance(std::string_view query, std::string_view document, uint64_t seed) {
  std::vector<float> q, d;
  TextEmbedding(query, kDefaultEmbeddingDimensions, seed, &q);
  TextEmbedding(document, kDefaultEmbeddingDimensions, seed, &d);
  double dot = 0;
  for (size_t i = 0; i < q.size(); ++i) dot += double{q[i]} * d[i];
  return std::clamp((1.0 + dot) / 2.0, 0.0, 1.0);
}

}  // namespace llmtap::sim

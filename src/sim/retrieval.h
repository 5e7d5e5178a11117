// What the simulator answers to the embedding and rerank APIs (api/embeddings.h, api/rerank.h):
// deterministic vectors and scores that behave like a real model's in the way a test or a demo
// can see. An input's vector is a hashed bag of its approximate tokens (text.h), made unit
// length, so texts sharing words point the same way; a document's relevance is the cosine of
// its vector with the query's, mapped to [0, 1]. Pure functions, any thread.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace llmtap::sim {

inline constexpr uint32_t kDefaultEmbeddingDimensions = 1024;

// `text`'s unit vector of `dimensions` floats; the same for the same text, dimensions and seed.
void TextEmbedding(std::string_view text, uint32_t dimensions, uint64_t seed,
                   std::vector<float>* out);

// Relevance of `document` to `query`: (1 + cosine) / 2 of their vectors.
double Relevance(std::string_view query, std::string_view document, uint64_t seed);

}  // namespace llmtap::sim

// Keyed, chained block ids for `llmtap anonymize`: a prompt's token ids cut into blocks of
// `block_size` tokens (the last block may be partial), each block named by
//
//   h_-1 = HMAC-SHA256(key, "llmtap-anonymize-v1" || u32le(block_size))
//   h_i  = HMAC-SHA256(key, h_{i-1} || u32le(token) for each token of block i)
//
// so a block's id depends on every token before it (two prompts share id i exactly when they
// share their first i+1 blocks), a partial last block differs from any full block, and
// without the key nothing about the tokens can be recomputed or guessed. KeyedId keeps the
// first 128 bits of each HMAC: collisions are out of reach for any trace.
//
// Threads: BlockKey is immutable after creation and may be shared; a BlockHasher belongs to
// one thread (it holds OpenSSL MAC state); make one per worker from the shared key.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace llmtap::anonymize {

// The first 128 bits of a block's HMAC.
struct KeyedId {
  uint64_t hi = 0;
  uint64_t lo = 0;
  bool operator==(const KeyedId&) const = default;
};

struct KeyedIdHash {
  size_t operator()(const KeyedId& id) const { return static_cast<size_t>(id.hi ^ id.lo); }
};

// The secret behind the ids. Key material is wiped from memory when the object goes away.
class BlockKey {
 public:
  static constexpr size_t kMinBytes = 32;
  static constexpr size_t kMaxBytes = 4096;
  static constexpr size_t kNewKeyBytes = 32;

  ~BlockKey();
  BlockKey(const BlockKey&) = delete;
  BlockKey& operator=(const BlockKey&) = delete;

  // 32 bytes from the OS (getrandom); never written anywhere.
  static std::unique_ptr<BlockKey> Random(Status* status);
  // The whole content of `path` is the key (raw bytes, e.g. `head -c 32 /dev/urandom`, or a
  // hex/base64 string; at least kMinBytes, at most kMaxBytes). Refused when the file is not
  // a regular file or other users may read or write it; a group-readable file is accepted
  // with a warning appended to *warnings.
  static std::unique_ptr<BlockKey> FromFile(const std::string& path, Status* status,
                                            std::vector<std::string>* warnings);
  // Writes kNewKeyBytes random bytes to a new file `path` (0600, never over an existing
  // file, never through a symlink) and returns that key.
  static std::unique_ptr<BlockKey> CreateFile(const std::string& path, Status* status);
  // From bytes (tests).
  static std::unique_ptr<BlockKey> FromBytes(std::string_view bytes);

  std::span<const unsigned char> bytes() const { return {bytes_.data(), bytes_.size()}; }

 private:
  BlockKey() = default;
  std::vector<unsigned char> bytes_;
};

class BlockHasher {
 public:
  // `key` must outlive the hasher.
  explicit BlockHasher(const BlockKey& key);
  ~BlockHasher();
  BlockHasher(const BlockHasher&) = delete;
  BlockHasher& operator=(const BlockHasher&) = delete;

  // Appends ceil(tokens.size() / block_size) ids to *ids. `block_size` > 0.
  void Hash(std::span<const uint32_t> tokens, uint32_t block_size, std::vector<KeyedId>* ids);

  // HMAC(key, "llmtap-anonymize-v1 key fingerprint"): tells keys apart without revealing
  // them (an id map records the fingerprint of the key its ids were made with).
  KeyedId Fingerprint();

  // HMAC(key, "llmtap-anonymize-v1 session id" || 0x00 || id), its first 96 bits as 16
  // base64url characters: what anonymize writes for a row's session_id. Equal ids give equal
  // strings under one key; without the key nothing about the id can be recomputed or guessed,
  // and 96 bits keep distinct ids apart (a collision is expected only past ~2^48 sessions).
  std::string SessionId(std::string_view id);

  // The id written for part `part` (>= 1) of a session whose SessionId is `session_id`: a turn
  // that does not continue its session's previous turn starts a new part (anonymize.h).
  // HMAC(key, "llmtap-anonymize-v1 session part" || 0x00 || u32le(part) || session_id), its
  // first 96 bits as 16 base64url characters.
  std::string SessionPart(std::string_view session_id, uint32_t part);

  // Block `index` of the new content of a session turn written as AIPerf's session turns are
  // read (the turn's new tokens only; anonymize.h): HMAC(key, "llmtap-anonymize-v1 turn" ||
  // 0x00 || `context` (hi then lo, big-endian) || u64le(new_tokens) || u32le(index)), where
  // `context` is the last id of the turn's whole prompt (so it names every token of it). Equal
  // ids: the same whole prompt and the same count of new tokens, so one id always stands for
  // one block length.
  KeyedId TurnBlock(const KeyedId& context, uint64_t new_tokens, uint32_t index);

 private:
  void Mac(const unsigned char* a, size_t a_len, const unsigned char* b, size_t b_len,
           unsigned char out[32]);

  struct State;
  std::unique_ptr<State> state_;
  std::vector<unsigned char> scratch_;  // one block's tokens as little-endian bytes
};

}  // namespace llmtap::anonymize

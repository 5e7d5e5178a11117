// Sha256: incremental SHA-256 (OpenSSL), for the manifest's check of every uploaded object.
// One object per thread.
#pragma once

#include <memory>
#include <string>
#include <string_view>

namespace llmtap::store {

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void Update(std::string_view data);
  // Lower-case hex of the digest; the object starts over.
  std::string HexDigest();

 private:
  void* ctx_;  // EVP_MD_CTX*
};

}  // namespace llmtap::store

#include "anonymize/block_hash.h"

#include <fcntl.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "store/stream.h"

namespace llmtap::anonymize {

namespace {

constexpr char kDomain[] = "llmtap-anonymize-v1";

bool FillRandom(unsigned char* p, size_t n, Status* status) {
  while (n > 0) {
    ssize_t got = ::getrandom(p, n, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      *status = Status::IoError("getrandom failed", errno);
      return false;
    }
    p += got;
    n -= static_cast<size_t>(got);
  }
  return true;
}

void PutU32(uint32_t v, unsigned char* p) {
  p[0] = static_cast<unsigned char>(v);
  p[1] = static_cast<unsigned char>(v >> 8);
  p[2] = static_cast<unsigned char>(v >> 16);
  p[3] = static_cast<unsigned char>(v >> 24);
}

uint64_t GetU64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | p[i];
  return v;
}

// A libcrypto without HMAC-SHA256 is a broken installation, not an input error: there is
// no meaningful way to go on, and silently producing unkeyed ids would be worse.
[[noreturn]] void CryptoFailure(const char* what) {
  std::fprintf(stderr, "llmtap anonymize: OpenSSL %s failed (HMAC-SHA256 unavailable?)\n", what);
  std::abort();
}

}  // namespace

BlockKey::~BlockKey() {
  if (!bytes_.empty()) OPENSSL_cleanse(bytes_.data(), bytes_.size());
}

std::unique_ptr<BlockKey> BlockKey::FromBytes(std::string_view bytes) {
  std::unique_ptr<BlockKey> key(new BlockKey());
  key->bytes_.assign(bytes.begin(), bytes.end());
  return key;
}

std::unique_ptr<BlockKey> BlockKey::Random(Status* status) {
  *status = Status::Ok();
  std::unique_ptr<BlockKey> key(new BlockKey());
  key->bytes_.resize(kNewKeyBytes);
  if (!FillRandom(key->bytes_.data(), key->bytes_.size(), status)) return nullptr;
  return key;
}

std::unique_ptr<BlockKey> BlockKey::FromFile(const std::string& path, Status* status,
                                             std::vector<std::string>* warnings) {
  *status = Status::Ok();
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    *status = err == ENOENT ? Status::NotFound("cannot open key file " + path, err)
                            : Status::IoError("cannot open key file " + path, err);
    return nullptr;
  }
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    *status = Status::InvalidArgument("key file " + path + " is not a regular file");
    return nullptr;
  }
  if ((st.st_mode & (S_IROTH | S_IWOTH)) != 0) {
    ::close(fd);
    *status = Status::Refused("key file " + path +
                              " can be read or written by other users; run `chmod 600 " + path +
                              "` (anyone holding the key can test guesses of the prompts)");
    return nullptr;
  }
  if ((st.st_mode & (S_IRGRP | S_IWGRP)) != 0 && warnings) {
    warnings->push_back("key file " + path + " is readable by its group; chmod 600 is safer");
  }
  std::unique_ptr<BlockKey> key(new BlockKey());
  key->bytes_.resize(kMaxBytes + 1);
  size_t have = 0;
  while (have < key->bytes_.size()) {
    ssize_t n = ::read(fd, key->bytes_.data() + have, key->bytes_.size() - have);
    if (n < 0) {
      if (errno == EINTR) continue;
      *status = Status::IoError("cannot read key file " + path, errno);
      ::close(fd);
      return nullptr;
    }
    if (n == 0) break;
    have += static_cast<size_t>(n);
  }
  ::close(fd);
  if (have < kMinBytes || have > kMaxBytes) {
    *status = Status::InvalidArgument(
        "key file " + path + " holds " +
        (have > kMaxBytes ? "more than 4096" : std::to_string(have)) +
        " bytes; a key is 32 to 4096 bytes (make one with --new-key-file, or `head -c 32 "
        "/dev/urandom > key && chmod 600 key`)");
    return nullptr;
  }
  // The unused tail held no key bytes; shrink so bytes() is exactly the file.
  key->bytes_.resize(have);
  return key;
}

std::unique_ptr<BlockKey> BlockKey::CreateFile(const std::string& path, Status* status) {
  std::unique_ptr<BlockKey> key = Random(status);
  if (!key) return nullptr;
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    int err = errno;
    *status =
        err == EEXIST
            ? Status::Refused("key file " + path + " already exists; use --key-file to reuse it")
            : Status::IoError("cannot create key file " + path, err);
    return nullptr;
  }
  Status written =
      store::WriteToFd(fd, {reinterpret_cast<const char*>(key->bytes_.data()), key->bytes_.size()},
                       "cannot write key file ", path);
  if (!written.ok()) {
    *status = written;
    ::close(fd);
    ::unlink(path.c_str());
    return nullptr;
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    *status = Status::IoError("cannot write key file " + path, errno);
    ::unlink(path.c_str());
    return nullptr;
  }
  return key;
}

struct BlockHasher::State {
  EVP_MAC* mac = nullptr;
  EVP_MAC_CTX* ctx = nullptr;
};

BlockHasher::BlockHasher(const BlockKey& key) : state_(std::make_unique<State>()) {
  state_->mac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
  if (state_->mac == nullptr) CryptoFailure("EVP_MAC_fetch");
  state_->ctx = EVP_MAC_CTX_new(state_->mac);
  if (state_->ctx == nullptr) CryptoFailure("EVP_MAC_CTX_new");
  char digest[] = "SHA256";
  OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                         OSSL_PARAM_construct_end()};
  // Keyed once; every later EVP_MAC_init with a null key restarts from the cached key
  // schedule, which avoids re-deriving the padded key per block.
  if (EVP_MAC_init(state_->ctx, key.bytes().data(), key.bytes().size(), params) != 1) {
    CryptoFailure("EVP_MAC_init");
  }
}

BlockHasher::~BlockHasher() {
  EVP_MAC_CTX_free(state_->ctx);
  EVP_MAC_free(state_->mac);
}

void BlockHasher::Mac(const unsigned char* a, size_t a_len, const unsigned char* b, size_t b_len,
                      unsigned char out[32]) {
  size_t out_len = 0;
  if (EVP_MAC_init(state_->ctx, nullptr, 0, nullptr) != 1 ||
      EVP_MAC_update(state_->ctx, a, a_len) != 1 ||
      (b_len > 0 && EVP_MAC_update(state_->ctx, b, b_len) != 1) ||
      EVP_MAC_final(state_->ctx, out, &out_len, 32) != 1 || out_len != 32) {
    CryptoFailure("HMAC");
  }
}

void BlockHasher::Hash(std::span<const uint32_t> tokens, uint32_t block_size,
                       std::vector<KeyedId>* ids) {
  unsigned char chain[32];
  unsigned char seed[sizeof(kDomain) - 1 + 4];
  std::memcpy(seed, kDomain, sizeof(kDomain) - 1);
  PutU32(block_size, seed + sizeof(kDomain) - 1);
  Mac(seed, sizeof(seed), nullptr, 0, chain);
  scratch_.resize(size_t{block_size} * 4);
  for (size_t begin = 0; begin < tokens.size(); begin += block_size) {
    size_t n = std::min<size_t>(block_size, tokens.size() - begin);
    for (size_t i = 0; i < n; ++i) PutU32(tokens[begin + i], scratch_.data() + 4 * i);
    Mac(chain, sizeof(chain), scratch_.data(), 4 * n, chain);
    ids->push_back({GetU64(chain), GetU64(chain + 8)});
  }
}

KeyedId BlockHasher::Fingerprint() {
  static constexpr std::string_view kWhat = "llmtap-anonymize-v1 key fingerprint";
  unsigned char mac[32];
  Mac(reinterpret_cast<const unsigned char*>(kWhat.data()), kWhat.size(), nullptr, 0, mac);
  return {GetU64(mac), GetU64(mac + 8)};
}

namespace {

// The first 96 bits of `mac` as 16 base64url characters.
std::string Base64Url96(const unsigned char* mac) {
  static constexpr char kBase64Url[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  std::string out(16, '\0');
  for (int group = 0; group < 4; ++group) {  // 12 bytes, 3 at a time
    const unsigned char* b = mac + 3 * group;
    uint32_t v = (uint32_t{b[0]} << 16) | (uint32_t{b[1]} << 8) | b[2];
    for (int i = 0; i < 4; ++i) out[4 * group + i] = kBase64Url[(v >> (18 - 6 * i)) & 63];
  }
  return out;
}

void PutU64(uint64_t v, unsigned char* p) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}

void PutU64BigEndian(uint64_t v, unsigned char* p) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<unsigned char>(v >> (56 - 8 * i));
}

}  // namespace

std::string BlockHasher::SessionId(std::string_view id) {
  // The NUL ends the domain, so no id can make this input equal another domain's.
  static constexpr std::string_view kWhat{"llmtap-anonymize-v1 session id\0", 31};
  unsigned char mac[32];
  Mac(reinterpret_cast<const unsigned char*>(kWhat.data()), kWhat.size(),
      reinterpret_cast<const unsigned char*>(id.data()), id.size(), mac);
  return Base64Url96(mac);
}

std::string BlockHasher::SessionPart(std::string_view session_id, uint32_t part) {
  static constexpr std::string_view kWhat{"llmtap-anonymize-v1 session part\0", 33};
  unsigned char head[kWhat.size() + 4];
  std::memcpy(head, kWhat.data(), kWhat.size());
  PutU32(part, head + kWhat.size());
  unsigned char mac[32];
  Mac(head, sizeof(head), reinterpret_cast<const unsigned char*>(session_id.data()),
      session_id.size(), mac);
  return Base64Url96(mac);
}

KeyedId BlockHasher::TurnBlock(const KeyedId& context, uint64_t new_tokens, uint32_t index) {
  static constexpr std::string_view kWhat{"llmtap-anonymize-v1 turn\0", 25};
  unsigned char head[kWhat.size()];
  std::memcpy(head, kWhat.data(), kWhat.size());
  unsigned char rest[16 + 8 + 4];
  PutU64BigEndian(context.hi, rest);
  PutU64BigEndian(context.lo, rest + 8);
  PutU64(new_tokens, rest + 16);
  PutU32(index, rest + 24);
  unsigned char mac[32];
  Mac(head, sizeof(head), rest, sizeof(rest), mac);
  return {GetU64(mac), GetU64(mac + 8)};
}

}  // namespace llmtap::anonymize

// Block ids: the chaining and keying rules of block_hash.h, checked against OpenSSL's one-shot
// HMAC; key files.
#include "anonymize/block_hash.h"

#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/stat.h>

#include <numeric>
#include <set>

#include "anonymize/id_map.h"
#include "trace/trace_test_util.h"

namespace llmtap::anonymize {
namespace {

using trace::testing::ReadAll;
using trace::testing::TempDir;

const std::string kKeyA(32, 'a');
const std::string kKeyB(32, 'b');

std::vector<KeyedId> Ids(const BlockKey& key, const std::vector<uint32_t>& tokens,
                         uint32_t block_size) {
  BlockHasher hasher(key);
  std::vector<KeyedId> ids;
  hasher.Hash(tokens, block_size, &ids);
  return ids;
}

std::vector<uint32_t> Iota(size_t n, uint32_t first = 1) {
  std::vector<uint32_t> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

// HMAC() one-shot, independent of BlockHasher's EVP_MAC state.
std::string HmacSha256(const std::string& key, const std::string& msg) {
  unsigned char out[32];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(msg.data()), msg.size(), out, &len);
  return std::string(reinterpret_cast<char*>(out), 32);
}

// The documented formula, computed independently with HMAC() one-shot.
std::vector<KeyedId> Reference(const std::string& key, const std::vector<uint32_t>& tokens,
                               uint32_t block_size) {
  auto le = [](uint32_t v, std::string* out) {
    for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  };
  auto hmac = [&](const std::string& msg) { return HmacSha256(key, msg); };
  std::string seed = "llmtap-anonymize-v1";
  le(block_size, &seed);
  std::string chain = hmac(seed);
  std::vector<KeyedId> ids;
  for (size_t b = 0; b < tokens.size(); b += block_size) {
    std::string msg = chain;
    for (size_t i = b; i < std::min(tokens.size(), b + block_size); ++i) le(tokens[i], &msg);
    chain = hmac(msg);
    KeyedId id;
    for (int i = 0; i < 8; ++i) id.hi = (id.hi << 8) | static_cast<unsigned char>(chain[i]);
    for (int i = 8; i < 16; ++i) id.lo = (id.lo << 8) | static_cast<unsigned char>(chain[i]);
    ids.push_back(id);
  }
  return ids;
}

TEST(BlockHash, MatchesTheDocumentedHmacChain) {
  auto key = BlockKey::FromBytes(kKeyA);
  for (size_t n : {0, 1, 4, 5, 17}) {
    EXPECT_EQ(Ids(*key, Iota(n), 4), Reference(kKeyA, Iota(n), 4)) << n;
  }
}

// The documented session id: the first 96 bits of HMAC(key, domain || NUL || id), base64url
// (OpenSSL's base64 with the URL alphabet's two characters).
TEST(BlockHash, SessionIdIsTheDocumentedKeyedHash) {
  auto key_a = BlockKey::FromBytes(kKeyA);
  auto key_b = BlockKey::FromBytes(kKeyB);
  BlockHasher a(*key_a), b(*key_b);
  for (const std::string& id :
       std::vector<std::string>{"alice", "", "conversation-1", std::string("x\0y", 3)}) {
    std::string msg = "llmtap-anonymize-v1 session id";
    msg.push_back('\0');
    msg.append(id);
    std::string mac = HmacSha256(kKeyA, msg);
    unsigned char b64[32];
    EVP_EncodeBlock(b64, reinterpret_cast<const unsigned char*>(mac.data()), 12);
    std::string want(reinterpret_cast<char*>(b64), 16);
    for (char& c : want) c = c == '+' ? '-' : c == '/' ? '_' : c;
    EXPECT_EQ(a.SessionId(id), want) << id;
    EXPECT_NE(b.SessionId(id), want) << "another key, another id";
  }
  // Distinct ids stay distinct (96 bits), and one id is stable under one key.
  std::set<std::string> seen;
  for (int i = 0; i < 100000; ++i) seen.insert(a.SessionId(std::to_string(i)));
  EXPECT_EQ(seen.size(), 100000u);
  EXPECT_EQ(a.SessionId("7"), BlockHasher(*key_a).SessionId("7"));
}

TEST(BlockHash, SessionPartAndTurnBlockAreTheDocumentedKeyedHashes) {
  auto key_a = BlockKey::FromBytes(kKeyA);
  BlockHasher a(*key_a);
  auto b64 = [](const std::string& mac) {
    unsigned char out[32];
    EVP_EncodeBlock(out, reinterpret_cast<const unsigned char*>(mac.data()), 12);
    std::string s(reinterpret_cast<char*>(out), 16);
    for (char& c : s) c = c == '+' ? '-' : c == '/' ? '_' : c;
    return s;
  };
  const std::string sid = a.SessionId("conversation-1");
  for (uint32_t part : {1u, 2u, 300u}) {
    std::string msg = "llmtap-anonymize-v1 session part";
    msg.push_back('\0');
    for (int i = 0; i < 4; ++i) msg.push_back(static_cast<char>((part >> (8 * i)) & 0xff));
    msg += sid;
    EXPECT_EQ(a.SessionPart(sid, part), b64(HmacSha256(kKeyA, msg))) << part;
  }
  EXPECT_NE(a.SessionPart(sid, 1), a.SessionPart(sid, 2));
  EXPECT_NE(a.SessionPart(sid, 1), sid);

  const KeyedId context = Ids(*key_a, Iota(20), 8).back();
  for (uint32_t index : {0u, 1u, 7u}) {
    std::string msg = "llmtap-anonymize-v1 turn";
    msg.push_back('\0');
    for (uint64_t half : {context.hi, context.lo}) {
      for (int i = 7; i >= 0; --i) msg.push_back(static_cast<char>((half >> (8 * i)) & 0xff));
    }
    const uint64_t new_tokens = 1000;
    for (int i = 0; i < 8; ++i) msg.push_back(static_cast<char>((new_tokens >> (8 * i)) & 0xff));
    for (int i = 0; i < 4; ++i) msg.push_back(static_cast<char>((index >> (8 * i)) & 0xff));
    std::string mac = HmacSha256(kKeyA, msg);
    KeyedId want{0, 0};
    for (int i = 0; i < 8; ++i) want.hi = (want.hi << 8) | static_cast<unsigned char>(mac[i]);
    for (int i = 8; i < 16; ++i) want.lo = (want.lo << 8) | static_cast<unsigned char>(mac[i]);
    EXPECT_EQ(a.TurnBlock(context, new_tokens, index), want) << index;
  }
  // One id, one block length: another count of new tokens names other blocks.
  EXPECT_NE(a.TurnBlock(context, 1000, 0), a.TurnBlock(context, 999, 0));
  EXPECT_NE(a.TurnBlock(context, 1000, 0), a.TurnBlock(Ids(*key_a, Iota(21), 8).back(), 1000, 0));
}

TEST(BlockHash, CeilBlocksAndAPartialLastBlockHasItsOwnId) {
  auto key = BlockKey::FromBytes(kKeyA);
  std::vector<KeyedId> ten = Ids(*key, Iota(10), 4);
  std::vector<KeyedId> eight = Ids(*key, Iota(8), 4);
  std::vector<KeyedId> nine = Ids(*key, Iota(9), 4);
  ASSERT_EQ(ten.size(), 3u);
  ASSERT_EQ(eight.size(), 2u);
  ASSERT_EQ(nine.size(), 3u);
  EXPECT_EQ(ten[0], eight[0]);
  EXPECT_EQ(ten[1], eight[1]);
  EXPECT_EQ(nine[1], ten[1]);
  EXPECT_NE(nine[2], ten[2]);  // 1 token vs 2 tokens in the last block
  std::vector<uint32_t> twelve = Iota(12);
  EXPECT_NE(Ids(*key, twelve, 4)[2], ten[2]);  // partial vs full
}

TEST(BlockHash, AnIdDependsOnEveryEarlierToken) {
  auto key = BlockKey::FromBytes(kKeyA);
  std::vector<uint32_t> a = Iota(16), b = a;
  b[0] = 999;
  std::vector<KeyedId> ia = Ids(*key, a, 4), ib = Ids(*key, b, 4);
  for (size_t i = 0; i < ia.size(); ++i) EXPECT_NE(ia[i], ib[i]) << i;
  // Same block contents at a different position: a different id.
  std::vector<uint32_t> rep(8, 7);
  std::vector<KeyedId> ir = Ids(*key, rep, 4);
  EXPECT_NE(ir[0], ir[1]);
}

TEST(BlockHash, DifferentKeysOrBlockSizesGiveUnrelatedIds) {
  auto a = BlockKey::FromBytes(kKeyA);
  auto a2 = BlockKey::FromBytes(kKeyA);
  auto b = BlockKey::FromBytes(kKeyB);
  std::vector<uint32_t> t = Iota(64);
  std::vector<KeyedId> ia = Ids(*a, t, 8), ia2 = Ids(*a2, t, 8), ib = Ids(*b, t, 8);
  EXPECT_EQ(ia, ia2);  // stable: same key bytes, another hasher
  for (const KeyedId& x : ia) {
    for (const KeyedId& y : ib) EXPECT_NE(x, y);
  }
  std::vector<KeyedId> i16 = Ids(*a, t, 16);
  for (const KeyedId& x : i16) {
    for (const KeyedId& y : ia) EXPECT_NE(x, y);
  }
  EXPECT_NE(BlockHasher(*a).Fingerprint(), BlockHasher(*b).Fingerprint());
  EXPECT_EQ(BlockHasher(*a).Fingerprint(), BlockHasher(*a2).Fingerprint());
}

TEST(BlockKey, RandomKeysDiffer) {
  Status s;
  auto k1 = BlockKey::Random(&s);
  ASSERT_TRUE(s.ok());
  auto k2 = BlockKey::Random(&s);
  ASSERT_TRUE(k1 && k2);
  EXPECT_EQ(k1->bytes().size(), 32u);
  EXPECT_FALSE(std::equal(k1->bytes().begin(), k1->bytes().end(), k2->bytes().begin()));
}

TEST(BlockKey, NewKeyFileIs0600ReloadsAndIsNeverOverwritten) {
  TempDir dir;
  std::string path = dir.File("key");
  Status s;
  auto created = BlockKey::CreateFile(path, &s);
  ASSERT_TRUE(created) << s.ToString();
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(ReadAll(path).size(), 32u);
  std::vector<std::string> warnings;
  auto loaded = BlockKey::FromFile(path, &s, &warnings);
  ASSERT_TRUE(loaded) << s.ToString();
  EXPECT_TRUE(warnings.empty());
  EXPECT_TRUE(std::equal(created->bytes().begin(), created->bytes().end(), loaded->bytes().begin(),
                         loaded->bytes().end()));
  EXPECT_FALSE(BlockKey::CreateFile(path, &s));
  EXPECT_EQ(s.code(), Status::Code::kRefused);
  EXPECT_NE(s.message().find("--key-file"), std::string::npos);
}

TEST(BlockKey, KeyFileRules) {
  TempDir dir;
  Status s;
  std::vector<std::string> warnings;
  std::string short_key = dir.Write("short", std::string(31, 'x'));
  ::chmod(short_key.c_str(), 0600);
  EXPECT_FALSE(BlockKey::FromFile(short_key, &s, &warnings));
  EXPECT_NE(s.message().find("31 bytes"), std::string::npos) << s.message();

  std::string open_key = dir.Write("open", std::string(32, 'x'));
  ::chmod(open_key.c_str(), 0644);
  EXPECT_FALSE(BlockKey::FromFile(open_key, &s, &warnings));
  EXPECT_EQ(s.code(), Status::Code::kRefused);
  EXPECT_NE(s.message().find("chmod 600"), std::string::npos);

  ::chmod(open_key.c_str(), 0640);
  EXPECT_TRUE(BlockKey::FromFile(open_key, &s, &warnings)) << s.ToString();
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("group"), std::string::npos);

  EXPECT_FALSE(BlockKey::FromFile(dir.File("missing"), &s, &warnings));
  EXPECT_EQ(s.code(), Status::Code::kNotFound);
  EXPECT_FALSE(BlockKey::FromFile(dir.path(), &s, &warnings));
}

TEST(DenseIds, FirstSeenOrderAndHitsOfThisFileOnly) {
  TempDir dir;
  auto key = BlockKey::FromBytes(kKeyA);
  std::vector<KeyedId> ids = Ids(*key, Iota(12), 4);
  KeyedId fp = BlockHasher(*key).Fingerprint();
  DenseIds d;
  bool hit;
  EXPECT_EQ(d.Get(ids[1], &hit), 0u);
  EXPECT_FALSE(hit);
  EXPECT_EQ(d.Get(ids[0], &hit), 1u);
  EXPECT_EQ(d.Get(ids[1], &hit), 0u);
  EXPECT_TRUE(hit);
  ASSERT_TRUE(d.Save(dir.File("map"), 4, fp).ok());

  DenseIds again;
  bool loaded;
  ASSERT_TRUE(again.Load(dir.File("map"), 4, fp, &loaded).ok());
  EXPECT_TRUE(loaded);
  EXPECT_EQ(again.Get(ids[2], &hit), 2u);
  EXPECT_EQ(again.Get(ids[0], &hit), 1u);
  EXPECT_FALSE(hit);  // known from the map, but new to this file
  EXPECT_EQ(again.unique_in_file(), 2u);

  // Seen without a number (a session turn's captured blocks): a hit later, numbered only
  // when written, and never saved unnumbered.
  EXPECT_FALSE(again.See(ids[1]));
  EXPECT_TRUE(again.See(ids[1]));
  EXPECT_EQ(again.unique_in_file(), 3u);  // ids[1] was in the map, new to this file
  KeyedId fresh = Ids(*key, Iota(5, 100), 4)[0];
  EXPECT_FALSE(again.See(fresh));
  EXPECT_EQ(again.size(), 3u);
  EXPECT_EQ(again.Get(fresh, &hit), 3u);
  EXPECT_TRUE(hit);
  KeyedId written = Ids(*key, Iota(5, 200), 4)[0];
  EXPECT_EQ(again.Number(written), 4u);  // numbered, not seen: no hit, not unique in the file
  EXPECT_EQ(again.unique_in_file(), 4u);
  EXPECT_EQ(again.Number(written), 4u);
  EXPECT_FALSE(again.See(written));

  DenseIds other;
  Status s = other.Load(dir.File("map"), 8, fp, &loaded);
  EXPECT_NE(s.message().find("another key or block size"), std::string::npos) << s.message();
  s = other.Load(dir.File("map"), 4, BlockHasher(*BlockKey::FromBytes(kKeyB)).Fingerprint(),
                 &loaded);
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(other.Load(dir.File("none"), 4, fp, &loaded).ok());
  EXPECT_FALSE(loaded);
}

}  // namespace
}  // namespace llmtap::anonymize

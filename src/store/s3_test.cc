// The S3 client and the byte streams against a real S3 server: Ceph RGW started by
// tests/lib/with_rgw.sh, which sets AWS_* and LLMTAP_TEST_BUCKET.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/testing/temp_files.h"
#include "store/s3_client.h"
#include "store/s3_url.h"
#include "store/stream.h"
#include "store/testing/s3_test_env.h"

namespace llmtap::store {
namespace {

using s3test::Bucket;

class S3Test : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(Bucket().empty()) << "run under tests/lib/with_rgw.sh";
    ASSERT_OK(S3Config::FromEnvironment(&config_));
    client_ = std::make_unique<S3Client>(config_);
    prefix_ = std::string("s3test/") +
              ::testing::UnitTest::GetInstance()->current_test_info()->name() + "/";
  }
  std::string Url(const std::string& name) { return "s3://" + Bucket() + "/" + prefix_ + name; }

  S3Config config_;
  std::unique_ptr<S3Client> client_;
  std::string prefix_;
};

std::string RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

SourceOptions WithPool(S3ClientPool* pool, std::optional<uint64_t> size = std::nullopt) {
  SourceOptions o;
  o.s3_buffer_bytes = 1 << 20;
  o.s3_clients = pool;
  o.s3_size = size;
  return o;
}

std::string ReadAll(const std::string& path, Status* status,
                    const SourceOptions& options = WithPool(nullptr)) {
  std::unique_ptr<ByteSource> source;
  *status = OpenSource(path, &source, options);
  std::string out;
  if (!status->ok()) return out;
  char buf[70000];
  for (;;) {
    size_t n = 0;
    *status = source->Read(buf, sizeof buf, &n);
    if (!status->ok() || n == 0) return out;
    out.append(buf, n);
  }
}

TEST(S3UrlTest, ParsesAndRefuses) {
  S3Url u;
  ASSERT_TRUE(ParseS3Url("s3://my-bucket/a/b.jsonl", &u).ok());
  EXPECT_EQ(u.bucket, "my-bucket");
  EXPECT_EQ(u.key, "a/b.jsonl");
  ASSERT_TRUE(ParseS3Url("s3://my-bucket", &u).ok());
  EXPECT_EQ(u.key, "");
  EXPECT_FALSE(ParseS3Url("s3://ab/x", &u).ok());
  EXPECT_FALSE(ParseS3Url("s3://My_Bucket/x", &u).ok());
  EXPECT_FALSE(ParseS3Url("s3://-bucket/x", &u).ok());
  EXPECT_FALSE(ParseS3Url("s3://bucket//x", &u).ok());
  EXPECT_FALSE(ParseS3Url("http://bucket/x", &u).ok());
  EXPECT_EQ(JoinKey("a/b", "c"), "a/b/c");
  EXPECT_EQ(JoinKey("a/b/", "c"), "a/b/c");
  EXPECT_EQ(JoinKey("", "c"), "c");
  EXPECT_EQ(UriEncode("a b/c+d=é", true), "a%20b%2Fc%2Bd%3D%C3%A9");
  EXPECT_EQ(UriEncode("a b/c", false), "a%20b/c");
}

TEST(S3ConfigTest, MissingCredentialsNameTheVariables) {
  const char* saved = std::getenv("AWS_ACCESS_KEY_ID");
  std::string keep = saved != nullptr ? saved : "";
  unsetenv("AWS_ACCESS_KEY_ID");
  S3Config c;
  Status s = S3Config::FromEnvironment(&c);
  if (saved != nullptr) setenv("AWS_ACCESS_KEY_ID", keep.c_str(), 1);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("AWS_ACCESS_KEY_ID"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("AWS_SECRET_ACCESS_KEY"), std::string::npos) << s.message();
}

TEST(S3ConfigTest, DescribeNeverShowsTheSecret) {
  S3Config c;
  c.access_key = "AKIAEXAMPLEKEY123456";
  c.secret_key = "verysecretvalue";
  const std::string d = c.Describe();
  EXPECT_EQ(d.find("verysecretvalue"), std::string::npos);
  EXPECT_EQ(d.find("AKIAEXAMPLEKEY123456"), std::string::npos);
  EXPECT_NE(d.find("AKIA...3456"), std::string::npos) << d;
}

TEST_F(S3Test, PutHeadGetRangeListDelete) {
  const std::string data = RandomBytes(100000, 1);
  // Keys with characters that must be percent-encoded in the path and in the listing query.
  const std::string key = prefix_ + "dir a/obj+1=x.jsonl";
  ASSERT_OK(client_->PutObject(Bucket(), key, data));
  uint64_t size = 0;
  ASSERT_OK(client_->HeadObject(Bucket(), key, &size));
  EXPECT_EQ(size, data.size());
  std::string whole, range;
  ASSERT_OK(client_->GetObject(Bucket(), key, 0, 0, &whole));
  EXPECT_EQ(whole, data);
  ASSERT_OK(client_->GetObject(Bucket(), key, 1000, 5000, &range));
  EXPECT_EQ(range, data.substr(1000, 5000));
  ASSERT_OK(client_->PutObject(Bucket(), prefix_ + "dir b/other", "x"));
  std::vector<S3Object> objects;
  ASSERT_OK(client_->ListObjects(Bucket(), prefix_ + "dir a/", &objects));
  ASSERT_EQ(objects.size(), 1u);
  EXPECT_EQ(objects[0].key, key);
  EXPECT_EQ(objects[0].size, data.size());
  ASSERT_OK(client_->ListObjects(Bucket(), prefix_, &objects));
  EXPECT_EQ(objects.size(), 2u);
  ASSERT_OK(client_->DeleteObject(Bucket(), key));
  Status s = client_->HeadObject(Bucket(), key, &size);
  EXPECT_EQ(s.code(), Status::Code::kNotFound) << s.ToString();
}

TEST_F(S3Test, ListingFollowsContinuationTokens) {
  // RGW pages at 1000 keys: 1003 objects need two pages.
  for (int i = 0; i < 1003; ++i) {
    ASSERT_OK(client_->PutObject(Bucket(), prefix_ + "k" + std::to_string(i), ""));
  }
  std::vector<S3Object> objects;
  ASSERT_OK(client_->ListObjects(Bucket(), prefix_, &objects));
  EXPECT_EQ(objects.size(), 1003u);
}

TEST_F(S3Test, MultipartUploadCompletesAndAborts) {
  const std::string part1 = RandomBytes(5 << 20, 2);
  const std::string part2 = RandomBytes(1234, 3);
  const std::string key = prefix_ + "big";
  std::string id;
  ASSERT_OK(client_->CreateMultipartUpload(Bucket(), key, &id));
  std::vector<S3Part> parts(2);
  parts[0].number = 1;
  parts[1].number = 2;
  ASSERT_OK(client_->UploadPart(Bucket(), key, id, 1, part1, &parts[0].etag));
  ASSERT_OK(client_->UploadPart(Bucket(), key, id, 2, part2, &parts[1].etag));
  EXPECT_FALSE(parts[0].etag.empty());
  std::vector<S3MultipartUpload> uploads;
  ASSERT_OK(client_->ListMultipartUploads(Bucket(), prefix_, &uploads));
  ASSERT_EQ(uploads.size(), 1u);
  EXPECT_EQ(uploads[0].key, key);
  EXPECT_EQ(uploads[0].upload_id, id);
  ASSERT_OK(client_->CompleteMultipartUpload(Bucket(), key, id, parts));
  std::string got;
  ASSERT_OK(client_->GetObject(Bucket(), key, 0, 0, &got));
  EXPECT_TRUE(got == part1 + part2);

  std::string abandoned;
  ASSERT_OK(client_->CreateMultipartUpload(Bucket(), prefix_ + "abandoned", &abandoned));
  ASSERT_OK(client_->AbortMultipartUpload(Bucket(), prefix_ + "abandoned", abandoned));
  ASSERT_OK(client_->ListMultipartUploads(Bucket(), prefix_, &uploads));
  EXPECT_TRUE(uploads.empty());
}

TEST_F(S3Test, ErrorsNameTheCauseAndTheFix) {
  Status s = client_->HeadBucket("no-such-bucket-here");
  EXPECT_EQ(s.code(), Status::Code::kNotFound) << s.ToString();
  s = client_->PutObject("no-such-bucket-here", "k", "x");
  EXPECT_EQ(s.code(), Status::Code::kNotFound);
  EXPECT_EQ(client_->last_error_code(), "NoSuchBucket");
  EXPECT_NE(
      S3Hint(client_->last_http_status(), client_->last_error_code()).find("create the bucket"),
      std::string::npos);

  S3Config wrong = config_;
  wrong.secret_key = "not-the-secret";
  S3Client bad(wrong);
  s = bad.HeadBucket(Bucket());
  EXPECT_EQ(s.code(), Status::Code::kRefused) << s.ToString();
  EXPECT_EQ(s.message().find("not-the-secret"), std::string::npos);
  s = bad.PutObject(Bucket(), prefix_ + "k", "x");
  EXPECT_EQ(s.code(), Status::Code::kRefused) << s.ToString();
  EXPECT_NE(S3Hint(bad.last_http_status(), bad.last_error_code()).find("AWS_SECRET_ACCESS_KEY"),
            std::string::npos);

  S3Config down = config_;
  down.endpoint = "http://127.0.0.1:1";  // nothing listens on port 1
  S3Client nowhere(down);
  s = nowhere.HeadBucket(Bucket());
  EXPECT_EQ(s.code(), Status::Code::kIoError);
  EXPECT_NE(s.message().find("http://127.0.0.1:1"), std::string::npos) << s.message();
  EXPECT_EQ(nowhere.last_http_status(), 0);
  EXPECT_NE(S3Hint(0, "").find("AWS_ENDPOINT_URL_S3"), std::string::npos);
}

TEST_F(S3Test, CancelFlagStopsCalls) {
  std::atomic<bool> cancel{true};
  client_->set_cancel_flag(&cancel);
  Status s = client_->PutObject(Bucket(), prefix_ + "k", "x");
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("cancelled"), std::string::npos);
  cancel = false;
  EXPECT_TRUE(client_->PutObject(Bucket(), prefix_ + "k", "x").ok());
}

TEST_F(S3Test, SinkAndSourceStreamObjectsInPartsAndRanges) {
  const std::string data = RandomBytes((12 << 20) + 77, 4);
  std::unique_ptr<ByteSink> sink;
  SinkOptions o;
  o.s3_part_bytes = 5 << 20;
  ASSERT_OK(OpenSink(Url("streamed"), &sink, o));
  for (size_t off = 0; off < data.size(); off += 100000) {
    ASSERT_OK(sink->Write(std::string_view(data).substr(off, 100000)));
  }
  ASSERT_OK(sink->Close());
  Status s;
  EXPECT_TRUE(ReadAll(Url("streamed"), &s) == data);
  EXPECT_TRUE(s.ok()) << s.ToString();

  // Never over an existing object unless forced.
  s = OpenSink(Url("streamed"), &sink, o);
  EXPECT_EQ(s.code(), Status::Code::kRefused);
  EXPECT_NE(s.message().find("--force"), std::string::npos);
  o.force = true;
  ASSERT_OK(OpenSink(Url("streamed"), &sink, o));
  ASSERT_OK(sink->Write("small"));
  ASSERT_OK(sink->Close());
  EXPECT_EQ(ReadAll(Url("streamed"), &s), "small");

  // A sink dropped before Close leaves no object and no unfinished upload.
  ASSERT_OK(OpenSink(Url("dropped"), &sink, SinkOptions{.s3_part_bytes = 5 << 20}));
  ASSERT_OK(sink->Write(data));
  sink.reset();
  EXPECT_EQ(client_->HeadObject(Bucket(), prefix_ + "dropped", nullptr).code(),
            Status::Code::kNotFound);
  std::vector<S3MultipartUpload> uploads;
  ASSERT_OK(client_->ListMultipartUploads(Bucket(), prefix_, &uploads));
  EXPECT_TRUE(uploads.empty());

  EXPECT_EQ(ReadAll(Url("missing"), &s), "");
  EXPECT_EQ(s.code(), Status::Code::kNotFound);
  ReadAll("s3://" + Bucket() + "/" + prefix_, &s);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.ToString();
  s = OpenSink("s3://no-such-bucket-here/x.jsonl", &sink);
  EXPECT_EQ(s.code(), Status::Code::kNotFound) << s.ToString();
}

TEST_F(S3Test, SourceReadsAheadThroughASharedPoolAndShowsTheStoredBytes) {
  const std::string data = RandomBytes((3 << 20) + 5, 5);
  ASSERT_OK(client_->PutObject(Bucket(), prefix_ + "a", data));
  ASSERT_OK(client_->PutObject(Bucket(), prefix_ + "empty", ""));
  S3ClientPool pool(config_);
  // Many objects one after another, each in GETs of 100000 bytes through a 64 KiB buffer, with
  // the size given (no HEAD): one connection serves them all.
  for (int i = 0; i < 20; ++i) {
    std::string seen;
    SourceOptions o;
    o.s3_buffer_bytes = 64 << 10;
    o.s3_request_bytes = 100000;
    o.s3_clients = &pool;
    o.s3_size = data.size();
    o.on_stored = [&seen](std::string_view bytes) { seen.append(bytes); };
    Status s;
    EXPECT_TRUE(ReadAll(Url("a"), &s, o) == data) << i;
    EXPECT_TRUE(s.ok()) << s.ToString();
    EXPECT_TRUE(seen == data);
  }
  EXPECT_EQ(pool.clients_made(), 1u);
  // An empty object, and a missing one (NotFound when the first bytes are asked for at open).
  Status s;
  EXPECT_EQ(ReadAll(Url("empty"), &s, WithPool(&pool, 0)), "");
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(ReadAll(Url("missing"), &s, WithPool(&pool, 10)), "");
  EXPECT_EQ(s.code(), Status::Code::kNotFound) << s.ToString();
  // A size that is not the object's (it changed after the listing): an error, not short data.
  SourceOptions longer = WithPool(&pool, data.size() + 10);
  longer.s3_attempts = 1;
  ReadAll(Url("a"), &s, longer);
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(ReadAll(Url("a"), &s, WithPool(&pool, 1000)) == data.substr(0, 1000));
  EXPECT_TRUE(s.ok()) << s.ToString();  // a prefix of the object, as asked
}

TEST_F(S3Test, SourceStopsAtOnceAndResumesAfterAPause) {
  const std::string data = RandomBytes(6 << 20, 6);
  ASSERT_OK(client_->PutObject(Bucket(), prefix_ + "b", data));
  S3ClientPool pool(config_);
  {
    // Dropped after a few bytes: the download stops, the client goes back to the pool.
    std::unique_ptr<ByteSource> source;
    SourceOptions o = WithPool(&pool);
    o.s3_buffer_bytes = 64 << 10;
    ASSERT_OK(OpenSource(Url("b"), &source, o));
    char buf[100];
    size_t n = 0;
    ASSERT_OK(source->Read(buf, sizeof buf, &n));
    EXPECT_GT(n, 0u);
  }
  // A reader that stops reading longer than s3_park_ms: the GET is dropped and resumed where it
  // stopped once the reader makes room; every byte arrives once, in order. After its first read
  // the reader waits until the download has parked (its client is back in the pool: the 1 MiB
  // buffer filled, then 50 ms passed without room), not for a fixed time, which a loaded machine
  // can outlast before the buffer even filled. The object (6 MiB) cannot end meanwhile, so the
  // client comes back only by the park. 120 s: a guard against a hang only.
  std::string seen, got;
  std::unique_ptr<ByteSource> source;
  SourceOptions o = WithPool(&pool);
  o.s3_park_ms = 50;
  o.on_stored = [&seen](std::string_view b) { seen.append(b); };
  ASSERT_OK(OpenSource(Url("b"), &source, o));
  std::vector<char> buf(300000);
  for (int i = 0;; ++i) {
    size_t n = 0;
    ASSERT_OK(source->Read(buf.data(), buf.size(), &n));
    if (n == 0) break;
    got.append(buf.data(), n);
    if (i == 0) {
      // The download holds the pool's one client (the dropped source's, given back at its end)
      // from before the first byte came.
      for (const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(120);
           pool.idle() == 0 && std::chrono::steady_clock::now() < end;) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      ASSERT_EQ(pool.idle(), 1u) << "the download never parked";
    }
  }
  EXPECT_TRUE(got == data);
  EXPECT_TRUE(seen == data);
  EXPECT_EQ(source->stored_position(), data.size());
  EXPECT_GT(pool.leases(), 2u);  // parked and resumed
  EXPECT_EQ(pool.clients_made(), 1u);
}

TEST_F(S3Test, ZstdIsWrittenByNameAndReadByContent) {
  std::string text;
  for (int i = 0; i < 20000; ++i)
    text += R"({"timestamp":)" + std::to_string(i) +
            R"(,"payload":{}})"
            "\n";
  const llmtap::testing::TempDir dir;
  const std::string local = dir.File("t.jsonl.zst");
  for (const std::string& path : {Url("t.jsonl.zst"), local}) {
    std::unique_ptr<ByteSink> sink;
    ASSERT_TRUE(OpenSink(path, &sink, SinkOptions{.force = true}).ok()) << path;
    ASSERT_OK(sink->Write(text));
    ASSERT_OK(sink->Close());
    Status s;
    std::string raw;
    ASSERT_OK(ReadWhole(path, &raw));  // ReadWhole decompresses too
    EXPECT_EQ(raw, text);
    EXPECT_EQ(ReadAll(path, &s), text) << path;
    EXPECT_TRUE(s.ok());
  }
  // A cut zstd file is an error, not a short read.
  std::ifstream in(local, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GT(bytes.size(), 100u);
  const std::string cut = dir.Write("cut.zst", bytes.substr(0, bytes.size() / 2));
  Status s;
  ReadAll(cut, &s);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("truncated"), std::string::npos) << s.ToString();
}

}  // namespace
}  // namespace llmtap::store

// S3Client: the handful of S3 API calls llmtap needs (objects, ranges, listings, multipart
// uploads), over libcurl with its built-in SigV4 signing. Works against AWS S3 (virtual-host
// addressing) and S3-compatible servers such as Ceph RGW or MinIO (path-style addressing
// when an endpoint is given).
//
// Each call is one HTTP request and never retries: the caller owns the retry policy (the
// capture uploader backs off; tools fail fast). Errors come back as Status: 404 -> NotFound,
// 403 -> Refused, anything else (connection, timeout, 5xx) -> IoError. Messages name the
// operation, the s3:// address, the HTTP status and the S3 error code, and never a secret.
//
// One client per thread: it keeps one curl handle whose connections are reused.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace llmtap::store {

struct S3Config {
  // Scheme, host and port of an S3-compatible server ("http://127.0.0.1:7480"); empty means
  // AWS S3 in `region`.
  std::string endpoint;
  std::string region = "us-east-1";
  std::string access_key;
  std::string secret_key;
  std::string session_token;  // empty when none
  // Connection set-up limit, and a transfer slower than 1 KiB/s for low_speed_seconds fails.
  long connect_timeout_ms = 5000;
  long low_speed_seconds = 30;

  // Reads AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_REGION (else
  // AWS_DEFAULT_REGION, else us-east-1) and AWS_ENDPOINT_URL_S3 (else AWS_ENDPOINT_URL).
  // Missing credentials are an error that names the variables to set.
  static Status FromEnvironment(S3Config* config);

  // "endpoint http://127.0.0.1:7480, region us-east-1, access key llmt...key": for logs.
  // Shows the first and last four characters of the access key, never the secret.
  std::string Describe() const;
};

struct S3Object {
  std::string key;
  uint64_t size = 0;
};

struct S3MultipartUpload {
  std::string key;
  std::string upload_id;
};

struct S3Part {
  int number = 0;  // from 1
  std::string etag;
};

class S3Client {
 public:
  explicit S3Client(S3Config config);
  ~S3Client();
  S3Client(const S3Client&) = delete;
  S3Client& operator=(const S3Client&) = delete;

  const S3Config& config() const { return config_; }
  // While `*flag` is true, a call in progress fails at once and new calls fail (for stopping
  // with a deadline). nullptr: never. The flag must outlive the client.
  void set_cancel_flag(const std::atomic<bool>* flag) { cancel_ = flag; }

  // Does the bucket exist and may these credentials use it?
  Status HeadBucket(const std::string& bucket);
  // The object's size; NotFound when there is none.
  Status HeadObject(const std::string& bucket, const std::string& key, uint64_t* size);
  Status PutObject(const std::string& bucket, const std::string& key, std::string_view data);
  Status DeleteObject(const std::string& bucket, const std::string& key);

  // Bytes [offset, offset + length) of the object (to its end when length is 0), handed to
  // `sink` as they arrive; `sink` returns false to stop the transfer (the call then fails).
  Status GetObject(const std::string& bucket, const std::string& key, uint64_t offset,
                   uint64_t length, const std::function<bool(std::string_view)>& sink);
  // The same, appended to `*out`.
  Status GetObject(const std::string& bucket, const std::string& key, uint64_t offset,
                   uint64_t length, std::string* out);

  // Every object whose key starts with `prefix`, in key order (all pages).
  Status ListObjects(const std::string& bucket, const std::string& prefix,
                     std::vector<S3Object>* objects);

  Status CreateMultipartUpload(const std::string& bucket, const std::string& key,
                               std::string* upload_id);
  Status UploadPart(const std::string& bucket, const std::string& key,
                    const std::string& upload_id, int part_number, std::string_view data,
                    std::string* etag);
  Status CompleteMultipartUpload(const std::string& bucket, const std::string& key,
                                 const std::string& upload_id, const std::vector<S3Part>& parts);
  Status AbortMultipartUpload(const std::string& bucket, const std::string& key,
                              const std::string& upload_id);
  // Unfinished multipart uploads under `prefix` (first 1000).
  Status ListMultipartUploads(const std::string& bucket, const std::string& prefix,
                              std::vector<S3MultipartUpload>* uploads);

  // Of the last call: the HTTP status (0 when no response came) and the S3 error code
  // ("NoSuchBucket", "SignatureDoesNotMatch", ...; empty when none).
  long last_http_status() const { return last_http_status_; }
  const std::string& last_error_code() const { return last_error_code_; }

 private:
  struct Request;
  Status Perform(Request& request);
  std::string Url(const std::string& bucket, const std::string& key,
                  const std::string& query) const;

  S3Config config_;
  void* curl_ = nullptr;  // CURL*
  const std::atomic<bool>* cancel_ = nullptr;
  long last_http_status_ = 0;
  std::string last_error_code_;
};

// A one-line hint for an S3 failure seen at start-up, naming what to fix ("check
// AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY", "create the bucket", "check
// AWS_ENDPOINT_URL_S3"); empty when there is nothing specific to say.
std::string S3Hint(long http_status, const std::string& error_code);

}  // namespace llmtap::store

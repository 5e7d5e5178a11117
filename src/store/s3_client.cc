#include "store/s3_client.h"

#include <curl/curl.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "common/markup_escape.h"
#include "store/s3_url.h"

namespace llmtap::store {
namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::string(v) : std::string();
}

void GlobalInit() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

// The raw (undecoded) inside of the next <tag>...</tag> at or after `*pos` (which moves past it).
// False when there is none.
bool NextSpan(std::string_view xml, std::string_view tag, size_t* pos, std::string_view* span) {
  const std::string open = "<" + std::string(tag) + ">";
  const std::string close = "</" + std::string(tag) + ">";
  size_t b = xml.find(open, *pos);
  if (b == std::string_view::npos) return false;
  b += open.size();
  size_t e = xml.find(close, b);
  if (e == std::string_view::npos) return false;
  *pos = e + close.size();
  *span = xml.substr(b, e - b);
  return true;
}

// `raw` with the five XML entities decoded.
std::string XmlDecode(std::string_view raw) {
  static constexpr std::pair<std::string_view, char> kEntities[] = {
      {"&amp;", '&'}, {"&lt;", '<'}, {"&gt;", '>'}, {"&quot;", '"'}, {"&apos;", '\''}};
  std::string value;
  for (size_t i = 0; i < raw.size(); ++i) {
    bool decoded = false;
    for (const auto& [name, c] : kEntities) {
      if (raw[i] == '&' && raw.substr(i).starts_with(name)) {
        value.push_back(c);
        i += name.size() - 1;
        decoded = true;
        break;
      }
    }
    if (!decoded) value.push_back(raw[i]);
  }
  return value;
}

// The decoded text of the first <tag>...</tag> in `xml`; empty when there is none.
std::string FirstTag(std::string_view xml, std::string_view tag) {
  size_t pos = 0;
  std::string_view span;
  return NextSpan(xml, tag, &pos, &span) ? XmlDecode(span) : std::string();
}

}  // namespace

Status S3Config::FromEnvironment(S3Config* config) {
  S3Config c;
  c.access_key = Env("AWS_ACCESS_KEY_ID");
  c.secret_key = Env("AWS_SECRET_ACCESS_KEY");
  c.session_token = Env("AWS_SESSION_TOKEN");
  c.region = Env("AWS_REGION");
  if (c.region.empty()) c.region = Env("AWS_DEFAULT_REGION");
  if (c.region.empty()) c.region = "us-east-1";
  c.endpoint = Env("AWS_ENDPOINT_URL_S3");
  if (c.endpoint.empty()) c.endpoint = Env("AWS_ENDPOINT_URL");
  while (!c.endpoint.empty() && c.endpoint.back() == '/') c.endpoint.pop_back();
  if (!c.endpoint.empty() && !c.endpoint.starts_with("http://") &&
      !c.endpoint.starts_with("https://")) {
    return Status::InvalidArgument("AWS_ENDPOINT_URL_S3/AWS_ENDPOINT_URL '" + c.endpoint +
                                   "' must start with http:// or https://");
  }
  if (c.access_key.empty() || c.secret_key.empty()) {
    return Status::InvalidArgument(
        "no S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and "
        "AWS_ENDPOINT_URL_S3 for an S3-compatible server such as Ceph RGW or MinIO)");
  }
  *config = std::move(c);
  return Status::Ok();
}

std::string S3Config::Describe() const {
  std::string key = access_key.size() > 8
                        ? access_key.substr(0, 4) + "..." + access_key.substr(access_key.size() - 4)
                        : std::string("****");
  return "endpoint " + (endpoint.empty() ? std::string("AWS S3") : endpoint) + ", region " +
         region + ", access key " + key;
}

std::string S3Hint(long http_status, const std::string& error_code) {
  if (error_code == "NoSuchBucket") return "create the bucket, or fix the bucket in upload_url";
  if (error_code == "InvalidAccessKeyId" || error_code == "SignatureDoesNotMatch" ||
      error_code == "AccessDenied" || http_status == 403) {
    return "check AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN, AWS_REGION)";
  }
  if (http_status == 0) {
    return "check that the store is up and that AWS_ENDPOINT_URL_S3 (or AWS_ENDPOINT_URL) "
           "names it";
  }
  if (http_status >= 500) return "the store reports a server error; it will be retried";
  return "";
}

struct S3Client::Request {
  Request(const char* operation, std::string method, std::string bucket, std::string key = "")
      : operation(operation),
        method(std::move(method)),
        bucket(std::move(bucket)),
        key(std::move(key)) {}

  const char* operation;  // for messages
  std::string method;
  std::string bucket;
  std::string key;
  std::string query;  // already sorted and encoded, without '?'
  std::string_view body;
  bool has_body = false;
  std::string content_type;
  const std::function<bool(std::string_view)>* sink = nullptr;  // 2xx body goes here
  std::string range;            // "first-last" or "first-" for a ranged GET
  std::string response;         // other bodies (XML)
  std::string etag;             // response ETag header
  uint64_t content_length = 0;  // response Content-Length header
  size_t body_offset = 0;       // read position in `body`
  bool sink_stopped = false;
  long http_status = 0;
};

S3Client::S3Client(S3Config config) : config_(std::move(config)) {
  GlobalInit();
  curl_ = curl_easy_init();
}

S3Client::~S3Client() {
  if (curl_ != nullptr) curl_easy_cleanup(static_cast<CURL*>(curl_));
}

std::string S3Client::Url(const std::string& bucket, const std::string& key,
                          const std::string& query) const {
  std::string url;
  if (!config_.endpoint.empty()) {
    url = config_.endpoint + "/" + bucket + "/" + UriEncode(key, false);
  } else {
    url = "https://" + bucket + ".s3." + config_.region + ".amazonaws.com/" + UriEncode(key, false);
  }
  if (!query.empty()) url += "?" + query;
  return url;
}

Status S3Client::Perform(Request& r) {
  last_http_status_ = 0;
  last_error_code_.clear();
  CURL* c = static_cast<CURL*>(curl_);
  if (c == nullptr) return Status::IoError("curl_easy_init failed");
  if (cancel_ != nullptr && cancel_->load()) {
    return Status::IoError(std::string("S3 ") + r.operation + " s3://" + r.bucket + "/" + r.key +
                           ": cancelled");
  }
  curl_easy_reset(c);
  if (cancel_ != nullptr) {
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, cancel_);
    curl_easy_setopt(
        c, CURLOPT_XFERINFOFUNCTION,
        +[](void* flag, curl_off_t, curl_off_t, curl_off_t, curl_off_t) -> int {
          return static_cast<const std::atomic<bool>*>(flag)->load() ? 1 : 0;
        });
  }
  const std::string url = Url(r.bucket, r.key, r.query);
  const std::string where = "s3://" + r.bucket + (r.key.empty() ? "" : "/" + r.key);
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, config_.connect_timeout_ms);
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1024L);
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, config_.low_speed_seconds);
  curl_easy_setopt(c, CURLOPT_TCP_NODELAY, 1L);
  if (!r.range.empty()) curl_easy_setopt(c, CURLOPT_RANGE, r.range.c_str());
  const std::string sigv4 = "aws:amz:" + config_.region + ":s3";
  curl_easy_setopt(c, CURLOPT_AWS_SIGV4, sigv4.c_str());
  curl_easy_setopt(c, CURLOPT_USERNAME, config_.access_key.c_str());
  curl_easy_setopt(c, CURLOPT_PASSWORD, config_.secret_key.c_str());

  struct curl_slist* headers = nullptr;
  // RGW refuses a SigV4 request without this header; the payload travels unsigned (TLS or
  // TCP checksums carry its integrity, the manifest's SHA-256 checks it end to end).
  headers = curl_slist_append(headers, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
  // "Expect: 100-continue" stays (curl sends it for bodies over 1 MiB): curl's SigV4 signs an
  // "Expect:" header that suppresses it, then leaves it out of the request, which the server
  // then answers with SignatureDoesNotMatch.
  std::string token_header;
  if (!config_.session_token.empty()) {
    token_header = "x-amz-security-token: " + config_.session_token;
    headers = curl_slist_append(headers, token_header.c_str());
  }
  std::string type_header;
  if (!r.content_type.empty()) {
    type_header = "Content-Type: " + r.content_type;
    headers = curl_slist_append(headers, type_header.c_str());
  }
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);

  if (r.method == "HEAD") {
    curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
  } else if (r.method == "PUT") {
    curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
    // Fewer, larger reads from the body and writes to the socket than the 64 KiB default.
    curl_easy_setopt(c, CURLOPT_UPLOAD_BUFFERSIZE, 1L << 20);
    curl_easy_setopt(c, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(r.body.size()));
    curl_easy_setopt(
        c, CURLOPT_READFUNCTION, +[](char* out, size_t size, size_t count, void* user) -> size_t {
          auto* req = static_cast<Request*>(user);
          size_t n = std::min(size * count, req->body.size() - req->body_offset);
          std::memcpy(out, req->body.data() + req->body_offset, n);
          req->body_offset += n;
          return n;
        });
    curl_easy_setopt(c, CURLOPT_READDATA, &r);
  } else if (r.method == "POST") {
    curl_easy_setopt(c, CURLOPT_POST, 1L);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, r.body.data());
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(r.body.size()));
  } else if (r.method != "GET") {
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, r.method.c_str());
  }
  if (r.sink != nullptr) {
    // A streamed download: fewer, larger reads from the socket and calls of the sink than
    // with curl's 16 KiB default (on a fast store, receiving costs about half as much CPU).
    curl_easy_setopt(c, CURLOPT_BUFFERSIZE, 512L << 10);
  }
  curl_easy_setopt(
      c, CURLOPT_HEADERFUNCTION, +[](char* data, size_t size, size_t count, void* user) -> size_t {
        auto* req = static_cast<Request*>(user);
        const size_t n = size * count;
        std::string_view line(data, n);
        if (line.starts_with("HTTP/")) {
          // A new response (after a redirect or 100 Continue): forget the last one's headers.
          req->etag.clear();
          req->content_length = 0;
          size_t sp = line.find(' ');
          req->http_status = sp == std::string_view::npos ? 0 : std::atol(line.data() + sp + 1);
          return n;
        }
        size_t colon = line.find(':');
        if (colon == std::string_view::npos) return n;
        std::string name(line.substr(0, colon));
        std::transform(name.begin(), name.end(), name.begin(),
                       [](unsigned char ch) { return std::tolower(ch); });
        std::string_view value = line.substr(colon + 1);
        while (!value.empty() && (value.front() == ' ' || value.front() == '\t'))
          value.remove_prefix(1);
        while (!value.empty() &&
               (value.back() == '\r' || value.back() == '\n' || value.back() == ' '))
          value.remove_suffix(1);
        if (name == "etag") req->etag = std::string(value);
        if (name == "content-length")
          req->content_length = std::strtoull(std::string(value).c_str(), nullptr, 10);
        return n;
      });
  curl_easy_setopt(c, CURLOPT_HEADERDATA, &r);
  curl_easy_setopt(
      c, CURLOPT_WRITEFUNCTION, +[](char* data, size_t size, size_t count, void* user) -> size_t {
        auto* req = static_cast<Request*>(user);
        const size_t n = size * count;
        if (req->sink != nullptr && req->http_status >= 200 && req->http_status < 300) {
          if (!(*req->sink)(std::string_view(data, n))) {
            req->sink_stopped = true;
            return 0;  // aborts the transfer
          }
          return n;
        }
        if (req->response.size() < (size_t{1} << 26)) req->response.append(data, n);
        return n;
      });
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &r);
  char errbuf[CURL_ERROR_SIZE] = {};
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);

  CURLcode rc = curl_easy_perform(c);
  curl_slist_free_all(headers);
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.http_status);
  last_http_status_ = rc == CURLE_OK ? r.http_status : 0;
  const std::string op = std::string("S3 ") + r.operation + " " + where;
  if (rc != CURLE_OK) {
    if (r.sink_stopped) return Status::IoError(op + ": stopped by the reader");
    std::string why = errbuf[0] != '\0' ? std::string(errbuf) : curl_easy_strerror(rc);
    const std::string host = config_.endpoint.empty() ? std::string("AWS S3") : config_.endpoint;
    return Status::IoError(op + ": " + why + " (" + host + ")");
  }
  if (r.http_status >= 200 && r.http_status < 300) {
    // CompleteMultipartUpload reports some failures inside a 200 response.
    if (r.response.find("<Error>") != std::string::npos) {
      last_error_code_ = FirstTag(r.response, "Code");
      return Status::IoError(op + ": " + last_error_code_ + " " + FirstTag(r.response, "Message"));
    }
    return Status::Ok();
  }
  last_error_code_ = FirstTag(r.response, "Code");
  std::string msg = op + ": HTTP " + std::to_string(r.http_status);
  if (!last_error_code_.empty()) msg += " " + last_error_code_;
  std::string detail = FirstTag(r.response, "Message");
  if (!detail.empty()) msg += " (" + detail + ")";
  if (r.http_status == 404) return Status::NotFound(msg);
  if (r.http_status == 403) return Status::Refused(msg);
  return Status::IoError(msg);
}

Status S3Client::HeadBucket(const std::string& bucket) {
  Request r("HeadBucket", "HEAD", bucket);
  Status s = Perform(r);
  // A HEAD has no body to carry the error code: name the usual ones by status.
  if (last_error_code_.empty() && r.http_status == 404) last_error_code_ = "NoSuchBucket";
  if (!s.ok() && r.http_status == 404) {
    return Status::NotFound("S3 bucket " + bucket + " does not exist (HTTP 404)");
  }
  return s;
}

Status S3Client::HeadObject(const std::string& bucket, const std::string& key, uint64_t* size) {
  Request r("HeadObject", "HEAD", bucket, key);
  Status s = Perform(r);
  if (s.ok() && size != nullptr) *size = r.content_length;
  return s;
}

Status S3Client::PutObject(const std::string& bucket, const std::string& key,
                           std::string_view data) {
  Request r("PutObject", "PUT", bucket, key);
  r.body = data;
  return Perform(r);
}

Status S3Client::DeleteObject(const std::string& bucket, const std::string& key) {
  Request r("DeleteObject", "DELETE", bucket, key);
  return Perform(r);
}

Status S3Client::GetObject(const std::string& bucket, const std::string& key, uint64_t offset,
                           uint64_t length, const std::function<bool(std::string_view)>& sink) {
  Request r("GetObject", "GET", bucket, key);
  r.sink = &sink;
  if (offset > 0 || length > 0) {
    r.range =
        std::to_string(offset) + "-" + (length > 0 ? std::to_string(offset + length - 1) : "");
  }
  return Perform(r);
}

Status S3Client::GetObject(const std::string& bucket, const std::string& key, uint64_t offset,
                           uint64_t length, std::string* out) {
  std::function<bool(std::string_view)> sink = [out](std::string_view data) {
    out->append(data);
    return true;
  };
  return GetObject(bucket, key, offset, length, sink);
}

Status S3Client::ListObjects(const std::string& bucket, const std::string& prefix,
                             std::vector<S3Object>* objects) {
  objects->clear();
  std::string token;
  for (;;) {
    Request r("ListObjectsV2", "GET", bucket);
    // Sorted by name, values percent-encoded ('/' too), as SigV4's canonical query wants.
    if (!token.empty()) r.query = "continuation-token=" + UriEncode(token, true) + "&";
    r.query += "list-type=2&prefix=" + UriEncode(prefix, true);
    Status s = Perform(r);
    if (!s.ok()) return s;
    size_t pos = 0;
    std::string_view contents;
    while (NextSpan(r.response, "Contents", &pos, &contents)) {
      S3Object o;
      o.key = FirstTag(contents, "Key");
      o.size = std::strtoull(FirstTag(contents, "Size").c_str(), nullptr, 10);
      if (!o.key.empty()) objects->push_back(std::move(o));
    }
    if (FirstTag(r.response, "IsTruncated") != "true") break;
    token = FirstTag(r.response, "NextContinuationToken");
    if (token.empty()) break;
  }
  return Status::Ok();
}

Status S3Client::CreateMultipartUpload(const std::string& bucket, const std::string& key,
                                       std::string* upload_id) {
  Request r("CreateMultipartUpload", "POST", bucket, key);
  r.query = "uploads=";  // signed as "uploads=", which RGW expects (a bare "uploads" is not)
  r.content_type = "application/octet-stream";
  Status s = Perform(r);
  if (!s.ok()) return s;
  *upload_id = FirstTag(r.response, "UploadId");
  if (upload_id->empty()) {
    return Status::IoError("S3 CreateMultipartUpload s3://" + bucket + "/" + key +
                           ": no UploadId in the answer");
  }
  return Status::Ok();
}

Status S3Client::UploadPart(const std::string& bucket, const std::string& key,
                            const std::string& upload_id, int part_number, std::string_view data,
                            std::string* etag) {
  Request r("UploadPart", "PUT", bucket, key);
  r.query = "partNumber=" + std::to_string(part_number) + "&uploadId=" + UriEncode(upload_id, true);
  r.body = data;
  Status s = Perform(r);
  if (s.ok()) *etag = r.etag;
  return s;
}

Status S3Client::CompleteMultipartUpload(const std::string& bucket, const std::string& key,
                                         const std::string& upload_id,
                                         const std::vector<S3Part>& parts) {
  std::string xml = "<CompleteMultipartUpload>";
  for (const S3Part& p : parts) {
    xml += "<Part><PartNumber>" + std::to_string(p.number) + "</PartNumber><ETag>" +
           MarkupEscape(p.etag) + "</ETag></Part>";
  }
  xml += "</CompleteMultipartUpload>";
  Request r("CompleteMultipartUpload", "POST", bucket, key);
  r.query = "uploadId=" + UriEncode(upload_id, true);
  r.body = xml;
  r.content_type = "application/xml";
  return Perform(r);
}

Status S3Client::AbortMultipartUpload(const std::string& bucket, const std::string& key,
                                      const std::string& upload_id) {
  Request r("AbortMultipartUpload", "DELETE", bucket, key);
  r.query = "uploadId=" + UriEncode(upload_id, true);
  return Perform(r);
}

Status S3Client::ListMultipartUploads(const std::string& bucket, const std::string& prefix,
                                      std::vector<S3MultipartUpload>* uploads) {
  uploads->clear();
  Request r("ListMultipartUploads", "GET", bucket);
  r.query = "prefix=" + UriEncode(prefix, true) + "&uploads=";
  Status s = Perform(r);
  if (!s.ok()) return s;
  size_t pos = 0;
  std::string_view upload;
  while (NextSpan(r.response, "Upload", &pos, &upload)) {
    S3MultipartUpload u;
    u.key = FirstTag(upload, "Key");
    u.upload_id = FirstTag(upload, "UploadId");
    if (!u.key.empty() && !u.upload_id.empty()) uploads->push_back(std::move(u));
  }
  return Status::Ok();
}

}  // namespace llmtap::store

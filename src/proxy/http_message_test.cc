// RequestReader: the parsing and framing checks of the request path, without sockets (the
// proxy's HTTP/1.1 message code, http_message.h). Moved from server_test.cc unchanged.
#include "proxy/http_message.h"

#include <cstdint>
#include <string>
#include <string_view>

#include <gtest/gtest.h>
#include <boost/asio/buffer.hpp>
#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/core/flat_buffer.hpp>

namespace llmtap::proxy {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;

struct ReadResult {
  RequestReader::State state = RequestReader::State::kNeedMore;
  int status = 0;    // the rejection's, when rejected
  std::string head;  // the upstream head, when done
  std::string body;  // when done
  std::string rest;  // bytes left in the buffer
};

// Feeds `bytes` to a fresh reader `piece` bytes at a time (0: all at once).
ReadResult ReadRequest(std::string_view bytes, size_t piece = 0, uint32_t max_header = 1024,
                       uint64_t max_body = 1024) {
  RequestReader reader;
  reader.Begin(max_header, max_body);
  beast::flat_buffer buffer;
  ReadResult r;
  if (piece == 0) piece = bytes.size();
  for (size_t at = 0; r.state == RequestReader::State::kNeedMore && at < bytes.size();
       at += piece) {
    const std::string_view p = bytes.substr(at, piece);
    buffer.commit(asio::buffer_copy(buffer.prepare(p.size()), asio::buffer(p.data(), p.size())));
    r.state = reader.Feed(buffer);
  }
  if (r.state == RequestReader::State::kRejected) r.status = reader.rejection().status;
  if (r.state == RequestReader::State::kDone) {
    reader.BuildUpstreamHead("up:1", &r.head);
    r.body = reader.request().body;
  }
  r.rest = beast::buffers_to_string(buffer.data());
  return r;
}

std::string Post(const std::string& fields, const std::string& body) {
  return "POST /v1/x HTTP/1.1\r\nHost: h\r\n" + fields + "\r\n" + body;
}

TEST(RequestReaderTest, ForwardsOneContentLengthAndNoHopByHopFields) {
  const ReadResult r =
      ReadRequest(Post("Transfer-Encoding: chunked\r\nConnection: keep-alive, X-Hop\r\nX-Hop: 1\r\n"
                       "TE: trailers\r\nExpect: 100-continue\r\nX-End: 2\r\n",
                       "3;a=b\r\nabc\r\n2\r\nde\r\n0\r\n\r\nGET /next"));
  ASSERT_EQ(r.state, RequestReader::State::kDone);
  EXPECT_EQ(r.head, "POST /v1/x HTTP/1.1\r\nX-End: 2\r\nHost: up:1\r\nContent-Length: 5\r\n\r\n");
  EXPECT_EQ(r.body, "abcde");
  EXPECT_EQ(r.rest, "GET /next");
}

TEST(RequestReaderTest, RefusesTransferEncodingOtherThanChunked) {
  for (const auto& [te, status] :
       std::vector<std::pair<std::string, int>>{{"gzip", 400},
                                                {"xchunked", 400},
                                                {"identity", 400},
                                                {"chunked, identity", 400},
                                                {"chunked;q=1", 400},
                                                {"gzip, chunked", 501},
                                                {"GZIP ,  Chunked", 501}}) {
    SCOPED_TRACE(te);
    EXPECT_EQ(ReadRequest(Post("Transfer-Encoding: " + te + "\r\n", "0\r\n\r\n")).status, status);
  }
  // Any case, surrounding whitespace: accepted.
  EXPECT_EQ(ReadRequest(Post("Transfer-Encoding:  ChUnKeD \r\n", "0\r\n\r\n")).state,
            RequestReader::State::kDone);
  // With Content-Length, in either order, or a second Transfer-Encoding: 400.
  for (const char* fields : {"Transfer-Encoding: gzip\r\nContent-Length: 5\r\n",
                             "Content-Length: 5\r\nTransfer-Encoding: gzip\r\n",
                             "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n",
                             "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n",
                             "Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n",
                             "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n"}) {
    SCOPED_TRACE(fields);
    EXPECT_EQ(ReadRequest(Post(fields, "0\r\n\r\n")).status, 400);
  }
}

TEST(RequestReaderTest, RefusesTransferEncodingInHttp10) {
  EXPECT_EQ(ReadRequest("POST /a HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n").status,
            400);
}

TEST(RequestReaderTest, NeedsExactlyOneHostInHttp11) {
  EXPECT_EQ(ReadRequest("GET / HTTP/1.1\r\n\r\n").status, 400);
  EXPECT_EQ(ReadRequest("GET / HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n").status, 400);
  EXPECT_EQ(ReadRequest("GET / HTTP/1.0\r\nHost: a\r\nHost: b\r\n\r\n").status, 400);
  EXPECT_EQ(ReadRequest("GET / HTTP/1.0\r\n\r\n").state, RequestReader::State::kDone);
}

TEST(RequestReaderTest, DropsTrailerFields) {
  const ReadResult r =
      ReadRequest(Post("Transfer-Encoding: chunked\r\n",
                       "5\r\nhello\r\n0\r\nX-Injected: yes\r\nAuthorization: Bearer x\r\n\r\n"));
  ASSERT_EQ(r.state, RequestReader::State::kDone);
  EXPECT_EQ(r.body, "hello");
  EXPECT_EQ(r.head.find("X-Injected"), std::string::npos) << r.head;
  EXPECT_EQ(r.head.find("Authorization"), std::string::npos) << r.head;
}

TEST(RequestReaderTest, BadChunkFramingIs400) {
  for (const char* chunks :
       {"zz\r\nhello\r\n0\r\n\r\n", "-5\r\nhello\r\n0\r\n\r\n", "5\r\nhelloXX0\r\n\r\n",
        "5;\x01\r\nhello\r\n0\r\n\r\n", "5\r\nhello\r\n0\r\nContent-Length: 50\r\n\r\n",
        "5\r\nhello\r\n0\r\nGET / HTTP/1.1\r\n\r\n"}) {
    SCOPED_TRACE(chunks);
    EXPECT_EQ(ReadRequest(Post("Transfer-Encoding: chunked\r\n", chunks)).status, 400);
  }
  EXPECT_EQ(ReadRequest(Post("Transfer-Encoding: chunked\r\n", "FFFFFFFF\r\nab")).status, 413);
}

TEST(RequestReaderTest, ChunkExtensionsAndTrailersCountTowardTheHeaderLimit) {
  const std::string te = "Transfer-Encoding: chunked\r\n";
  // One extension longer than max_header_bytes (1024 here): refused once that much is
  // buffered, whole or a byte at a time, without waiting for its end.
  const std::string long_ext = "5;e=" + std::string(2000, 'e');
  for (size_t piece : {size_t{0}, size_t{1}, size_t{100}}) {
    SCOPED_TRACE(piece);
    const ReadResult r = ReadRequest(Post(te, long_ext), piece);
    EXPECT_EQ(r.status, 400);
    if (piece > 0) {
      EXPECT_LE(r.rest.size(), 1024u + piece);
    }
  }
  // Short extensions that add up past the limit.
  std::string many;
  for (int i = 0; i < 20; ++i) many += "1;e=" + std::string(60, 'e') + "\r\nx\r\n";
  EXPECT_EQ(ReadRequest(Post(te, many + "0\r\n\r\n")).status, 400);
  // A trailer section past the limit.
  EXPECT_EQ(ReadRequest(Post(te, "0\r\nX-T: " + std::string(2000, 't') + "\r\n\r\n"), 7).status,
            400);
  // Under the limit: fine.
  EXPECT_EQ(ReadRequest(Post(te, "1;e=" + std::string(500, 'e') + "\r\nx\r\n0\r\n\r\n")).state,
            RequestReader::State::kDone);
}

TEST(RequestReaderTest, SameResultWholeOrByteByByte) {
  const std::string req = Post("Transfer-Encoding: chunked\r\n",
                               "3\r\nabc\r\n10;x=\"y\"\r\n0123456789abcdef\r\n0\r\n\r\n");
  const ReadResult whole = ReadRequest(req);
  const ReadResult bytes = ReadRequest(req, 1);
  ASSERT_EQ(whole.state, RequestReader::State::kDone);
  EXPECT_EQ(bytes.state, whole.state);
  EXPECT_EQ(bytes.head, whole.head);
  EXPECT_EQ(bytes.body, "abc0123456789abcdef");
}

// Found by fuzz/http_request_fuzz (its corpus keeps the inputs): Beast bounds only what is
// left of the head after the fields it consumed, so a head over the limit passed when it came
// in one read and failed when it came in pieces.
TEST(RequestReaderTest, HeadLimitCountsTheWholeHeadHoweverItArrives) {
  auto head = [](size_t n) {
    return "GET /p HTTP/1.1\r\nHost: x\r\nX-A: " + std::string(n, 'a') + "\r\n\r\n";
  };
  const std::string at = head(29);
  const std::string over = head(30);
  ASSERT_EQ(at.size(), 64u);
  for (size_t piece : {size_t{0}, size_t{1}, size_t{3}}) {
    SCOPED_TRACE(piece);
    EXPECT_EQ(ReadRequest(over, piece, 64).status, 400);
    EXPECT_EQ(ReadRequest(at, piece, 64).state, RequestReader::State::kDone);
  }
}

// Found by the fuzzer: a head over the limit with "Transfer-Encoding: gzip, chunked" in its
// first part was refused 501 when it came in one read (Beast parses the fields it has before it
// waits for the head's end) and 400 in pieces. Transfer-Encoding is judged with the whole head.
TEST(RequestReaderTest, TransferEncodingIsJudgedOnceTheHeadIsWhole) {
  const std::string req =
      "POST /p HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\nX-A: " +
      std::string(40, 'a') + "\r\n\r\n0\r\n\r\n";
  for (size_t piece : {size_t{0}, size_t{1}, size_t{14}}) {
    SCOPED_TRACE(piece);
    EXPECT_EQ(ReadRequest(req, piece, 64).status, 400);
    EXPECT_EQ(ReadRequest(req, piece, 1024).status, 501);
  }
}

// Also found by the fuzzer: Beast 1.74 takes a chunk's size off the body limit each time it
// retries a chunk line whose extensions are incomplete, so a line arriving in pieces was
// refused 413 after a few reads.
TEST(RequestReaderTest, ChunkSizeCountsOnceWhileItsLineArrivesInPieces) {
  const std::string req =
      Post("Transfer-Encoding: chunked\r\n", "6;c=\"\r\n" + std::string(30, 'a'));
  EXPECT_EQ(ReadRequest(req, 3, 1024, 16).state, RequestReader::State::kNeedMore);
  EXPECT_EQ(ReadRequest(req, 0, 1024, 16).state, RequestReader::State::kNeedMore);
  const std::string ok = Post("Transfer-Encoding: chunked\r\n", "6;c=\"d\"\r\nabcdef\r\n0\r\n\r\n");
  EXPECT_EQ(ReadRequest(ok, 1, 1024, 6).state, RequestReader::State::kDone);
  EXPECT_EQ(ReadRequest(ok, 1, 1024, 5).status, 413);
}

}  // namespace
}  // namespace llmtap::proxy

// The shared text/event-stream framer (net/sse.h): the WHATWG line and field rules, chunk
// boundaries anywhere, and the replay's old "\n"-only parser as a reference where they agree.
#include "net/sse.h"

#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

namespace llmtap::net {
namespace {

// Every event of `stream`, fed cut at every position (two pieces), then byte by byte; all must
// agree with the whole stream fed at once.
std::vector<std::string> Events(std::string_view stream, bool* pending = nullptr) {
  SseEventReader whole;
  std::vector<std::string> events;
  whole.Feed(stream, [&](std::string_view d) { events.emplace_back(d); });
  for (size_t cut = 0; cut <= stream.size(); ++cut) {
    SseEventReader r;
    std::vector<std::string> got;
    auto on = [&](std::string_view d) { got.emplace_back(d); };
    r.Feed(stream.substr(0, cut), on);
    r.Feed(stream.substr(cut), on);
    EXPECT_EQ(got, events) << "cut at " << cut;
    EXPECT_EQ(r.pending(), whole.pending()) << "cut at " << cut;
  }
  SseEventReader bytes;
  std::vector<std::string> got;
  for (char c : stream) {
    bytes.Feed(std::string_view(&c, 1), [&](std::string_view d) { got.emplace_back(d); });
  }
  EXPECT_EQ(got, events) << "byte by byte";
  if (pending) *pending = whole.pending();
  return events;
}

using V = std::vector<std::string>;

TEST(SseEventReader, WhatwgRules) {
  struct Case {
    const char* name;
    std::string stream;
    V want;
    bool pending;
  } cases[] = {
      {"lf", "data: a\n\ndata: b\n\n", {"a", "b"}, false},
      {"crlf", "data: a\r\n\r\ndata: b\r\n\r\n", {"a", "b"}, false},
      {"cr only", "data: a\r\rdata: b\r\r", {"a", "b"}, false},
      {"mixed", "data: a\r\ndata: b\rdata: c\n\r\n", {"a\nb\nc"}, false},
      {"lines joined", "data: l1\ndata: l2\ndata: l3\n\n", {"l1\nl2\nl3"}, false},
      {"one space removed", "data:  two\ndata:none\n\n", {" two\nnone"}, false},
      {"no colon: empty data", "data\n\n", {""}, false},
      {"no colon joins", "data\ndata: x\n\n", {"\nx"}, false},
      {"empty value", "data:\n\n", {""}, false},
      {"comments", ": hi\n:\ndata: a\n: mid\n\n", {"a"}, false},
      {"other fields ignored", "event: x\nid: 7\nretry: 10\ndata: a\n\n", {"a"}, false},
      {"no data: no event", "event: x\n\n: ping\n\n", {}, false},
      {"field name exact", "datas: x\ndat: y\nDATA: z\n\n", {}, false},
      {"colon in value", "data: a:b\n\n", {"a:b"}, false},
      {"bom dropped",
       "\xEF\xBB\xBF"
       "data: a\n\n",
       {"a"},
       false},
      {"bom once",
       "\xEF\xBB\xBF\xEF\xBB\xBF"
       "data: a\n\ndata: b\n\n",
       {"b"},
       false},
      {"partial bom",
       "\xEF\xBB"
       "data: a\n\ndata: b\n\n",
       {"b"},
       false},
      {"unterminated event", "data: a\n\ndata: b\n", {"a"}, true},
      {"partial line", "data: a\n\ndata: b", {"a"}, true},
      {"trailing cr ends line", "data: a\r", {}, true},
      {"blank lines only", "\n\r\n\r\n", {}, false},
      {"empty", "", {}, false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    bool pending = false;
    EXPECT_EQ(Events(c.stream, &pending), c.want);
    EXPECT_EQ(pending, c.pending);
  }
}

// The "\n"-only parser the replay had before it shared this one (src/replay/response.h): on
// streams that end lines in "\n" or "\r\n", have no BOM and no data field without a colon, the
// two agree.
std::vector<std::string> OldReplayEvents(std::string_view bytes) {
  std::vector<std::string> events;
  std::string data;
  bool has_data = false;
  while (!bytes.empty()) {
    size_t nl = bytes.find('\n');
    if (nl == std::string_view::npos) break;
    std::string_view line = bytes.substr(0, nl);
    bytes.remove_prefix(nl + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) {
      if (has_data) events.push_back(data);
      data.clear();
      has_data = false;
    } else if (line.starts_with("data:")) {
      line.remove_prefix(5);
      if (!line.empty() && line.front() == ' ') line.remove_prefix(1);
      if (has_data) data.push_back('\n');
      data.append(line);
      has_data = true;
    }
  }
  return events;
}

TEST(SseEventReader, AgreesWithOldReplayParserOnLineFeedStreams) {
  for (const std::string& s : {
           std::string(": c\r\ndata: {\"a\":1}\r\n\r\ndata:{\"b\":2}\n\nevent: x\ndata: l1\n"
                       "data: l2\n\ndata: [DONE]\n\n"),
           std::string("data: x\n\n\n\ndata:\n\ndata:  y\ndata: z\n\nid: 1\n\n"),
           std::string("retry: 5\r\ndata: a\r\n\r\ndata: b\r\n"),
       }) {
    EXPECT_EQ(Events(s), OldReplayEvents(s)) << s;
  }
  // Where they differ: "\r" alone ends a line now (the old parser saw no event at all).
  EXPECT_EQ(OldReplayEvents("data: a\r\rdata: b\r\r"), V{});
  EXPECT_EQ(Events("data: a\r\rdata: b\r\r"), (V{"a", "b"}));
}

// A framer handler sees data bytes in place, split where the input was split, never a line end.
TEST(SseFramer, StreamsDataPieces) {
  struct Sink {
    std::string log;
    void OnDataLine(bool first) { log += first ? "[" : "|"; }
    void OnData(const char* b, const char* e) { log.append(b, e).push_back('.'); }
    void OnEventEnd() { log += "]"; }
  } sink;
  SseFramer f;
  for (std::string_view piece : {"data: ab", "cd\r", "\ndata:e\r", "\r: x\n"}) {
    f.Feed(piece.data(), piece.data() + piece.size(), sink);
  }
  EXPECT_EQ(sink.log, "[ab.cd.|e.]");
  EXPECT_FALSE(f.pending());
}

TEST(SseTest, EventsSplitAnywhere) {
  const std::string stream =
      ": comment\r\ndata: {\"a\":1}\r\n\r\ndata:{\"b\":2}\n\nevent: x\ndata: l1\ndata: l2\n\n"
      "data: [DONE]\n\n";
  for (size_t cut = 0; cut <= stream.size(); ++cut) {
    SseEventReader p;
    std::vector<std::string> events;
    auto on = [&](std::string_view d) { events.emplace_back(d); };
    p.Feed(std::string_view(stream).substr(0, cut), on);
    p.Feed(std::string_view(stream).substr(cut), on);
    ASSERT_EQ(events.size(), 4u) << cut;
    EXPECT_EQ(events[0], "{\"a\":1}");
    EXPECT_EQ(events[1], "{\"b\":2}");
    EXPECT_EQ(events[2], "l1\nl2");
    EXPECT_EQ(events[3], "[DONE]");
    EXPECT_FALSE(p.pending());
  }
}

}  // namespace
}  // namespace llmtap::net

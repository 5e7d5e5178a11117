// Reader, record helpers and validate.
#include <gtest/gtest.h>

#include <cctype>
#include <memory>
#include <string>
#include <vector>

#include "store/stream.h"
#include "trace/line_reader.h"
#include "trace/record.h"
#include "trace/trace_test_util.h"
#include "trace/validate.h"

namespace llmtap::trace {
namespace {

using testing::TempDir;

std::vector<Line> ReadLines(const std::string& path, std::vector<std::string>* copies,
                            size_t chunk = LineReader::kDefaultChunkBytes) {
  LineReader reader(chunk);
  EXPECT_TRUE(reader.Open(path).ok());
  std::vector<Line> out;
  Line line;
  while (reader.Next(&line)) {
    copies->emplace_back(line.bytes);
    out.push_back(line);
  }
  EXPECT_TRUE(reader.status().ok());
  return out;
}

TEST(LineReader, SplitsLinesCrlfAndTornTail) {
  TempDir dir;
  std::string p = dir.Write("a.jsonl", "{\"a\":1}\n\r\n{\"b\":2}\r\n\n{\"c\":");
  std::vector<std::string> text;
  std::vector<Line> lines = ReadLines(p, &text);
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_EQ(text[0], "{\"a\":1}");
  EXPECT_EQ(text[1], "");
  EXPECT_TRUE(lines[1].crlf);
  EXPECT_EQ(text[2], "{\"b\":2}");
  EXPECT_TRUE(lines[2].crlf);
  EXPECT_EQ(text[3], "");
  EXPECT_EQ(text[4], "{\"c\":");
  EXPECT_TRUE(lines[4].torn);
  EXPECT_FALSE(lines[3].torn);
  EXPECT_EQ(lines[4].number, 5u);
}

TEST(LineReader, LinesLongerThanTheChunkAndChunkBoundaries) {
  TempDir dir;
  std::string content;
  std::vector<std::string> want;
  for (int i = 0; i < 300; ++i) {
    std::string l = "{\"k\":\"" + std::string(static_cast<size_t>(i * 97 % 20000), 'x') + "\"}";
    want.push_back(l);
    content += l + "\n";
  }
  std::string p = dir.Write("b.jsonl", content);
  std::vector<std::string> text;
  ReadLines(p, &text, 4096);
  EXPECT_EQ(text, want);
}

// The same rules over zstd data (the uploader's settings), read in small pieces: every line,
// CRLF and the torn tail as in a plain file; the hook sees the stored (compressed) bytes once;
// complete lines are counted; the counts outlive Close.
TEST(LineReader, ZstdLinesAndTheStoredBytes) {
  TempDir dir;
  std::string text;
  std::vector<std::string> want;
  for (int i = 0; i < 3000; ++i) {
    std::string l = "{\"timestamp\":" + std::to_string(i) + ",\"p\":\"" +
                    std::string(static_cast<size_t>(i * 131 % 9000), 'a' + i % 26) + "\"}";
    want.push_back(l);
    text += l + (i % 7 == 0 ? "\r\n" : "\n");
  }
  want.push_back("{\"torn\":");
  text += want.back();
  std::unique_ptr<store::ByteSink> sink;
  store::SinkOptions so;
  so.zstd_window_log = 24;
  so.pledged_size = text.size();
  const std::string path = dir.File("c.jsonl.zst");
  ASSERT_TRUE(store::OpenSink(path, &sink, so).ok());
  ASSERT_TRUE(sink->Write(text).ok());
  ASSERT_TRUE(sink->Close().ok());
  const std::string stored = testing::ReadAll(path);
  for (size_t chunk : {size_t{4096}, size_t{5000}, LineReader::kDefaultChunkBytes}) {
    std::string seen;
    store::SourceOptions o;
    o.on_stored = [&seen](std::string_view b) { seen.append(b); };
    LineReader reader(chunk);
    ASSERT_TRUE(reader.Open(path, o).ok());
    std::vector<std::string> got;
    Line line;
    while (reader.Next(&line)) {
      got.emplace_back(line.bytes);
      EXPECT_EQ(line.number, got.size());
      EXPECT_EQ(line.crlf, line.number <= 3000 && (line.number - 1) % 7 == 0);
      EXPECT_EQ(line.torn, line.number == 3001);
    }
    ASSERT_TRUE(reader.status().ok()) << reader.status().ToString();
    EXPECT_TRUE(reader.finished());
    EXPECT_EQ(got, want) << chunk;
    EXPECT_EQ(reader.complete_lines(), 3000u);
    EXPECT_TRUE(seen == stored);
    EXPECT_EQ(reader.file_size(), stored.size());
    reader.Close();
    EXPECT_EQ(reader.stored_position(), stored.size());
    EXPECT_EQ(reader.complete_lines(), 3000u);
    EXPECT_FALSE(reader.Next(&line));
  }
  // Cut short: an error after the lines before the cut, never a quiet end.
  const std::string cut = dir.Write("cut.jsonl.zst", stored.substr(0, stored.size() / 2));
  LineReader reader(4096);
  ASSERT_TRUE(reader.Open(cut).ok());
  Line line;
  size_t n = 0;
  while (reader.Next(&line)) ++n;
  EXPECT_GT(n, 0u);
  EXPECT_FALSE(reader.finished());
  EXPECT_EQ(reader.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(reader.status().message().find("truncated"), std::string::npos)
      << reader.status().ToString();
}

// A frame whose blocks decode to fewer bytes than its header declares (38,685; they make 2,071:
// trace_reader_fuzz's find) is corrupt whatever the reader's chunk: libzstd itself checks the
// size only when the whole frame fits in the output buffer.
TEST(LineReader, AZstdFrameShorterThanItDeclaresIsCorrupt) {
  TempDir dir;
  using namespace std::string_literals;
  const std::string path = dir.Write("short.jsonl.zst", "\x28\xb5\x2f\xfd\x60\x1d\x96\xba\x40"s +
                                                            std::string(83, '\0') + "\x01\0\0"s);
  for (size_t chunk : {size_t{64}, size_t{4096}, LineReader::kDefaultChunkBytes}) {
    LineReader reader(chunk);
    ASSERT_TRUE(reader.Open(path).ok());
    Line line;
    while (reader.Next(&line)) {
    }
    EXPECT_FALSE(reader.finished()) << chunk;
    EXPECT_EQ(reader.status().code(), Status::Code::kInvalidArgument) << chunk;
    EXPECT_NE(reader.status().message().find("corrupt"), std::string::npos)
        << reader.status().ToString();
  }
}

TEST(LineReader, CloseMidwayKeepsTheCounts) {
  TempDir dir;
  std::string p = dir.Write("d.jsonl", "{\"a\":1}\n{\"b\":2}\n{\"c\":3}\n");
  LineReader reader;
  ASSERT_TRUE(reader.Open(p).ok());
  Line line;
  ASSERT_TRUE(reader.Next(&line));
  reader.Close();
  EXPECT_FALSE(reader.Next(&line));
  EXPECT_FALSE(reader.finished());
  EXPECT_EQ(reader.complete_lines(), 1u);
  EXPECT_EQ(reader.stored_position(), 24u);  // read in one piece
  // Open again: a fresh start.
  ASSERT_TRUE(reader.Open(p).ok());
  size_t n = 0;
  while (reader.Next(&line)) ++n;
  EXPECT_EQ(n, 3u);
  EXPECT_EQ(reader.complete_lines(), 3u);
  EXPECT_TRUE(reader.finished());
}

TEST(LineReader, MissingFileIsNotFound) {
  LineReader reader;
  Status s = reader.Open("/nonexistent/x.jsonl");
  EXPECT_EQ(s.code(), Status::Code::kNotFound);
}

TEST(Record, TimestampRewriteKeepsOtherBytes) {
  std::string out;
  ASSERT_TRUE(AppendWithTimestamp("{\"timestamp\":1234,\"payload\":{\"a\" : 1.50}}", 7, &out));
  EXPECT_EQ(out, "{\"timestamp\":7,\"payload\":{\"a\" : 1.50}}");
  out.clear();
  ASSERT_TRUE(AppendWithTimestamp(
      "{ \"x\": \"time\\\"stamp\", \"t\": [1,{\"timestamp\":3}], \"timestamp\" : 12.5 }", 0.25,
      &out));
  EXPECT_EQ(out,
            "{ \"x\": \"time\\\"stamp\", \"t\": [1,{\"timestamp\":3}], \"timestamp\" : 0.25 }");
  out.clear();
  EXPECT_FALSE(AppendWithTimestamp("{\"payload\":{\"timestamp\":1}}", 1, &out));
  EXPECT_TRUE(out.empty());
}

TEST(Record, FindTopLevelValue) {
  std::string_view l = "{\"timestamp\":5,\"payload\":{\"m\":[1,\"}\"]},\"z\":null}";
  auto span = FindTopLevelValue(l, "payload");
  ASSERT_TRUE(span);
  EXPECT_EQ(l.substr(span->begin, span->end - span->begin), "{\"m\":[1,\"}\"]}");
  span = FindTopLevelValue(l, "z");
  ASSERT_TRUE(span);
  EXPECT_EQ(l.substr(span->begin, span->end - span->begin), "null");
  EXPECT_FALSE(FindTopLevelValue(l, "m"));
}

TEST(Record, ParserStatuses) {
  RowParser parser;
  auto parse = [&](std::string s) {
    s.append(LineReader::kPadding, '\0');
    return parser.Parse(std::string_view(s.data(), s.size() - LineReader::kPadding)).status;
  };
  EXPECT_EQ(parse("  "), ParseStatus::kBlank);
  EXPECT_EQ(parse("{\"a\":"), ParseStatus::kInvalidJson);
  EXPECT_EQ(parse("[1]"), ParseStatus::kNotObject);
  EXPECT_EQ(parse("{\"a\":1e400}"), ParseStatus::kNumberOutOfRange);
  EXPECT_EQ(parse("{\"a\":1" + std::string(400, '0') + "}"), ParseStatus::kNumberOutOfRange);
  EXPECT_EQ(parse("{\"a\":1}"), ParseStatus::kOk);
}

// An integer beyond 64 bits loads, read as a float (as orjson, AIPerf's parser, reads it): the
// row is not lost to any tool.
TEST(Record, ParserReadsIntegersBeyond64BitsAsFloats) {
  RowParser parser;
  std::string line =
      R"({"timestamp":18446744073709551616,"payload":{"seed":-9223372036854775809,"s":"99999999999999999999"}})";
  const size_t size = line.size();
  line.append(LineReader::kPadding, '\0');
  const ParsedRow& row = parser.Parse(std::string_view(line.data(), size));
  ASSERT_EQ(row.status, ParseStatus::kOk) << row.error;
  EXPECT_TRUE(row.big_integers);
  EXPECT_EQ(
      row.text,
      R"({"timestamp":18446744073709551616.0,"payload":{"seed":-9223372036854775809.0,"s":"99999999999999999999"}})");
  ASSERT_TRUE(RowTimestamp(row.object));
  EXPECT_EQ(*RowTimestamp(row.object), 18446744073709551616.0);
  std::string small = "{\"a\":18446744073709551615}" + std::string(LineReader::kPadding, '\0');
  const ParsedRow& plain =
      parser.Parse(std::string_view(small.data(), small.size() - LineReader::kPadding));
  ASSERT_EQ(plain.status, ParseStatus::kOk);
  EXPECT_FALSE(plain.big_integers);
  EXPECT_EQ(plain.text.data(), small.data());
}

// Nesting deeper than simdjson's default 1024 levels loads (orjson reads any depth), and the
// parser stays able to read ordinary rows after it.
TEST(Record, ParserReadsRowsNestedDeeperThan1024Levels) {
  RowParser parser;
  auto parse = [&](std::string s) -> const ParsedRow& {
    s.append(LineReader::kPadding, ' ');
    static std::string keep;
    keep = std::move(s);
    return parser.Parse(std::string_view(keep.data(), keep.size() - LineReader::kPadding));
  };
  const ParsedRow& deep = parse("{\"timestamp\":1,\"payload\":{\"a\":" + std::string(5000, '[') +
                                std::string(5000, ']') + "}}");
  ASSERT_EQ(deep.status, ParseStatus::kOk) << deep.error;
  EXPECT_TRUE(deep.deep);
  const ParsedRow& plain = parse("{\"a\":[[1]]}");
  ASSERT_EQ(plain.status, ParseStatus::kOk);
  EXPECT_FALSE(plain.deep);
  EXPECT_EQ(parse("{\"a\":" + std::string(3000, '[')).status, ParseStatus::kInvalidJson);
}

TEST(WidenBigIntegers, OnlyIntegersBeyond64BitsOutsideStrings) {
  std::string out;
  EXPECT_FALSE(
      WidenBigIntegers(R"({"a":18446744073709551615,"b":-9223372036854775808,"c":1.5})", &out));
  ASSERT_TRUE(WidenBigIntegers(
      R"({"s":"99999999999999999999 \"18446744073709551616\"","a":[18446744073709551616,-9223372036854775809],"e":1e30,"f":123456789012345678901234.5,"g":7})",
      &out));
  EXPECT_EQ(
      out,
      R"({"s":"99999999999999999999 \"18446744073709551616\"","a":[18446744073709551616.0,-9223372036854775809.0],"e":1e30,"f":123456789012345678901234.5,"g":7})");
}

// A row's API: the capture's endpoint_type first, then the request's shape.
// `line` parsed as a row (`s` keeps the padded bytes the row's views point into).
simdjson::dom::object ParseRowObject(RowParser& parser, std::string line, std::string* s) {
  *s = std::move(line);
  const size_t size = s->size();
  s->append(LineReader::kPadding, ' ');
  const ParsedRow& row = parser.Parse(std::string_view(s->data(), size));
  EXPECT_EQ(row.status, ParseStatus::kOk) << *s;
  return row.object;
}

TEST(Record, RowEndpointFromTheRowsEndpointTypeThenTheShape) {
  RowParser parser;
  std::string bytes;
  auto endpoint = [&](std::string s, TraceFormat f = TraceFormat::kMooncake) {
    return RowEndpoint(ParseRowObject(parser, std::move(s), &bytes), f);
  };
  const std::string chat_body = R"({"model":"m","max_tokens":5,"messages":[]})";
  EXPECT_EQ(endpoint(R"({"timestamp":0,"payload":)" + chat_body + "}"), Endpoint::kChat);
  EXPECT_EQ(endpoint(R"({"timestamp":0,"payload":)" + chat_body +
                     R"(,"endpoint_type":"messages","session_id":"s"})"),
            Endpoint::kMessages);
  EXPECT_EQ(endpoint(R"({"payload":{"input":"x"},"endpoint_type":"cohere_rankings"})"),
            Endpoint::kRerank);
  EXPECT_EQ(endpoint(R"({"payload":{"input":"x"},"endpoint_type":"nim_rankings"})"),
            Endpoint::kOther);  // a name llmtap does not know: the shape decides
  EXPECT_EQ(endpoint(R"({"messages":[],"system":"s","max_tokens":5})", TraceFormat::kRaw),
            Endpoint::kMessages);
  // Blocks and keys only Anthropic's Messages API has; a plain conversation is read as chat.
  EXPECT_EQ(
      endpoint(
          R"({"max_tokens":5,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"r"}]}]})",
          TraceFormat::kRaw),
      Endpoint::kMessages);
  EXPECT_EQ(
      endpoint(
          R"({"messages":[{"role":"user","content":[{"type":"image","source":{"type":"url","url":"u"}}]}]})",
          TraceFormat::kRaw),
      Endpoint::kMessages);
  EXPECT_EQ(endpoint(R"({"messages":[{"role":"user","content":"x"}],"stop_sequences":["y"]})",
                     TraceFormat::kRaw),
            Endpoint::kMessages);
  EXPECT_EQ(
      endpoint(
          R"({"messages":[{"role":"user","content":[{"type":"text","text":"x"},{"type":"image_url","image_url":{"url":"u"}}]}],"top_k":5})",
          TraceFormat::kRaw),
      Endpoint::kChat);
  EXPECT_EQ(endpoint(R"({"query":"q","documents":[]})", TraceFormat::kRaw), Endpoint::kRerank);
  EXPECT_EQ(endpoint(R"({"input":"x","instructions":"i"})", TraceFormat::kRaw),
            Endpoint::kResponses);
  EXPECT_EQ(endpoint(R"({"input":"x","encoding_format":"float"})", TraceFormat::kRaw),
            Endpoint::kEmbeddings);
  EXPECT_EQ(endpoint(R"({"model":"m","input":"x"})", TraceFormat::kRaw), Endpoint::kOther);
  // A raw row's own "endpoint_type" is a body field, not the capture's record.
  EXPECT_EQ(endpoint(R"({"prompt":"p","endpoint_type":"messages"})", TraceFormat::kRaw),
            Endpoint::kCompletions);
}

// MatchCaptureRow takes rows in the capture writer's framing without a parse, and must agree
// with a parse wherever it does; rows it leaves to the parser are the parser's to judge.
TEST(Record, CaptureRowFastPathAgreesWithTheParser) {
  RowParser parser;
  struct Case {
    std::string row;
    bool fast;  // taken without a parse
  };
  std::string deep = "{\"timestamp\":5,\"payload\":{\"a\":" + std::string(1100, '[') +
                     std::string(1100, ']') + "}}";
  std::string long_row = "{\"timestamp\":6,\"payload\":{\"p\":\"";
  for (int i = 0; i < 300; ++i) long_row += "caf\\u00e9 x\\\\\\\"y\\\" 123e4 ";
  long_row += "\",\"n\":[1,2.5,-3,12345678901234567],\"t\":true,\"f\":false,\"z\":null}}";
  const std::vector<Case> cases = {
      {"{\"timestamp\":0,\"payload\":{\"model\":\"m\",\"prompt\":\"hi\"}}", true},
      {"{\"timestamp\":123456789012345,\"payload\":{}}", true},
      {"{\"timestamp\":1234567890123456,\"payload\":{}}", false},  // 16 digits
      {"{\"timestamp\":-1,\"payload\":{}}", false},
      {"{\"timestamp\":1.5,\"payload\":{}}", false},
      {"{\"timestamp\":1e3,\"payload\":{}}", false},
      {"{\"timestamp\":07,\"payload\":{}}", false},  // not JSON: the parser says so
      {"{\"timestamp\":100000000000000000000000,\"payload\":{}}", false},
      {"{\"timestamp\":7, \"payload\":{}}", false},
      {"{ \"timestamp\":7,\"payload\":{}}", false},
      {"{\"timestamp\":7,\"payload\":{}} ", false},  // MatchCaptureRow takes trimmed rows
      {"{\"payload\":{},\"timestamp\":7}", false},
      {"{\"timestamp\":7}", false},
      {"{\"timestamp\":8,\"payload\":{\"p\":\"{\\\"timestamp\\\":99,\\\"payload\\\":1}\","
       "\"timestamp\":98}}",
       true},
      {"{\"timestamp\":9,\"payload\":{\"p\":\"caf\\u00e9 \\u0000 \\\\u\"}}", true},
      {"{\"timestamp\":9,\"payload\":{\"p\":\"\\ud83d\\ude00\"}}", false},  // a surrogate pair
      {"{\"timestamp\":9,\"payload\":{\"p\":\"\\ud800 lone\"}}", false},
      {"{\"timestamp\":9,\"payload\":{\"p\":\"\\\\ud800 not an escape\"}}", true},
      {"{\"timestamp\":10,\"payload\":{\"t\":1e400}}", false},
      {"{\"timestamp\":10,\"payload\":{\"t\":1.5E+3}}", false},
      {"{\"timestamp\":10,\"payload\":{\"id\":\"9e9 and 123456789012345678901234\"}}", true},
      {"{\"timestamp\":10,\"payload\":{\"seed\":123456789012345678901234}}", false},
      {"{\"timestamp\":10,\"payload\":{\"seed\":-1234567890123456789}}", false},
      {"{\"timestamp\":10,\"payload\":{\"seed\":123456789012345678}}", true},
      {deep, false},
      {long_row, true},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.row.substr(0, 120));
    double ts = -1;
    const bool fast = MatchCaptureRow(c.row, &ts);
    EXPECT_EQ(fast, c.fast);
    if (!fast) continue;
    std::string padded = c.row + std::string(LineReader::kPadding, '\0');
    const ParsedRow& row = parser.Parse(std::string_view(padded.data(), c.row.size()));
    ASSERT_EQ(row.status, ParseStatus::kOk) << row.error;
    EXPECT_EQ(RowFormat(row.object), TraceFormat::kMooncake);
    ASSERT_TRUE(RowTimestamp(row.object));
    EXPECT_EQ(*RowTimestamp(row.object), ts);
  }
  // The scan's state crosses 64-byte blocks: an exponent, a digit run and a \uD escape split
  // at every offset are still seen.
  for (size_t pad = 0; pad < 70; ++pad) {
    const std::string head =
        "{\"timestamp\":1,\"payload\":{\"p\":\"" + std::string(pad, 'x') + "\"";
    double ts;
    EXPECT_FALSE(MatchCaptureRow(head + ",\"t\":1e400}}", &ts)) << pad;
    EXPECT_FALSE(MatchCaptureRow(head + ",\"t\":12345678901234567890}}", &ts)) << pad;
    EXPECT_FALSE(MatchCaptureRow(head + ",\"s\":\"\\uD800\"}}", &ts)) << pad;
    EXPECT_TRUE(MatchCaptureRow(head + ",\"t\":1234567890123456789.5,\"s\":\"\\\\\\\\uD8\"}}",
                                &ts) == false)
        << pad;  // 19 digits: left to the parser
    EXPECT_TRUE(MatchCaptureRow(head + ",\"t\":123456789012345678,\"s\":\"\\\\uD8\"}}", &ts))
        << pad;
  }
}

// One validate case per AIPerf rule.
struct RuleCase {
  const char* row;
  const char* format;        // "mooncake" or "raw"
  const char* endpoint;      // "", "chat", "completions"
  const char* error;         // substring of the failure; "" = passes
  const char* warning = "";  // passes with this deliberate warning (a ValidateWarningRules id)
};

void PrintTo(const RuleCase& c, std::ostream* os) {
  *os << c.format << " row" << (*c.endpoint ? std::string(" for ") + c.endpoint : "") << ": "
      << c.row;
}

// "<index>_<format>_<endpoint>_<expected error, or passes>", in letters, digits and '_'.
std::string RuleName(const ::testing::TestParamInfo<RuleCase>& info) {
  const RuleCase& c = info.param;
  std::string raw = std::to_string(info.index) + " " + c.format + " " +
                    (*c.endpoint ? c.endpoint : "any") + " " + (*c.error ? c.error : "passes");
  std::string name;
  for (char ch : raw) {
    if (std::isalnum(static_cast<unsigned char>(ch))) {
      name.push_back(ch);
    } else if (!name.empty() && name.back() != '_') {
      name.push_back('_');
    }
  }
  while (!name.empty() && name.back() == '_') name.pop_back();
  return name.substr(0, 60);
}

// ValidateTrace, with the options `o`, over a file holding `text`.
ValidateReport ValidateText(const std::string& text, ValidateOptions o = {}) {
  TempDir dir;
  o.path = dir.Write("t.jsonl", text);
  return ValidateTrace(o);
}

class ValidateRule : public ::testing::TestWithParam<RuleCase> {};

TEST_P(ValidateRule, Row) {
  const RuleCase& c = GetParam();
  ValidateOptions o;
  o.format = ParseTraceFormat(c.format);
  if (std::string(c.endpoint) == "chat") o.endpoint_type = Endpoint::kChat;
  if (std::string(c.endpoint) == "completions") o.endpoint_type = Endpoint::kCompletions;
  ValidateReport r = ValidateText(std::string(c.row) + "\n", o);
  ASSERT_TRUE(r.io.ok());
  if (std::string(c.error).empty()) {
    EXPECT_TRUE(r.ok()) << c.row << " -> "
                        << (r.failures.kept.empty() ? "" : r.failures.kept[0].reason);
    EXPECT_EQ(r.exit_code(), 0);
    if (*c.warning) {
      EXPECT_EQ(r.warning_rules.count(c.warning), 1u) << c.row << " -> " << RenderValidateText(r);
      EXPECT_EQ(r.warned, 1u);
    } else {
      EXPECT_EQ(r.row_warnings_total, 0u) << c.row << " -> " << RenderValidateText(r);
    }
  } else {
    ASSERT_EQ(r.failed(), 1u) << c.row;
    EXPECT_NE(r.failures.kept[0].reason.find(c.error), std::string::npos)
        << c.row << " -> " << r.failures.kept[0].reason;
    EXPECT_EQ(r.failures.kept[0].line, 1u);
    EXPECT_EQ(r.exit_code(), 1);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Rules, ValidateRule,
    ::testing::Values(
        RuleCase{
            R"({"timestamp":0,"payload":{"model":"m","messages":[{"role":"user","content":"hi"}]}})",
            "mooncake", "", ""},
        RuleCase{R"({"timestamp":0,"input_length":10,"hash_ids":[1,2]})", "mooncake", "chat",
                 "512-token hash blocks"},
        RuleCase{R"({"timestamp":0,"input_length":1000,"hash_ids":[1,2]})", "mooncake", "chat", ""},
        RuleCase{R"({"text_input":"hello","output_length":4})", "mooncake", "completions", ""},
        RuleCase{R"({"timestamp":0,"messages":[{"role":"user","content":"x"}]})", "mooncake",
                 "chat", ""},
        // exactly one input mode
        RuleCase{R"({"timestamp":0,"output_length":3})", "mooncake", "", "needs exactly one of"},
        RuleCase{R"({"timestamp":0,"input_length":3,"text_input":"x"})", "mooncake", "",
                 "mutually exclusive"},
        RuleCase{R"({"timestamp":0,"payload":{"prompt":"x"},"messages":[{"role":"user"}]})",
                 "mooncake", "", "mutually exclusive"},
        // null counts as absent, as in AIPerf's models; the last of a key written twice counts
        RuleCase{R"({"timestamp":0,"payload":{"prompt":"x"},"text_input":null})", "mooncake", "",
                 ""},
        RuleCase{R"({"timestamp":0,"input_length":"x","input_length":3})", "mooncake", "", "",
                 "duplicate-key"},
        RuleCase{R"({"timestamp":0,"input_length":3,"input_length":"x"})", "mooncake", "",
                 "AIPerf needs an integer"},
        // payload: a non-empty object
        RuleCase{R"({"timestamp":0,"payload":{}})", "mooncake", "", "non-empty object"},
        RuleCase{R"({"timestamp":0,"payload":"x"})", "mooncake", "", "must be an object"},
        // hash_ids only with input_length
        RuleCase{R"({"timestamp":0,"text_input":"x","hash_ids":[1]})", "mooncake", "",
                 "only allowed together with 'input_length'"},
        // output_length: AIPerf's max_tokens, at least 1
        RuleCase{R"({"timestamp":0,"text_input":"x","output_length":0})", "mooncake", "",
                 "greater than or equal to 1"},
        RuleCase{R"({"timestamp":0,"text_input":"x","output_length":"12"})", "mooncake", "", "",
                 "number-coerced"},
        RuleCase{R"({"timestamp":0,"text_input":"x","output_length":1.5})", "mooncake", "",
                 "AIPerf needs an integer"},
        // timestamp: a number, or a string pydantic reads as one; negative passes with a warning
        RuleCase{R"({"timestamp":-1,"payload":{"prompt":"x"}})", "mooncake", "", "",
                 "negative-timestamp"},
        RuleCase{R"({"timestamp":"5","payload":{"prompt":"x"}})", "mooncake", "", "",
                 "number-coerced"},
        RuleCase{R"({"timestamp":"5s","payload":{"prompt":"x"}})", "mooncake", "",
                 "needs a number of milliseconds"},
        RuleCase{R"({"timestamp":1.5,"payload":{"prompt":"x"}})", "mooncake", "", ""},
        RuleCase{R"({"timestamp":18446744073709551616,"payload":{"prompt":"x"}})", "mooncake", "",
                 "", "big-integer"},
        // session_id: a string; delay: a number
        RuleCase{R"({"timestamp":0,"payload":{"prompt":"x"},"session_id":"s-1"})", "mooncake", "",
                 ""},
        RuleCase{R"({"timestamp":0,"payload":{"prompt":"x"},"session_id":7})", "mooncake", "",
                 "'session_id' is 7"},
        RuleCase{R"({"timestamp":0,"payload":{"prompt":"x"},"session_id":null})", "mooncake", "",
                 ""},
        RuleCase{R"({"session_id":"a","delay":250,"input_length":3})", "mooncake", "", ""},
        RuleCase{R"({"session_id":"a","delay":"250","input_length":3})", "mooncake", "", "",
                 "number-coerced"},
        RuleCase{R"({"session_id":"a","delay":[250],"input_length":3})", "mooncake", "",
                 "'delay' is [250]"},
        // type: only "mooncake_trace"
        RuleCase{R"({"timestamp":0,"input_length":3,"type":"text"})", "mooncake", "",
                 "take only \"mooncake_trace\""},
        // raw rows: each a JSON object with a 'messages' list, whatever the endpoint type
        RuleCase{R"({"model":"m","messages":[{"role":"user"}]})", "raw", "chat", ""},
        RuleCase{R"({"model":"m","prompt":"x"})", "raw", "completions",
                 "without a 'messages' list"},
        RuleCase{R"([{"model":"m"}])", "raw", "", "not a JSON object"},
        RuleCase{R"({"timestamp":0,"payload":{"prompt":"x"}})", "raw", "",
                 "looks like a mooncake row"},
        RuleCase{R"({"timestamp":0,"messages":[{"role":"user"}]})", "raw", "", "",
                 "raw-mooncake-keys"},
        // a request for another endpoint, or one a server refuses: AIPerf loads it (warnings)
        RuleCase{R"({"timestamp":0,"payload":{"prompt":"x"}})", "mooncake", "chat", "",
                 "endpoint-mismatch"},
        RuleCase{R"({"messages":[]})", "raw", "chat", "", "request-shape"},
        RuleCase{R"({"messages":["hi"]})", "raw", "chat", "", "request-shape"},
        RuleCase{R"({"messages":[{"content":"hi"}]})", "raw", "chat", "", "request-shape"},
        RuleCase{R"({"timestamp":0,"payload":{"messages":[{"content":"x"}]}})", "mooncake", "", "",
                 "request-shape"},
        RuleCase{R"({"messages":[{"role":"user"}]})", "raw", "completions", "",
                 "endpoint-mismatch"},
        RuleCase{R"({"timestamp":0,"messages":[{"role":"user"}]})", "mooncake", "completions", "",
                 "endpoint-mismatch"},
        // a 'messages' row: a non-empty list of objects with a 'role' key
        RuleCase{R"({"timestamp":0,"messages":[]})", "mooncake", "", "non-empty list"},
        RuleCase{R"({"timestamp":0,"messages":[{"content":"x"}]})", "mooncake", "",
                 "has no 'role'"},
        RuleCase{R"({"timestamp":0,"messages":[{"role":null}]})", "mooncake", "", ""},
        // JSON itself, as orjson reads it
        RuleCase{R"({"timestamp":0,"payload":{"prompt":"x")", "mooncake", "", "invalid JSON"},
        RuleCase{R"({"timestamp":0,"payload":{"prompt":"x","seed":1e400}})", "mooncake", "",
                 "no double can hold"},
        RuleCase{R"({"timestamp":0,"payload":{"prompt":"x","seed":99999999999999999999}})",
                 "mooncake", "", "", "big-integer"}),
    RuleName);

TEST(Validate, DecreasingTimestampsPassWithAWarning) {
  ValidateReport r = ValidateText(
      "{\"timestamp\":5,\"payload\":{\"prompt\":\"a\"}}\n"
      "{\"timestamp\":5,\"payload\":{\"prompt\":\"b\"}}\n"
      "{\"timestamp\":3,\"payload\":{\"prompt\":\"c\"}}\n"
      "{\"timestamp\":6,\"payload\":{\"prompt\":\"d\"}}\n");
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(r.passed, 4u);
  EXPECT_EQ(r.warned, 1u);
  ASSERT_EQ(r.row_warnings.size(), 1u);
  EXPECT_EQ(r.row_warnings[0].line, 3u);
  EXPECT_EQ(r.row_warnings[0].rule, "timestamp-order");
  EXPECT_NE(r.row_warnings[0].reason.find("lower than 5 on line 2"), std::string::npos);
  EXPECT_NE(RenderValidateText(r).find("OK: every row would load in AIPerf 0.11.0"),
            std::string::npos);
}

// Every API's rows against the run's --endpoint-type (AIPerf's names), and a file mixing APIs.
TEST(Validate, RowsOfAnotherApiThanTheRunsPassWithAWarning) {
  const std::string text =
      R"({"timestamp":0,"payload":{"model":"m","input":"x","instructions":"i"},"endpoint_type":"responses"})"
      "\n"
      R"({"timestamp":1,"payload":{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"}]},"endpoint_type":"messages"})"
      "\n"
      R"({"timestamp":2,"payload":{"model":"m","messages":[{"role":"user","content":"x"}]}})"
      "\n";
  ValidateReport mixed = ValidateText(text);
  EXPECT_TRUE(mixed.ok());
  ASSERT_EQ(mixed.warnings.size(), 1u);
  EXPECT_NE(mixed.warnings[0].find("mixes chat (1), messages (1), responses (1) requests"),
            std::string::npos)
      << mixed.warnings[0];
  ValidateOptions o;
  o.endpoint_type = Endpoint::kResponses;
  ValidateReport r = ValidateText(text, o);
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(r.warned, 2u);
  ASSERT_EQ(r.row_warnings.size(), 2u);
  EXPECT_EQ(r.row_warnings[0].line, 2u);
  EXPECT_EQ(r.row_warnings[0].rule, "endpoint-mismatch");
  EXPECT_NE(r.row_warnings[1].reason.find("a request of the chat API in a responses run"),
            std::string::npos)
      << r.row_warnings[1].reason;
}

// A row without endpoint_type that both a chat and a Messages server would take: counted, read
// as chat, and not in a file whose manifest says llmtap captured it (the capture names the API).
TEST(Validate, RowsThatCouldBeChatOrMessagesAreReportedUnlessTheCaptureRecordedTheApi) {
  RowParser parser;
  std::string bytes;
  auto either = [&](std::string s, TraceFormat f = TraceFormat::kRaw) {
    return RowChatOrMessages(ParseRowObject(parser, std::move(s), &bytes), f);
  };
  const std::string both =
      R"({"model":"m","max_tokens":5,"stream":true,"temperature":0,"messages":[{"role":"user","content":"x"},{"role":"assistant","content":[{"type":"text","text":"y"}]}]})";
  EXPECT_TRUE(either(both));
  EXPECT_TRUE(either(R"({"timestamp":0,"payload":)" + both + "}", TraceFormat::kMooncake));
  EXPECT_FALSE(either(R"({"timestamp":0,"payload":)" + both + R"(,"endpoint_type":"chat"})",
                      TraceFormat::kMooncake));
  // One key, role or block only chat has (or Messages' required max_tokens missing): chat.
  EXPECT_FALSE(either(R"({"max_tokens":5,"n":2,"messages":[{"role":"user","content":"x"}]})"));
  EXPECT_FALSE(either(R"({"max_tokens":5,"messages":[{"role":"system","content":"s"}]})"));
  EXPECT_FALSE(either(
      R"({"max_tokens":5,"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"u"}}]}]})"));
  EXPECT_FALSE(either(R"({"messages":[{"role":"user","content":"x"}]})"));
  // One only Messages has: Messages, no guess.
  EXPECT_FALSE(
      either(R"({"max_tokens":5,"system":"s","messages":[{"role":"user","content":"x"}]})"));

  const std::string text =
      R"({"timestamp":0,"payload":{"model":"m","messages":[{"role":"user","content":"x"}]}})"
      "\n{\"timestamp\":1,\"payload\":" +
      both + "}\n{\"timestamp\":2,\"payload\":" + both + "}\n";
  ValidateReport r = ValidateText(text);
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(r.chat_or_messages.rows, 2u);
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_NE(r.warnings[0].find("2 rows (the first on line 2) could be chat or Anthropic Messages "
                               "requests"),
            std::string::npos)
      << r.warnings[0];
  EXPECT_NE(RenderValidateJson(r).find("\"chat_or_messages_rows\": 2"), std::string::npos);
  ValidateOptions chat;
  chat.endpoint_type = Endpoint::kChat;
  EXPECT_EQ(ValidateText(text, chat).chat_or_messages.rows, 0u);
  TempDir dir;
  ValidateOptions captured;
  captured.path = dir.Write("cap.jsonl", text);
  dir.Write("cap.jsonl.manifest.json", R"({"format":"mooncake_payload"})");
  ValidateReport c = ValidateTrace(captured);
  EXPECT_EQ(c.chat_or_messages.rows, 0u);
  EXPECT_TRUE(c.warnings.empty()) << c.warnings[0];
}

TEST(Validate, FixedScheduleNeedsATimestampOnEverySessionsFirstRow) {
  // The first row has a timestamp: AIPerf replays the file on its timestamps.
  ValidateReport r = ValidateText(
      "{\"timestamp\":0,\"input_length\":3}\n"
      "{\"timestamp\":1,\"input_length\":3,\"session_id\":\"a\"}\n"
      "{\"delay\":5,\"input_length\":3,\"session_id\":\"a\"}\n"
      "{\"input_length\":3}\n");
  ASSERT_EQ(r.failed(), 1u);
  EXPECT_EQ(r.failures.kept[0].line, 4u);
  EXPECT_NE(r.failures.kept[0].reason.find("its first row has one"), std::string::npos);
  EXPECT_EQ(r.schedule, "fixed (its first row has a timestamp)");
  // It has none: AIPerf does not use the timestamps, unless --fixed-schedule.
  std::string rate =
      "{\"input_length\":3}\n"
      "{\"timestamp\":1,\"input_length\":3}\n";
  r = ValidateText(rate);
  EXPECT_TRUE(r.ok());
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_NE(r.warnings[0].find("AIPerf does not replay this file on its timestamps"),
            std::string::npos);
  ValidateOptions fixed;
  fixed.fixed_schedule = true;
  r = ValidateText(rate, fixed);
  ASSERT_EQ(r.failed(), 1u);
  EXPECT_EQ(r.failures.kept[0].line, 1u);
  EXPECT_NE(r.failures.kept[0].reason.find("--fixed-schedule"), std::string::npos);
}

TEST(Validate, LinesAsAIPerfReadsThem) {
  // A mooncake_trace file is read as text: a lone '\r' splits a line, Python's whitespace is
  // stripped; a line of such whitespace only is blank.
  ValidateReport r = ValidateText(
      "{\"timestamp\":0,\"input_length\":3}\r{\"timestamp\":1,\"text_input\":\"x\"}\n"
      "{\"timestamp\":2,\"input_length\":3}\xc2\xa0\n"
      "\x1f\n"
      "{\"timestamp\":3,\r\"input_length\":3}\n");
  EXPECT_EQ(r.rows, 3u);
  EXPECT_EQ(r.blank, 1u);
  EXPECT_EQ(r.passed, 2u);
  EXPECT_EQ(r.warning_rules["line-split"], 1u);
  EXPECT_EQ(r.warning_rules["line-whitespace"], 2u);
  ASSERT_EQ(r.failed(), 1u);
  EXPECT_EQ(r.failures.kept[0].line, 4u);
  // A raw_payload file is read as bytes: '\r' is JSON whitespace, \v is stripped, a no-break
  // space is not.
  ValidateOptions raw;
  raw.format = TraceFormat::kRaw;
  r = ValidateText(
      "{\"messages\":[],\r\"n\":1}\n"
      "{\"messages\":[]}\v\n"
      "{\"messages\":[]}\xc2\xa0\n",
      raw);
  EXPECT_EQ(r.passed, 2u);
  ASSERT_EQ(r.failed(), 1u);
  EXPECT_EQ(r.failures.kept[0].line, 3u);
}

TEST(Validate, ASessionKeepsOneInputMode) {
  ValidateReport r = ValidateText(
      "{\"timestamp\":0,\"payload\":{\"messages\":[{\"role\":\"user\"}]},\"session_id\":\"a\"}\n"
      "{\"timestamp\":1,\"payload\":{\"prompt\":\"x\"},\"session_id\":\"b\"}\n"
      "{\"timestamp\":2,\"messages\":[{\"role\":\"user\"}],\"session_id\":\"a\"}\n"
      "{\"timestamp\":3,\"payload\":{\"prompt\":\"y\"},\"session_id\":\"a\"}\n"
      "{\"timestamp\":4,\"payload\":{\"prompt\":\"z\"},\"session_id\":\"b\"}\n"
      "{\"timestamp\":5,\"payload\":{\"prompt\":\"z\"}}\n");
  ASSERT_EQ(r.failed(), 1u);
  EXPECT_EQ(r.failures.kept[0].line, 3u);
  EXPECT_NE(r.failures.kept[0].reason.find("session_id of line 1 has 'payload' rows, this is "
                                           "a 'messages' row"),
            std::string::npos)
      << r.failures.kept[0].reason;
  // Chat and completions in one session: AIPerf loads it (a warning).
  ASSERT_EQ(r.row_warnings.size(), 1u);
  EXPECT_EQ(r.row_warnings[0].line, 4u);
  EXPECT_EQ(r.row_warnings[0].rule, "session-endpoint");
  EXPECT_NE(r.row_warnings[0].reason.find("is a chat session and this is a completions request"),
            std::string::npos)
      << r.row_warnings[0].reason;
  EXPECT_EQ(r.sessions, 2u);
  EXPECT_EQ(r.session_rows, 5u);
  std::string text = RenderValidateText(r);
  EXPECT_NE(text.find("sessions: 2 (5 rows with a session_id"), std::string::npos) << text;
  // Ids are never printed: they may name users.
  EXPECT_EQ(text.find("\"a\""), std::string::npos);
}

TEST(Validate, TornTailFailsBlankLinesAreSkipped) {
  ValidateReport r = ValidateText(
      "{\"timestamp\":0,\"payload\":{\"prompt\":\"a\"}}\n\n"
      "{\"timestamp\":1,\"payload\":{\"pro");
  EXPECT_TRUE(r.torn_tail);
  EXPECT_EQ(r.blank, 1u);
  ASSERT_EQ(r.failed(), 1u);
  EXPECT_EQ(r.failures.kept[0].line, 3u);
  EXPECT_NE(r.failures.kept[0].reason.find("torn last line"), std::string::npos);
}

TEST(Validate, ValidLastLineWithoutNewlinePassesWithAWarning) {
  ValidateReport r = ValidateText("{\"model\":\"m\",\"messages\":[{\"role\":\"user\"}]}");
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(r.format, TraceFormat::kRaw);
  EXPECT_FALSE(r.warnings.empty());
}

TEST(Validate, MissingFileIsExitCode2) {
  ValidateOptions o;
  o.path = "/nonexistent/trace.jsonl";
  ValidateReport r = ValidateTrace(o);
  EXPECT_EQ(r.exit_code(), 2);
  EXPECT_NE(RenderValidateText(r).find("/nonexistent/trace.jsonl"), std::string::npos);
}

}  // namespace
}  // namespace llmtap::trace

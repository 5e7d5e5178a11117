// Session ids: the member a row gains, its cap and escaping, header precedence, and body fields
// read from the compact payload.
#include "capture/session.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "capture/json_compact.h"

namespace llmtap {
namespace {

std::string Member(std::string_view id) {
  std::string out;
  return AppendSessionIdMember(id, &out) ? out : "(none)";
}

// The member the fields give for `body` (compacted first, as the capture does).
std::string FromBody(const std::vector<std::string>& fields, std::string_view body) {
  std::string compact;
  EXPECT_EQ(CompactJsonReference(body, &compact), CompactError::kOk) << body;
  std::string scratch, out;
  return SessionFieldPaths(fields).AppendFromBody(compact, &scratch, &out) ? out : "(none)";
}

TEST(SessionIdMemberTest, IsEscapedJsonAfterThePayload) {
  EXPECT_EQ(Member("abc-123"), R"(,"session_id":"abc-123")");
  EXPECT_EQ(Member("a\"b\\c\nd\te\x01"), R"(,"session_id":"a\"b\\c\nd\te\u0001")");
  EXPECT_EQ(Member("日本 é"), ",\"session_id\":\"日本 é\"");
  EXPECT_EQ(Member(""), "(none)");
  EXPECT_EQ(Member("\xff\xfe"), "(none)") << "not UTF-8: no id rather than a wrong one";
  EXPECT_EQ(Member("ok\xc3"), "(none)") << "truncated sequence";
  EXPECT_EQ(Member("\xed\xa0\x80"), "(none)") << "an encoded surrogate";
}

TEST(SessionIdMemberTest, CappedAt256BytesOnACharacterBoundary) {
  const std::string head = R"(,"session_id":")";
  EXPECT_EQ(Member(std::string(256, 'a')), head + std::string(256, 'a') + "\"");
  EXPECT_EQ(Member(std::string(300, 'a')), head + std::string(256, 'a') + "\"");
  // 255 bytes and a 2-byte character: the character does not fit whole, so it goes.
  EXPECT_EQ(Member(std::string(255, 'a') + "é" + "zz"), head + std::string(255, 'a') + "\"");
  // 254 bytes and a 2-byte character: exactly 256.
  EXPECT_EQ(Member(std::string(254, 'a') + "é" + "zz"), head + std::string(254, 'a') + "é\"");
  // 4-byte characters cut at 256 = 64 whole ones.
  std::string emoji;
  for (int i = 0; i < 70; ++i) emoji += "😀";
  std::string kept;
  for (int i = 0; i < 64; ++i) kept += "😀";
  EXPECT_EQ(Member(emoji), head + kept + "\"");
  // The cap is on the text: escaping may make the written member longer.
  EXPECT_EQ(
      Member(std::string(300, '"')), head + [] {
        std::string s;
        for (int i = 0; i < 256; ++i) s += "\\\"";
        return s;
      }() + "\"");
}

TEST(SessionIdFromHeadersTest, FirstPresentNameInOrderCaseInsensitive) {
  const std::vector<std::string> names = {"x-session-id", "x-conversation-id"};
  std::string out;
  EXPECT_TRUE(AppendSessionIdFromHeaders(
      HeaderPairs({{"X-Conversation-Id", "conv"}, {"X-SESSION-ID", "sess"}}), names, &out));
  EXPECT_EQ(out, R"(,"session_id":"sess")");
  out.clear();
  EXPECT_TRUE(
      AppendSessionIdFromHeaders(HeaderPairs({{"x-conversation-id", "conv"}}), names, &out));
  EXPECT_EQ(out, R"(,"session_id":"conv")");
  out.clear();
  EXPECT_TRUE(AppendSessionIdFromHeaders(
      HeaderPairs({{"x-session-id", ""}, {"x-conversation-id", "conv"}}), names, &out))
      << "an empty value is absent";
  EXPECT_EQ(out, R"(,"session_id":"conv")");
  out.clear();
  EXPECT_FALSE(AppendSessionIdFromHeaders(HeaderPairs({{"x-other", "o"}}), names, &out));
  EXPECT_EQ(out, "");
}

TEST(SessionFieldsTest, StringsAndIntegersInOrder) {
  const std::vector<std::string> f = {"user", "prompt_cache_key", "metadata.session_id"};
  EXPECT_EQ(FromBody(f, R"({"model":"m","user":"alice","prompt_cache_key":"k"})"),
            R"(,"session_id":"alice")");
  EXPECT_EQ(FromBody(f, R"({"model":"m","prompt_cache_key":"k","metadata":{"session_id":"s"}})"),
            R"(,"session_id":"k")");
  EXPECT_EQ(FromBody(f, R"({"metadata": {"a": [1, {"session_id": "no"}], "session_id": "s"}})"),
            R"(,"session_id":"s")");
  EXPECT_EQ(FromBody(f, R"({"user": 42})"), R"(,"session_id":"42")");
  EXPECT_EQ(FromBody(f, R"({"user": -7})"), R"(,"session_id":"-7")");
  EXPECT_EQ(FromBody(f, R"({"user": 123456789012345678901234567890})"),
            R"(,"session_id":"123456789012345678901234567890")");
  EXPECT_EQ(FromBody(f, R"({"model":"m"})"), "(none)");
}

// (A lone surrogate escape never gets here: the capture refuses such a body as invalid JSON.)
TEST(SessionFieldsTest, OtherValuesAreAbsentAndTheNextFieldIsTried) {
  const std::vector<std::string> f = {"user", "metadata.session_id"};
  const std::string next = R"("metadata":{"session_id":"next"})";
  for (const std::string value :
       {"\"\"", "1.5", "1e3", "-0.0", "true", "false", "null", "[\"a\"]", "{\"id\":\"a\"}"}) {
    EXPECT_EQ(FromBody(f, "{\"user\":" + value + "," + next + "}"), R"(,"session_id":"next")")
        << value;
    EXPECT_EQ(FromBody(f, "{\"user\":" + value + "}"), "(none)") << value;
  }
  EXPECT_EQ(FromBody(f, R"({"metadata":"s"})"), "(none)") << "a path through a non-object";
  EXPECT_EQ(FromBody(f, R"({"metadata":["session_id","x"]})"), "(none)");
}

TEST(SessionFieldsTest, OnlyTheNamedLevelMatches) {
  const std::vector<std::string> f = {"user"};
  // "user" as a role, as a nested key, and inside a string are not the top-level field.
  EXPECT_EQ(FromBody(f, R"({"messages":[{"role":"user","user":"nested"}],)"
                        R"("prompt":"{\"user\":\"fake\"}","x":{"user":"deep"}})"),
            "(none)");
  EXPECT_EQ(FromBody(f, R"({"messages":[{"role":"user","content":"\"}, \"user\": \"x"}],)"
                        R"("user":"real"})"),
            R"(,"session_id":"real")");
}

TEST(SessionFieldsTest, EscapesInKeysAndValuesAreDecodedThenWrittenEscaped) {
  const std::vector<std::string> f = {"user", "sesión"};
  EXPECT_EQ(FromBody(f, R"({"\u0075ser":"a"})"), R"(,"session_id":"a")");
  EXPECT_EQ(FromBody(f, R"({"user":"a\"b\\c\/d\u00e9\ud83d\ude00\n"})"),
            ",\"session_id\":\"a\\\"b\\\\c/dé😀\\n\"");
  EXPECT_EQ(FromBody(f, R"({"sesi\u00f3n":7})"), R"(,"session_id":"7")");
  EXPECT_EQ(FromBody(f, R"({"sesión":"s"})"), R"(,"session_id":"s")");
  EXPECT_EQ(FromBody(f, R"({"user\\":"no"})"), "(none)");
}

TEST(SessionFieldsTest, ADuplicatedKeyIsReadAtItsLastOccurrence) {
  EXPECT_EQ(FromBody({"user"}, R"({"user":"first","model":"m","user":"last"})"),
            R"(,"session_id":"last")");
  EXPECT_EQ(FromBody({"a.b"}, R"({"a":{"b":"x"},"a":{"c":"y"}})"), "(none)");
}

TEST(SessionFieldsTest, LongValuesAreCapped) {
  const std::string id(1000, 'x');
  EXPECT_EQ(FromBody({"user"}, "{\"user\":\"" + id + "\"}"),
            ",\"session_id\":\"" + std::string(256, 'x') + "\"");
}

TEST(SessionFieldsTest, MalformedInputFindsNothingAndNeverReadsOutOfBounds) {
  const std::string body =
      R"({"messages":[{"role":"user","content":"a\"b\\"}],"n":-1.5e3,"t":true,)"
      R"("metadata":{"x":[1,{"y":null}],"session_id":"s\u00e9"},"user":"u"})";
  const SessionFieldPaths paths({"metadata.session_id", "user", "nope.deeper"});
  std::string scratch, out;
  ASSERT_TRUE(paths.AppendFromBody(body, &scratch, &out));
  EXPECT_EQ(out, R"(,"session_id":"sé")");
  for (size_t n = 0; n < body.size(); ++n) {
    out.clear();
    // Every prefix (copied, so a sanitizer sees reads past its end).
    const std::string prefix = body.substr(0, n);
    paths.AppendFromBody(prefix, &scratch, &out);
  }
  for (const std::string bad :
       {"", "{", "[", "\"", "{\"", "{\"user\"", "{\"user\":", "{\"user\":\"", "{\"user\":\"\\",
        "{\"user\":\"\\u12", "{\"a\":{\"b\"}}", "}}}", "{\"metadata\":{\"session_id\":\"x\"", "{,}",
        "{\"user\"x\"a\"}"}) {
    out.clear();
    EXPECT_FALSE(paths.AppendFromBody(bad, &scratch, &out)) << bad;
  }
}

TEST(DecodeJsonStringContentTest, EscapesAndSurrogates) {
  std::string out;
  EXPECT_TRUE(DecodeJsonStringContent(R"(a\"\\\/\b\f\n\r\t\u0041\u00e9\u65e5\ud83d\ude00)", &out));
  EXPECT_EQ(out, "a\"\\/\b\f\n\r\tAé日😀");
  EXPECT_FALSE(DecodeJsonStringContent(R"(\ud83d)", &out));
  EXPECT_FALSE(DecodeJsonStringContent(R"(\ude00)", &out));
  EXPECT_FALSE(DecodeJsonStringContent(R"(\ud83dx)", &out));
  EXPECT_FALSE(DecodeJsonStringContent(R"(\ud83d\u0041)", &out));
  EXPECT_FALSE(DecodeJsonStringContent(R"(\x)", &out));
  EXPECT_FALSE(DecodeJsonStringContent(R"(\u12)", &out));
  EXPECT_FALSE(DecodeJsonStringContent("\\", &out));
}

}  // namespace
}  // namespace llmtap

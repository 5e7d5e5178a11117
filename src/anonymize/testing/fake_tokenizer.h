// A stand-in Tokenizer for the anonymize tests: one id per whitespace-separated word (a hash
// of the word), chat messages rendered as <role id> then the content's words, with the
// assistant role id as the generation prompt -- so, as with real chat templates, a
// conversation that extends an earlier one tokenizes to an extension of its tokens.
// Thread-safe (each call parses with its own simdjson parser). `jitter_us` > 0 sleeps a random
// time per call, to shuffle the order in which workers finish.
#pragma once

#include <simdjson.h>

#include <chrono>
#include <random>
#include <string>
#include <thread>

#include "tokenizer/tokenizer.h"

namespace llmtap::anonymize::testing {

class FakeTokenizer : public tokenizer::Tokenizer {
 public:
  static constexpr uint32_t kSystem = 1, kUser = 2, kAssistant = 3, kOtherRole = 4;

  explicit FakeTokenizer(int jitter_us = 0) : jitter_us_(jitter_us) {}

  static uint32_t WordId(std::string_view w) {
    uint32_t h = 2166136261u;
    for (unsigned char c : w) h = (h ^ c) * 16777619u;
    return 100 + h % 1000000;
  }

  void Encode(std::string_view text, std::vector<uint32_t>* ids) const override {
    size_t i = 0;
    while (i < text.size()) {
      while (i < text.size() && IsSpace(text[i])) ++i;
      size_t b = i;
      while (i < text.size() && !IsSpace(text[i])) ++i;
      if (i > b) ids->push_back(WordId(text.substr(b, i - b)));
    }
  }

  std::string Decode(std::span<const uint32_t>) const override { return {}; }

  bool EncodeRequest(std::string_view body, std::vector<uint32_t>* ids,
                     std::string* error) const override {
    if (jitter_us_ > 0) {
      thread_local std::mt19937 rng(std::hash<std::thread::id>()(std::this_thread::get_id()));
      std::this_thread::sleep_for(std::chrono::microseconds(rng() % jitter_us_));
    }
    simdjson::dom::parser parser;
    simdjson::padded_string padded(body);
    simdjson::dom::object obj;
    if (parser.parse(padded).get(obj) != simdjson::SUCCESS) {
      *error = "not a JSON object";
      return false;
    }
    simdjson::dom::array messages;
    if (obj["messages"].get(messages) == simdjson::SUCCESS) {
      for (simdjson::dom::element m : messages) {
        std::string_view role, content;
        if (m["role"].get(role) != simdjson::SUCCESS) role = "";
        ids->push_back(role == "system"      ? kSystem
                       : role == "user"      ? kUser
                       : role == "assistant" ? kAssistant
                                             : kOtherRole);
        if (m["content"].get(content) == simdjson::SUCCESS) Encode(content, ids);
      }
      ids->push_back(kAssistant);
      return true;
    }
    simdjson::dom::element prompt;
    if (obj["prompt"].get(prompt) == simdjson::SUCCESS) {
      std::string_view s;
      if (prompt.get(s) == simdjson::SUCCESS) {
        Encode(s, ids);
        return true;
      }
      simdjson::dom::array a;
      if (prompt.get(a) == simdjson::SUCCESS) {
        for (simdjson::dom::element e : a) {
          uint64_t id;
          if (e.get(id) == simdjson::SUCCESS) ids->push_back(static_cast<uint32_t>(id));
          if (e.get(s) == simdjson::SUCCESS) Encode(s, ids);
        }
        return true;
      }
    }
    *error = "the request has neither 'messages' nor 'prompt'";
    return false;
  }

  std::string Describe() const override { return "fake word tokenizer (tests)"; }

 private:
  static bool IsSpace(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }
  int jitter_us_;
};

}  // namespace llmtap::anonymize::testing

#include "proxy/response_reader.h"

#include <algorithm>
#include <new>
#include <optional>
#include <string>
#include <utility>

#include "api/response_document.h"
#include "net/sse.h"

namespace llmtap::proxy {
namespace {

// Whether a response is read document by document: the APIs whose usage or events differ from
// chat's, and every API when its text is kept (the UsageScanner reads usage only).
// (Embeddings have no text: their vectors are not parsed for it.)
bool ReadsDocuments(api::Endpoint endpoint, size_t max_text_bytes) {
  return (max_text_bytes > 0 && endpoint != api::Endpoint::kEmbeddings) ||
         endpoint == api::Endpoint::kResponses || endpoint == api::Endpoint::kMessages ||
         endpoint == api::Endpoint::kRerank;
}

// The length of s's longest prefix of at most n bytes that does not end inside a UTF-8 character.
size_t Utf8Prefix(std::string_view s, size_t n) {
  if (n >= s.size()) return s.size();
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return n;
}

// The generated output as ResponseText, at most `max` bytes of it (the first piece that does
// not fit is cut at a character boundary, and nothing after it is kept).
class CappedText final : public api::OutputSink {
 public:
  explicit CappedText(size_t max) : max_(max) {}
  void Text(std::string_view piece) override { Append(&text_.text, piece); }
  void Reasoning(std::string_view piece) override { Append(&text_.reasoning, piece); }
  void ToolCall(int64_t index, std::string_view name, std::string_view arguments) override {
    if (text_.truncated) return;
    auto it = std::find_if(text_.tool_calls.begin(), text_.tool_calls.end(),
                           [&](const ResponseToolCall& c) { return c.index == index; });
    if (it == text_.tool_calls.end()) {
      text_.tool_calls.push_back(ResponseToolCall{index, {}, {}});
      it = text_.tool_calls.end() - 1;
    }
    Append(&it->name, name);
    Append(&it->arguments, arguments);
  }
  ResponseText Take() {
    std::stable_sort(
        text_.tool_calls.begin(), text_.tool_calls.end(),
        [](const ResponseToolCall& a, const ResponseToolCall& b) { return a.index < b.index; });
    return std::move(text_);
  }

 private:
  void Append(std::string* to, std::string_view piece) {
    if (text_.truncated || piece.empty()) return;
    const size_t room = max_ - used_;
    if (piece.size() > room) {
      piece = piece.substr(0, Utf8Prefix(piece, room));
      text_.truncated = true;
    }
    to->append(piece);
    used_ += piece.size();
  }

  size_t max_;
  size_t used_ = 0;
  ResponseText text_;
};

}  // namespace

// The documents of a response: each event's data (or the whole body) collected, then read.
class ResponseReader::Documents {
 public:
  Documents(api::Endpoint endpoint, UsageScanner::Mode mode, size_t max_text_bytes)
      : endpoint_(endpoint), mode_(mode) {
    if (max_text_bytes > 0) text_.emplace(max_text_bytes);
  }

  void Feed(std::string_view bytes) {
    if (mode_ == UsageScanner::Mode::kJson) {
      Collect(bytes);
      return;
    }
    struct Handler {
      Documents* d;
      void OnDataLine(bool first) {
        if (!first) d->Collect("\n");  // the data lines of one event join with newlines
      }
      void OnData(const char* b, const char* e) { d->Collect({b, static_cast<size_t>(e - b)}); }
      void OnEventEnd() { d->ReadDocument(); }
    } handler{this};
    sse_.Feed(bytes.data(), bytes.data() + bytes.size(), handler);
  }

  void Finish(ResponseOutcome* o) {
    if (!data_.empty() || oversized_) ReadDocument();  // the body, or an event the end cut off
    if (facts_.input_tokens) o->prompt_tokens = *facts_.input_tokens;
    if (facts_.output_tokens) o->completion_tokens = *facts_.output_tokens;
    o->server = facts_.server;
    o->SetFinishReason(facts_.finish_reason);
    o->response_id = std::move(facts_.response_id);
    if (text_) {
      o->has_response = true;
      o->response = text_->Take();
    }
  }

 private:
  void Collect(std::string_view bytes) {
    if (oversized_) return;
    if (bytes.size() > kMaxDocumentBytes - data_.size()) {
      oversized_ = true;
      data_.clear();
      return;
    }
    data_.append(bytes);
  }

  void ReadDocument() {
    if (!oversized_) {
      std::string_view json = data_;
      // A JSON body may open with a byte order mark (an event stream's framer drops its own).
      if (mode_ == UsageScanner::Mode::kJson && json.starts_with("\xEF\xBB\xBF")) {
        json.remove_prefix(3);
      }
      api::DocumentReader::ForThisThread().Read(endpoint_, json, &facts_,
                                                text_ ? &*text_ : nullptr);
    }
    oversized_ = false;
    data_.clear();
  }

  api::Endpoint endpoint_;
  UsageScanner::Mode mode_;
  net::SseFramer sse_;
  std::string data_;
  bool oversized_ = false;
  api::DocumentFacts facts_;
  std::optional<CappedText> text_;
};

ResponseReader::ResponseReader() = default;

ResponseReader::ResponseReader(api::Endpoint endpoint, std::string_view content_type,
                               std::string_view content_encoding, size_t max_text_bytes) {
  const UsageScanner::Mode mode = UsageScanner::ModeFor(content_type, content_encoding);
  if (mode != UsageScanner::Mode::kNone && ReadsDocuments(endpoint, max_text_bytes)) {
    documents_.reset(new (std::nothrow) Documents(endpoint, mode, max_text_bytes));
    return;
  }
  scanner_ = UsageScanner(mode);
  no_text_ = max_text_bytes > 0 && mode != UsageScanner::Mode::kNone;
}

ResponseReader::ResponseReader(ResponseReader&&) noexcept = default;
ResponseReader& ResponseReader::operator=(ResponseReader&&) noexcept = default;
ResponseReader::~ResponseReader() = default;

void ResponseReader::Feed(std::string_view bytes) noexcept {
  if (!documents_) {
    scanner_.Feed(bytes);
    return;
  }
  try {
    documents_->Feed(bytes);
  } catch (const std::bad_alloc&) {
    documents_.reset();  // what it would have said stays unknown
  }
}

void ResponseReader::Finish(ResponseOutcome* o) noexcept {
  if (documents_) {
    try {
      documents_->Finish(o);
    } catch (const std::bad_alloc&) {
    }
  } else {
    const ResponseUsage& usage = scanner_.usage();
    o->prompt_tokens = usage.prompt_tokens.value_or(-1);
    o->completion_tokens = usage.completion_tokens.value_or(-1);
    o->server = usage.server;
    o->SetFinishReason(usage.finish_reason);
    o->has_response = no_text_;  // the text asked for, of an answer that has none
  }
  o->tokens_from_timings = api::FillFromTimings(&o->prompt_tokens, &o->completion_tokens, &o->server);
}

}  // namespace llmtap::proxy

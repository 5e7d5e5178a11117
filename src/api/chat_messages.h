// Writing chat messages (api/prompt.h's bodies), for the API modules. Internal to src/api.
#pragma once

#include <string>
#include <string_view>

#include "common/json_escape.h"

namespace llmtap::api {

// {"messages":[ ... ]}, a message at a time.
class ChatMessagesWriter {
 public:
  explicit ChatMessagesWriter(std::string* out) : out_(out) { out_->assign("{\"messages\":["); }

  // {"role":ROLE,"content":TEXT}
  void Message(std::string_view role, std::string_view content) {
    Open(role);
    out_->append(",\"content\":\"");
    AppendJsonEscaped(out_, content);
    out_->append("\"}");
  }
  // {"role":"tool","tool_call_id":ID,"content":TEXT}
  void ToolResult(std::string_view call_id, std::string_view content) {
    Open("tool");
    out_->append(",\"tool_call_id\":\"");
    AppendJsonEscaped(out_, call_id);
    out_->append("\",\"content\":\"");
    AppendJsonEscaped(out_, content);
    out_->append("\"}");
  }
  // An assistant message with tool calls: BeginToolCalls(text or "" for null content), then
  // ToolCall per call, then EndToolCalls.
  void BeginToolCalls(std::string_view content) {
    Open("assistant");
    if (content.empty()) {
      out_->append(",\"content\":null");
    } else {
      out_->append(",\"content\":\"");
      AppendJsonEscaped(out_, content);
      out_->push_back('"');
    }
    out_->append(",\"tool_calls\":[");
    first_call_ = true;
  }
  void ToolCall(std::string_view id, std::string_view name, std::string_view arguments) {
    if (!first_call_) out_->push_back(',');
    first_call_ = false;
    out_->append("{\"id\":\"");
    AppendJsonEscaped(out_, id);
    out_->append("\",\"type\":\"function\",\"function\":{\"name\":\"");
    AppendJsonEscaped(out_, name);
    out_->append("\",\"arguments\":\"");
    AppendJsonEscaped(out_, arguments);
    out_->append("\"}}");
  }
  void EndToolCalls() { out_->append("]}"); }
  void Finish() { out_->append("]}"); }

 private:
  void Open(std::string_view role) {
    if (!first_) out_->push_back(',');
    first_ = false;
    out_->append("{\"role\":\"");
    AppendJsonEscaped(out_, role);
    out_->push_back('"');
  }

  std::string* out_;
  bool first_ = true;
  bool first_call_ = true;
};

}  // namespace llmtap::api

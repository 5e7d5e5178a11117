#include "replay/inline.h"

#include <algorithm>

#include <simdjson.h>

#include "common/json_escape.h"
#include "replay/input.h"

namespace llmtap::replay {
namespace {

// Appends `item` to the comma-separated `*items`.
void AddInlinedItem(std::string* items, std::string_view item) {
  if (item.empty()) return;
  if (!items->empty()) items->push_back(',');
  items->append(item);
}

// The `input` of a Responses body, parsed (the parser is the calling thread's).
simdjson::simdjson_result<simdjson::dom::element> ResponsesInput(std::string_view body) {
  thread_local simdjson::dom::parser parser;
  simdjson::dom::object o;
  if (parser.parse(body.data(), body.size()).get(o) != simdjson::SUCCESS) {
    return simdjson::NO_SUCH_FIELD;
  }
  return o.at_key("input");
}

}  // namespace

bool ParseCapturedResponse(std::string_view json, ResponseText* out) {
  simdjson::dom::parser parser;
  simdjson::dom::object response;
  if (parser.parse(json.data(), json.size()).get(response) != simdjson::SUCCESS) return false;
  bool truncated = false;
  if (response.at_key("truncated").get(truncated) == simdjson::SUCCESS && truncated) return false;
  *out = ResponseText();
  std::string_view s;
  if (response.at_key("text").get(s) == simdjson::SUCCESS) out->text = s;
  if (response.at_key("reasoning").get(s) == simdjson::SUCCESS) out->reasoning = s;
  simdjson::dom::array calls;
  if (response.at_key("tool_calls").get(calls) == simdjson::SUCCESS) {
    int64_t index = 0;
    for (simdjson::dom::element call : calls) {
      ResponseToolCall c;
      c.index = index++;
      if (call["name"].get(s) == simdjson::SUCCESS) c.name = s;
      if (call["arguments"].get(s) == simdjson::SUCCESS) c.arguments = s;
      out->tool_calls.push_back(std::move(c));
    }
  }
  return true;
}

bool AppendInputItems(std::string_view body, std::string* items) {
  simdjson::dom::element input;
  if (ResponsesInput(body).get(input) != simdjson::SUCCESS) return false;
  std::string_view text;
  if (input.get(text) == simdjson::SUCCESS) {
    std::string item = R"({"type":"message","role":"user","content":)";
    AppendJsonString(&item, text);
    item.push_back('}');
    AddInlinedItem(items, item);
    return true;
  }
  simdjson::dom::array array;
  if (input.get(array) != simdjson::SUCCESS) return false;
  for (simdjson::dom::element e : array) {
    std::string item = simdjson::minify(e);
    simdjson::dom::object o;
    // A message given by its role alone: llama-server needs its type.
    if (e.get(o) == simdjson::SUCCESS && o.at_key("role").error() == simdjson::SUCCESS &&
        o.at_key("type").error() != simdjson::SUCCESS) {
      SetTopLevel(&item, "type", "\"message\"");
    }
    AddInlinedItem(items, item);
  }
  return true;
}

std::vector<std::string> FunctionCallOutputIds(std::string_view body) {
  std::vector<std::string> ids;
  simdjson::dom::array array;
  if (ResponsesInput(body).get(array) != simdjson::SUCCESS) return ids;
  for (simdjson::dom::element e : array) {
    std::string_view type, id;
    if (e["type"].get(type) == simdjson::SUCCESS && type == "function_call_output" &&
        e["call_id"].get(id) == simdjson::SUCCESS) {
      ids.emplace_back(id);
    }
  }
  return ids;
}

void AppendOutputItems(const ResponseText& output, const std::vector<std::string>& call_ids,
                       std::string* items) {
  std::string item;
  if (!output.text.empty()) {
    item = R"({"type":"message","role":"assistant","content":[{"type":"output_text","text":)";
    AppendJsonString(&item, output.text);
    item.append("}]}");
    AddInlinedItem(items, item);
  }
  for (size_t i = 0; i < output.tool_calls.size(); ++i) {
    const ResponseToolCall& call = output.tool_calls[i];
    item = R"({"type":"function_call","call_id":)";
    AppendJsonString(&item, i < call_ids.size() ? call_ids[i] : "call_" + std::to_string(i));
    item.append(",\"name\":");
    AppendJsonString(&item, call.name);
    item.append(",\"arguments\":");
    AppendJsonString(&item, call.arguments);
    item.push_back('}');
    AddInlinedItem(items, item);
  }
}

void InlineBody(std::string_view conversation, std::string* body) {
  trace::RemoveTopLevel(body, "previous_response_id");
  std::string input = "[";
  input.append(conversation).push_back(']');
  SetTopLevel(body, "input", input);
}

ChainLink ChainInliner::Compose(const TraceRequest& req, std::string* body, double now_ms) {
  // Neither continuing a row of the trace nor continued by one.
  if (req.endpoint != api::Endpoint::kResponses ||
      (req.chain != ChainLink::kLinked && req.response_id.empty())) {
    return req.chain;
  }
  std::string own;
  const bool have_items = AppendInputItems(*body, &own);
  std::vector<std::string> call_ids;
  if (req.chain == ChainLink::kLinked) call_ids = FunctionCallOutputIds(*body);
  std::lock_guard lock(mu_);
  Expire(now_ms);
  ChainLink link = req.chain;
  if (req.chain == ChainLink::kLinked) {
    auto it = entries_.find(req.previous_response_id);
    Entry* p = it == entries_.end() ? nullptr : &it->second;
    if (p == nullptr) {
      link = ChainLink::kPredecessorUnanswered;  // not sent yet (or idle past the bound)
    } else if (!p->inlined) {
      link = ChainLink::kPredecessorFailed;
    } else if (!p->output) {
      link = p->answered ? ChainLink::kPredecessorFailed : ChainLink::kPredecessorUnanswered;
    } else {
      if (!p->made) {
        AppendOutputItems(*p->output, call_ids, &p->output_items);
        p->made = true;
      }
      // The chain back to its root; every entry on it was inlined (or a root) and had its
      // output when the row after it was sent.
      std::vector<std::pair<const std::string*, Entry*>> chain;
      // (At most one step per entry: a capture whose ids loop cannot loop here.)
      for (auto at = it; at != entries_.end() && chain.size() <= entries_.size();
           at = entries_.find(at->second.parent)) {
        chain.emplace_back(&at->first, &at->second);
        if (at->second.parent.empty()) break;
      }
      if (!chain.back().second->parent.empty()) {
        link = ChainLink::kPredecessorUnanswered;  // an earlier turn went idle past the bound
      } else {
        std::string conversation;
        for (auto e = chain.rbegin(); e != chain.rend(); ++e) {
          AddInlinedItem(&conversation, e->second->items);
          AddInlinedItem(&conversation, e->second->output_items);
          Touch(e->second, now_ms);
        }
        AddInlinedItem(&conversation, own);
        InlineBody(conversation, body);
        link = p->captured ? ChainLink::kInlinedCaptured : ChainLink::kInlinedReplayed;
      }
    }
  }
  if (!req.response_id.empty()) {
    Entry e;
    const bool root = req.previous_response_id.empty();
    e.inlined = root ? have_items : Inlined(link);
    if (!root && e.inlined) e.parent = req.previous_response_id;
    e.items = std::move(own);
    if (req.captured_output) {
      e.output = *req.captured_output;
      e.captured = true;
    }
    e.last_ms = now_ms;
    auto [at, fresh] = entries_.insert_or_assign(req.response_id, std::move(e));
    if (fresh) touched_.emplace_back(now_ms, at->first);
  }
  return link;
}

void ChainInliner::Answered(std::string_view captured_id, const ResponseText* replayed,
                            double now_ms) {
  std::lock_guard lock(mu_);
  auto it = entries_.find(std::string(captured_id));
  if (it == entries_.end()) return;
  Entry& e = it->second;
  e.answered = true;
  if (!e.output && replayed != nullptr) e.output = *replayed;
  Touch(&e, now_ms);
}

void ChainInliner::Touch(Entry* e, double now_ms) { e->last_ms = std::max(e->last_ms, now_ms); }

// Forgets entries untouched for more than idle_ms. touched_ holds one element per entry (its
// time when queued): one still in use goes back to the end with its latest time (the queue is in
// clock order give or take that and the workers' races, which only delay a removal).
void ChainInliner::Expire(double now_ms) {
  while (!touched_.empty() && touched_.front().first < now_ms - idle_ms_) {
    std::string id = std::move(touched_.front().second);
    touched_.pop_front();
    auto it = entries_.find(id);
    if (it == entries_.end()) continue;
    if (it->second.last_ms < now_ms - idle_ms_) {
      entries_.erase(it);
    } else {
      touched_.emplace_back(it->second.last_ms, std::move(id));
    }
  }
}

}  // namespace llmtap::replay

// The input the simulator answers a forced tool call with, whatever API asked (chat's
// tool_calls arguments, the Responses API's function_call arguments, Anthropic's tool_use
// input): the JSON text {"input":"<generated text>"}, written piece by piece as the text streams.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "common/json_escape.h"

namespace llmtap::api {

// Appends the piece of {"input":TEXT} that carries bytes [begin, end) of `text` (the whole
// generated text): the piece starting at 0 opens the object, the one ending at text.size()
// closes it, so the pieces of consecutive ranges join to the whole input.
inline void AppendToolInputPiece(std::string_view text, size_t begin, size_t end,
                                 std::string* out) {
  if (begin == 0) out->append(R"({"input":")");
  AppendJsonEscaped(out, text.substr(begin, end - begin));
  if (end == text.size()) out->append(R"("})");
}

}  // namespace llmtap::api

// The proxy's own error answers: OpenAI-style JSON bodies ({"error":{"message","type","param",
// "code"}}) for the requests it refuses (400/413/501, decided in http_message.h) and for an
// upstream it could not use (502/504). Only the bodies and statuses; the session sends them.
//
// Internal to src/proxy (session.cc calls it). Pure functions: any thread.
#pragma once

#include <string>
#include <string_view>

#include "proxy/http_message.h"
#include "proxy/observer.h"

namespace llmtap::proxy {

inline constexpr std::string_view kErrorContentType = "application/json";

struct ErrorAnswer {
  int status = 0;
  std::string body;
};

// An OpenAI-style error body; `message` is JSON-escaped, `type` and `code` are written as is.
std::string ErrorBody(std::string_view message, std::string_view type, std::string_view code);

// A request refused before it was forwarded (type "invalid_request_error").
ErrorAnswer RejectionAnswer(const Rejection& rejection);

// No response byte reached the client and the upstream failed with `error` (not kNone): 504
// for a timeout, else 502. `detail`, when given, says why in words ("certificate has expired
// (CN=...)") and goes in the message after the kind: "(tls: ...)".
ErrorAnswer UpstreamErrorAnswer(UpstreamError error, std::string_view detail = {});

}  // namespace llmtap::proxy

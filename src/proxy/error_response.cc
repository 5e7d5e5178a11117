#include "proxy/error_response.h"

#include "common/json_escape.h"

namespace llmtap::proxy {

std::string ErrorBody(std::string_view message, std::string_view type, std::string_view code) {
  std::string b = "{\"error\":{\"message\":\"";
  AppendJsonEscaped(&b, message);
  b.append("\",\"type\":\"").append(type).append("\",\"param\":null,\"code\":\"");
  b.append(code).append("\"}}");
  return b;
}

ErrorAnswer RejectionAnswer(const Rejection& rejection) {
  return {rejection.status, ErrorBody(rejection.message, "invalid_request_error", rejection.code)};
}

ErrorAnswer UpstreamErrorAnswer(UpstreamError error, std::string_view detail) {
  const bool timeout = error == UpstreamError::kTimeout;
  std::string message = timeout ? "The upstream server did not answer in time ("
                                : "The upstream server could not be reached or failed (";
  message.append(UpstreamErrorName(error));
  if (!detail.empty()) message.append(": ").append(detail);
  message.append(").");
  return {timeout ? 504 : 502, ErrorBody(message, "upstream_error",
                                         timeout ? "upstream_timeout" : "upstream_unavailable")};
}

}  // namespace llmtap::proxy

#include "proxy/observer.h"

namespace llmtap::proxy {

std::string_view UpstreamErrorName(UpstreamError error) {
  switch (error) {
    case UpstreamError::kNone:
      return "none";
    case UpstreamError::kConnect:
      return "connect";
    case UpstreamError::kTimeout:
      return "timeout";
    case UpstreamError::kReset:
      return "reset";
    case UpstreamError::kProtocol:
      return "protocol";
    case UpstreamError::kTls:
      return "tls";
  }
  return "unknown";
}

}  // namespace llmtap::proxy

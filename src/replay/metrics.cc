#include "replay/metrics.h"

namespace llmtap::replay {

std::string_view ErrorKindName(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kNone:
      return "";
    case ErrorKind::kConnect:
      return "connect";
    case ErrorKind::kTls:
      return "tls";
    case ErrorKind::kTimeout:
      return "timeout";
    case ErrorKind::kHttp4xx:
      return "http_4xx";
    case ErrorKind::kHttp5xx:
      return "http_5xx";
    case ErrorKind::kProtocol:
      return "protocol";
    case ErrorKind::kCancelled:
      return "cancelled";
  }
  return "";
}

}  // namespace llmtap::replay

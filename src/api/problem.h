// A request an API's server refuses (400): the message and the field it is about.
#pragma once

#include <string>

namespace llmtap::api {

struct RequestProblem {
  std::string message;
  std::string param;  // empty: none
};

// Fills *problem; returns false (for `return Refuse(...)` in a parser).
inline bool Refuse(RequestProblem* problem, std::string message, std::string param) {
  problem->message = std::move(message);
  problem->param = std::move(param);
  return false;
}

}  // namespace llmtap::api

// Shared by the capture config tests: the error diagnostics level.
#pragma once

#include "capture/config.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <ostream>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace llmtap::config_test_util {

inline constexpr LogLevel kE = LogLevel::kError;

}  // namespace llmtap::config_test_util

// Counts heap allocations made through operator new, per thread, so tests can check that a
// path allocates nothing. Link the test binary with llmtap_alloc_counter, which replaces
// the global operator new/delete. Under ASan/TSan (which own new/delete) nothing is
// replaced and AllocationCountingEnabled() is false: such tests must skip.
#pragma once

#include <cstdint>

namespace llmtap::testing {

bool AllocationCountingEnabled();
// Allocations made by the calling thread since it started.
int64_t ThreadAllocations();
// Allocations made by all threads.
int64_t TotalAllocations();

}  // namespace llmtap::testing

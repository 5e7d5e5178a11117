#include "common/testing/alloc_counter.h"

#include <atomic>
#include <cstdlib>
#include <new>

namespace {
std::atomic<int64_t> g_total{0};
thread_local int64_t t_allocations = 0;
}  // namespace

namespace llmtap::testing {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
bool AllocationCountingEnabled() { return false; }
#else
bool AllocationCountingEnabled() { return true; }
#endif
int64_t ThreadAllocations() { return t_allocations; }
int64_t TotalAllocations() { return g_total.load(std::memory_order_relaxed); }

}  // namespace llmtap::testing

#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
// Not inlined: GCC would otherwise pair the inlined malloc/free with new/delete
// expressions and warn.
__attribute__((noinline)) void* operator new(size_t size) {
  ++t_allocations;
  g_total.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
__attribute__((noinline)) void operator delete(void* p) noexcept { std::free(p); }
__attribute__((noinline)) void operator delete(void* p, size_t) noexcept { std::free(p); }
#endif

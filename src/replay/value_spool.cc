// ValueSpool (summary.h): one metric's values in an unlinked temporary file, and their exact
// percentiles in a few passes over it with memory that does not grow with the run. Used by
// SummaryBuilder (summary.cc) for each metric and by RunOutputs (run_outputs.cc) for the causal
// shifts.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>

#include "replay/summary.h"

namespace llmtap::replay {
namespace {

// Order-preserving keys of doubles: a < b exactly when Key(a) < Key(b) (for -0.0 < +0.0 too,
// which Add avoids by storing every zero as +0.0).
uint64_t Key(double v) {
  uint64_t u;
  std::memcpy(&u, &v, sizeof(u));
  return (u >> 63) ? ~u : (u | (uint64_t{1} << 63));
}

double Value(uint64_t key) {
  const uint64_t u = (key >> 63) ? (key & ~(uint64_t{1} << 63)) : ~key;
  double v;
  std::memcpy(&v, &u, sizeof(v));
  return v;
}

constexpr size_t kBufferKeys = size_t{1} << 16;  // 512 KiB per spool, for writing and reading
constexpr int kBucketBits = 16;

}  // namespace

// Values in [lo, hi] (keys) of which `below` lie below lo and `count` inside, with the ranks
// (0-based, in sorted order) wanted from it.
struct ValueSpool::Range {
  uint64_t lo = 0, hi = 0;
  uint64_t below = 0, count = 0;
  std::vector<uint64_t> ranks;
  // This pass: count in buckets of 2^shift keys, or (few values left) collect them.
  bool collect = false;
  int shift = 0;
  std::vector<uint64_t> buckets;
  std::vector<uint64_t> values;
};

ValueSpool::~ValueSpool() {
  if (fd_ >= 0) ::close(fd_);
}

bool ValueSpool::Open(const std::vector<std::string>& dirs, std::string* error) {
  std::string why;
  for (const std::string& dir : dirs) {
    if (dir.empty()) continue;
    // Unlinked from the start: nothing is left behind, however the process ends.
    fd_ = ::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd_ < 0) {
      std::string path = dir + "/.llmtap-replay-values-XXXXXX";
      fd_ = mkostemp(path.data(), O_CLOEXEC);
      if (fd_ >= 0) ::unlink(path.c_str());
    }
    if (fd_ >= 0) {
      buffer_.reserve(kBufferKeys);
      return true;
    }
    why += (why.empty() ? "" : "; ") + dir + ": " + std::strerror(errno);
  }
  *error = "no temporary file for the statistics' values (" + why + "); they stay in memory";
  return false;
}

void ValueSpool::Add(double value) {
  if (!std::isfinite(value)) return;
  if (value == 0) value = 0;  // -0.0 -> +0.0
  const uint64_t key = Key(value);
  ++count_;
  sum_ += value;
  min_key_ = std::min(min_key_, key);
  max_key_ = std::max(max_key_, key);
  buffer_.push_back(key);
  if (fd_ >= 0 && buffer_.size() == kBufferKeys) Flush();
}

bool ValueSpool::Flush() {
  if (fd_ < 0) return true;  // in memory
  const char* p = reinterpret_cast<const char*>(buffer_.data());
  size_t left = error_.empty() ? buffer_.size() * sizeof(uint64_t) : 0;
  while (left > 0) {
    const ssize_t n = ::write(fd_, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      error_ = std::string("writing the statistics' temporary file: ") + std::strerror(errno);
      break;
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  buffer_.clear();
  return error_.empty();
}

// One read of the values: every range counts (or collects) the values that fall in it.
bool ValueSpool::Pass(std::vector<Range>* ranges, std::string* error) {
  auto take = [&](const uint64_t* keys, size_t got) {
    for (Range& r : *ranges) {
      const uint64_t lo = r.lo, hi = r.hi;
      if (r.collect) {
        for (size_t i = 0; i < got; ++i) {
          if (keys[i] >= lo && keys[i] <= hi) r.values.push_back(keys[i]);
        }
      } else {
        uint64_t* buckets = r.buckets.data();
        const int shift = r.shift;
        for (size_t i = 0; i < got; ++i) {
          if (keys[i] >= lo && keys[i] <= hi) ++buckets[(keys[i] - lo) >> shift];
        }
      }
    }
  };
  if (fd_ < 0) {
    take(buffer_.data(), buffer_.size());
    return true;
  }
  std::vector<uint64_t> keys(kBufferKeys);
  off_t offset = 0;
  for (;;) {
    const ssize_t n = ::pread(fd_, keys.data(), keys.size() * sizeof(uint64_t), offset);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      *error = std::string("reading the statistics' temporary file: ") + std::strerror(errno);
      return false;
    }
    if (n == 0) break;
    offset += n;
    take(keys.data(), static_cast<size_t>(n) / sizeof(uint64_t));
  }
  return true;
}

bool ValueSpool::Compute(report::Stats* stats, std::string* error) {
  *stats = report::Stats();
  if (fd_ >= 0 && !buffer_.empty()) Flush();
  if (!error_.empty()) {
    *error = error_;
    return false;
  }
  const size_t n = count_;
  stats->count = n;
  if (n == 0) return true;
  // The ranks report::Percentile reads.
  const double qs[] = {0.50, 0.90, 0.95, 0.99};
  std::vector<uint64_t> wanted;
  for (double q : qs) {
    const double h = q * static_cast<double>(n - 1);
    const size_t lo = static_cast<size_t>(std::floor(h));
    wanted.push_back(lo);
    wanted.push_back(std::min(lo + 1, n - 1));
  }
  std::sort(wanted.begin(), wanted.end());
  wanted.erase(std::unique(wanted.begin(), wanted.end()), wanted.end());

  std::map<uint64_t, uint64_t> found;  // rank -> key
  std::vector<Range> open(1);
  open[0].lo = min_key_;
  open[0].hi = max_key_;
  open[0].count = n;
  open[0].ranks = wanted;
  while (!open.empty()) {
    std::vector<Range> active;
    for (Range& r : open) {
      if (r.lo == r.hi) {
        for (uint64_t rank : r.ranks) found[rank] = r.lo;
        continue;
      }
      active.push_back(std::move(r));
    }
    if (active.empty()) break;
    const size_t collect_each = std::max<size_t>(1, collect_limit_ / active.size());
    for (Range& r : active) {
      r.collect = r.count <= collect_each;
      if (r.collect) {
        r.values.reserve(r.count);
      } else {
        r.shift = std::max(0, static_cast<int>(std::bit_width(r.hi - r.lo)) - kBucketBits);
        r.buckets.assign(static_cast<size_t>(((r.hi - r.lo) >> r.shift) + 1), 0);
      }
    }
    if (!Pass(&active, error)) return false;
    std::vector<Range> next;
    for (Range& r : active) {
      if (r.collect) {
        std::sort(r.values.begin(), r.values.end());
        for (uint64_t rank : r.ranks) found[rank] = r.values[rank - r.below];
        continue;
      }
      // Each wanted rank moves into its bucket; ranks in the same bucket share the next range.
      uint64_t before = r.below;
      size_t k = 0;
      for (size_t b = 0; b < r.buckets.size() && k < r.ranks.size(); ++b) {
        const uint64_t c = r.buckets[b];
        if (c == 0 || r.ranks[k] >= before + c) {
          before += c;
          continue;
        }
        Range sub;
        sub.lo = r.lo + (static_cast<uint64_t>(b) << r.shift);
        sub.hi = std::min(r.hi, sub.lo + ((uint64_t{1} << r.shift) - 1));
        sub.below = before;
        sub.count = c;
        while (k < r.ranks.size() && r.ranks[k] < before + c) sub.ranks.push_back(r.ranks[k++]);
        next.push_back(std::move(sub));
        before += c;
      }
    }
    open = std::move(next);
  }
  auto at = [&](uint64_t rank) { return Value(found.at(rank)); };
  auto percentile = [&](double q) {
    // report::Percentile's arithmetic, on the same two values.
    const double h = q * static_cast<double>(n - 1);
    const size_t lo = static_cast<size_t>(std::floor(h));
    const size_t hi = std::min(lo + 1, n - 1);
    return at(lo) + (h - static_cast<double>(lo)) * (at(hi) - at(lo));
  };
  stats->mean = static_cast<double>(sum_ / static_cast<long double>(n));
  stats->p50 = percentile(0.50);
  stats->p90 = percentile(0.90);
  stats->p95 = percentile(0.95);
  stats->p99 = percentile(0.99);
  stats->max = Value(max_key_);
  return true;
}

}  // namespace llmtap::replay

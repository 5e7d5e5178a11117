#include "replay/lookahead.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <utility>

#include "replay/inline.h"
#include "shadow/pair.h"

namespace llmtap::replay {
namespace {

// Rows out of order are named one by one up to this many, then only counted.
constexpr uint64_t kListedOutOfOrder = 20;

std::string FormatMs(double ms) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.6g", ms);
  return buf;
}

}  // namespace

Lookahead::Lookahead(Options options)
    : options_(std::move(options)),
      closed_loop_(options_.schedule.concurrency.has_value()),
      timestamps_(!closed_loop_ && !options_.schedule.rate),
      reader_(options_.load),
      chains_(static_cast<bool>(options_.captured)),
      planner_(options_.schedule, options_.duration_s) {
  mode_ = planner_.mode();
}

Lookahead::~Lookahead() { Stop(); }

bool Lookahead::Start(std::string* error) {
  if (!Planner::Validate(options_.schedule, error)) return false;
  if (!reader_.Open(error)) {
    *error = options_.load.input.path + ": " + *error;
    return false;
  }
  file_size_ = reader_.file_size();
  thread_ = std::thread([this] { ReaderMain(); });
  return true;
}

void Lookahead::ReaderMain() {
  // Reading ahead is background work: when the machine is short of CPU, the event loops that
  // send (at the default priority) go first. The queue keeps them supplied across such stalls.
  setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), 5);
  TraceRequest row;
  uint64_t slot = 0;
  size_t skips_noted = 0;
  std::string error;
  auto note_skips = [&] {
    const std::vector<std::string>& reasons = reader_.skip_reasons();
    for (; skips_noted < reasons.size(); ++skips_noted) {
      // "line N: reason" -> "PATH:N: reason (skipped)"
      Note(options_.note_prefix + reasons[skips_noted].substr(5) + " (skipped)");
    }
  };
  while (!cancelled_.load(std::memory_order_relaxed)) {
    if (!reader_.Next(&row)) {
      error = reader_.error();
      break;
    }
    const InputCounts& c = reader_.counts();
    rows_read_.store(c.rows + c.skipped, std::memory_order_relaxed);
    stored_position_.store(reader_.stored_position(), std::memory_order_relaxed);
    note_skips();
    // The sidecar's word on the row, before planning: a Responses row's chain decides its
    // session, and so its shard.
    std::optional<Options::Captured> captured;
    const bool responses = row.endpoint == api::Endpoint::kResponses;
    if (options_.captured) captured = options_.captured(row.line, row.timestamp_ms);
    if (responses) {
      const std::string_view own = captured ? captured->response_id : std::string_view();
      row.chain = chains_.Link(row.previous_response_id, own, &row.session_id);
      row.response_id = own;
    }
    const Planner::Decision d = planner_.Add(row.index, row.line, row.timestamp_ms, row.session_id);
    if (planner_.last_backstep_ms() > 0 && planner_.out_of_order() <= kListedOutOfOrder) {
      Note(options_.note_prefix + std::to_string(row.line) + ": timestamp " +
           FormatMs(*row.timestamp_ms) + " is " + FormatMs(planner_.last_backstep_ms()) +
           " ms before an earlier row's; sent at once, in file order" +
           (planner_.out_of_order() == kListedOutOfOrder ? " (further ones only counted)" : ""));
    }
    if (d.verdict == Planner::Verdict::kError) {
      error = d.reason;
      break;
    }
    if (d.verdict == Planner::Verdict::kStop) break;
    if (d.verdict == Planner::Verdict::kSkip) {
      reader_.Skip(row.line, d.reason);
      note_skips();
      continue;
    }
    if (d.verdict == Planner::Verdict::kPlanned) chains_.Planned(row.response_id, row.session_id);
    // A fidelity pair's group: the row's turn among its session's rows, counted over every
    // shard's rows so that each shard numbers a session's turns alike.
    const bool paired = captured && !captured->side.empty();
    if (paired && d.verdict == Planner::Verdict::kPlanned && !row.session_id.empty()) {
      row.turn = turns_[row.session_id]++;
    }
    if (d.verdict != Planner::Verdict::kPlanned || !d.this_shard) continue;
    reader_.BuildBody(&row);
    if (paired) {
      row.captured_side = captured->side;
      const shadow::RequestTraits traits = shadow::ReadRequestTraits(row.body);
      row.model = traits.model;
      row.temperature = traits.temperature;
    }
    if (responses && captured && !captured->response.empty()) {
      ResponseText text;
      if (ParseCapturedResponse(captured->response, &text)) {
        row.captured_output = std::move(text);
      }
    }
    DueRequest due;
    due.request = std::move(row);
    due.slot = slot++;
    due.scheduled_ms = d.due_ms;
    due.warmup = d.warmup;
    if (timestamps_ && options_.think_times && !due.request.session_id.empty() && captured &&
        captured->latency_ms) {
      due.captured_end_ms = d.due_ms + *captured->latency_ms / options_.schedule.speedup;
    }
    if (captured && captured->cached_tokens) {
      ++captured_cache_.requests;
      captured_cache_.prompt_tokens += *captured->prompt_tokens;
      captured_cache_.cached_tokens += *captured->cached_tokens;
    }
    planned_.fetch_add(1, std::memory_order_relaxed);
    if (!Push(std::move(due))) break;
  }
  note_skips();
  {
    std::lock_guard lock(mu_);
    totals_.counts = reader_.counts();
    totals_.planned_total = planner_.planned_total();
    totals_.out_of_order = planner_.out_of_order();
    totals_.hashed_model = reader_.counts().rows_hashed ? reader_.hashed_model() : "";
    totals_.captured_cache = captured_cache_;
  }
  Finish(std::move(error));
}

bool Lookahead::Push(DueRequest row) {
  const size_t bytes = Bytes(row);
  std::vector<std::function<void()>> wake;
  {
    std::unique_lock lock(mu_);
    auto fits = [&] {
      return queue_.empty() ||
             (queue_.size() < options_.max_rows && bytes_ + bytes <= options_.max_bytes);
    };
    if (!fits()) {
      // Full: wait until a quarter has drained (or it is empty), then refill in one go, so the
      // reader does not wake for every row taken.
      reader_waiting_ = true;
      primed_.notify_all();
      space_.wait(lock, [&] {
        return cancelled_.load(std::memory_order_relaxed) || (fits() && BelowLowWater());
      });
      reader_waiting_ = false;
    }
    if (cancelled_.load(std::memory_order_relaxed)) return false;
    bytes_ += bytes;
    queue_.push_back(std::move(row));
    max_rows_held_ = std::max(max_rows_held_, queue_.size());
    max_bytes_held_ = std::max(max_bytes_held_, bytes_);
    wake.swap(wakers_);
    if (primer_waiting_) primed_.notify_all();
  }
  for (const auto& w : wake) w();
  return true;
}

bool Lookahead::BelowLowWater() const {
  return queue_.empty() ||
         (queue_.size() <= options_.max_rows / 4 * 3 && bytes_ <= options_.max_bytes / 4 * 3);
}

void Lookahead::Finish(std::string error) {
  std::vector<std::function<void()>> wake;
  {
    std::lock_guard lock(mu_);
    error_ = std::move(error);
    finished_.store(true, std::memory_order_release);
    wake.swap(wakers_);
  }
  primed_.notify_all();
  for (const auto& w : wake) w();
}

void Lookahead::WaitPrimed(double horizon_ms, double max_wait_ms) {
  std::unique_lock lock(mu_);
  primer_waiting_ = true;
  auto ended = [&] {
    return finished_.load(std::memory_order_relaxed) || cancelled_.load(std::memory_order_relaxed);
  };
  // However long the first row takes (a slow pipe, the /v1/models lookup of hashed rows): the
  // schedule cannot start without it, and starting the clock earlier would make it late.
  primed_.wait(lock, [&] { return ended() || !queue_.empty(); });
  const auto deadline =
      std::chrono::steady_clock::now() +
      std::chrono::microseconds(static_cast<int64_t>(std::max(0.0, max_wait_ms) * 1000));
  primed_.wait_until(lock, deadline, [&] {
    if (ended() || reader_waiting_) return true;
    if (closed_loop_) return queue_.size() >= concurrency();
    return queue_.back().scheduled_ms - queue_.front().scheduled_ms >= horizon_ms;
  });
  primer_waiting_ = false;
}

Lookahead::Pop Lookahead::TryPop(DueRequest* out, const std::function<void()>& wake) {
  bool room = false;
  {
    std::lock_guard lock(mu_);
    if (cancelled_.load(std::memory_order_relaxed)) return Pop::kEnd;
    if (queue_.empty()) {
      if (finished_.load(std::memory_order_relaxed)) return Pop::kEnd;
      wakers_.push_back(wake);
      return Pop::kEmpty;
    }
    *out = std::move(queue_.front());
    queue_.pop_front();
    bytes_ -= Bytes(*out);
    room = reader_waiting_ && BelowLowWater();
  }
  if (room) space_.notify_one();
  return Pop::kRow;
}

void Lookahead::Cancel() {
  std::vector<std::function<void()>> wake;
  {
    std::lock_guard lock(mu_);
    cancelled_.store(true, std::memory_order_relaxed);
    wake.swap(wakers_);
  }
  space_.notify_all();
  primed_.notify_all();
  for (const auto& w : wake) w();
}

void Lookahead::Stop() {
  Cancel();
  if (thread_.joinable()) thread_.join();
}

std::vector<DueRequest> Lookahead::TakeQueued() {
  std::lock_guard lock(mu_);
  std::vector<DueRequest> rows(std::make_move_iterator(queue_.begin()),
                               std::make_move_iterator(queue_.end()));
  queue_.clear();
  bytes_ = 0;
  return rows;
}

void Lookahead::Note(std::string note) {
  std::lock_guard lock(mu_);
  notes_.push_back(std::move(note));
}

std::vector<std::string> Lookahead::TakeNotes() {
  std::lock_guard lock(mu_);
  return std::exchange(notes_, {});
}

std::string Lookahead::error() const {
  std::lock_guard lock(mu_);
  return error_;
}

Lookahead::Totals Lookahead::totals() const {
  std::lock_guard lock(mu_);
  return totals_;
}

size_t Lookahead::max_rows_held() const {
  std::lock_guard lock(mu_);
  return max_rows_held_;
}

size_t Lookahead::max_bytes_held() const {
  std::lock_guard lock(mu_);
  return max_bytes_held_;
}

}  // namespace llmtap::replay

// Capture-core benchmarks: the request-path cost of Capture::Offer and the writer's
// sustained throughput. See BENCHMARKS.md for the command and the results; the peer for
// the writer (dd to the same filesystem) is measured by bench/capture_bench.sh.
#include <benchmark/benchmark.h>

#include <unistd.h>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>

#include "capture/capture.h"
#include "capture/writer.h"

namespace llmtap {
namespace {

namespace fs = std::filesystem;

// A chat body of about `size` bytes as the Python SDK sends it (", " and ": " separators).
std::string ChatBody(size_t size) {
  static const std::string kWords =
      "The quick brown fox jumps over the lazy dog while the scheduler batches prefill "
      "and decode steps; \\\"quoted\\\" text, unicode caf\\u00e9, and a newline\\n. ";
  std::string head =
      R"({"model": "meta-llama/Llama-3.1-8B-Instruct", "messages": [{"role": "system", )"
      R"("content": "You are a helpful assistant."}, {"role": "user", "content": ")";
  std::string tail = R"("}], "max_tokens": 256, "temperature": 0.7, "stream": true})";
  std::string body = head;
  while (body.size() + tail.size() < size) body += kWords;
  body.resize(size - tail.size());
  // Do not end inside an escape sequence.
  while (body.back() == '\\') body.pop_back();
  return body + tail;
}

// An Env whose capture file discards writes, so Offer benchmarks measure the request path,
// not the disk.
class DiscardEnv final : public Env {
 public:
  class File final : public AppendFile {
   public:
    WriteResult Write(const char*, size_t size) override { return {static_cast<ssize_t>(size), 0}; }
    WriteResult Writev(const struct iovec* iov, int count) override {
      size_t n = 0;
      for (int i = 0; i < count; ++i) n += iov[i].iov_len;
      return {static_cast<ssize_t>(n), 0};
    }
    Status Truncate(uint64_t) override { return Status::Ok(); }
    Status Sync() override { return Status::Ok(); }
    Status Size(uint64_t* size) override {
      *size = 0;
      return Status::Ok();
    }
    Status Stat(FileInfo* info) override { return DiscardEnv::Describe(info); }
  };
  // The one (empty) file every name refers to, so the writer never sees it moved.
  static Status Describe(FileInfo* info) {
    *info = FileInfo();
    info->exists = info->is_regular = true;
    info->device = info->inode = 1;
    return Status::Ok();
  }
  int64_t NowMonotonicNanos() override { return base_->NowMonotonicNanos(); }
  int64_t NowWallNanos() override { return base_->NowWallNanos(); }
  Status CreateDirs(const std::string&, mode_t) override { return Status::Ok(); }
  Status Stat(const std::string&, FileInfo* info) override { return Describe(info); }
  Status OpenAppend(const std::string&, std::unique_ptr<AppendFile>* file) override {
    file->reset(new File());
    return Status::Ok();
  }
  Status ReadTail(const std::string&, size_t, std::string* tail) override {
    tail->clear();
    return Status::Ok();
  }
  Status Truncate(const std::string&, uint64_t) override { return Status::Ok(); }
  Status RenameNoReplace(const std::string&, const std::string&) override { return Status::Ok(); }
  Status RemoveFile(const std::string&) override { return Status::Ok(); }
  Status WriteFileAtomic(const std::string&, std::string_view) override { return Status::Ok(); }
  Status CheckWritableDir(const std::string&) override { return Status::Ok(); }
  std::string HostName() override { return "bench"; }
  int ProcessId() override { return 1; }

 private:
  Env* base_ = Env::Default();
};

class QuietLogger final : public Logger {
 public:
  void Log(LogLevel, std::string_view) override {}
};

CaptureOptions BenchOptions(Env* env, Logger* logger) {
  CaptureOptions o;
  o.config.path = "/nonexistent/bench.jsonl";
  o.env = env;
  o.logger = logger;
  return o;
}

void BM_OfferRecorded(benchmark::State& state) {
  DiscardEnv env;
  QuietLogger logger;
  Capture capture(BenchOptions(&env, &logger));
  (void)capture.Start();
  const std::string body = ChatBody(static_cast<size_t>(state.range(0)));
  for (auto _ : state) {
    OfferDecision o = capture.Offer("/v1/chat/completions", body);
    benchmark::DoNotOptimize(o);
  }
  capture.Stop();
  const CaptureCountersSnapshot c = capture.counters();
  if (c.recorded + c.dropped_queue_full != c.matched || c.invalid_body != 0) {
    state.SkipWithError("unexpected outcomes");
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * state.range(0));
  state.counters["dropped"] = static_cast<double>(c.dropped_queue_full);
}
BENCHMARK(BM_OfferRecorded)->Arg(1024)->Arg(4096)->Arg(65536);

void BM_OfferDisabled(benchmark::State& state) {
  CaptureOptions o = BenchOptions(nullptr, nullptr);
  o.enabled = false;
  Capture capture(o);
  const std::string body = ChatBody(4096);
  for (auto _ : state) benchmark::DoNotOptimize(capture.Offer("/v1/chat/completions", body));
}
BENCHMARK(BM_OfferDisabled);

void BM_OfferPathNotMatched(benchmark::State& state) {
  DiscardEnv env;
  QuietLogger logger;
  Capture capture(BenchOptions(&env, &logger));
  (void)capture.Start();
  const std::string body = ChatBody(4096);
  for (auto _ : state) benchmark::DoNotOptimize(capture.Offer("/v1/embeddings", body));
  capture.Stop();
}
BENCHMARK(BM_OfferPathNotMatched);

// Writer throughput to a real file, `range(0)` MiB of 4 KB lines, against dd bs=1M (run by
// bench/capture_bench.sh in the same run). Directory from LLMTAP_BENCH_DIR (default: ".").
//
// BM_Writer/drain: the records are queued before the writer starts; timed from Start() until
// Stop() returns (everything written and fdatasynced, as dd conv=fdatasync). This is the
// writer alone, as dd is dd alone.
// BM_Writer/with_producer: a producer thread makes each record as the request path does (a
// 4 KB copy into a recycled buffer) against a 64 MiB queue, retrying after 50 us when it is
// full; timed from the first record until Stop() returns. On 2 cores the producer, the
// writer and the kernel's writeback share the CPUs.
struct WriterBenchFile {
  WriterBenchFile() {
    const char* dir_env = std::getenv("LLMTAP_BENCH_DIR");
    path = (fs::path(dir_env ? dir_env : ".") /
            ("llmtap_writer_bench_" + std::to_string(::getpid()) + ".jsonl"))
               .string();
    Remove();
  }
  ~WriterBenchFile() { Remove(); }
  void Remove() {
    fs::remove(path);
    fs::remove(path + ".manifest.json");
  }
  std::string path;
};

std::string WriterBenchRecord() {
  std::string record(4096 - 40, 'x');  // + framing: about 4 KB lines
  record.front() = '{';
  record.back() = '}';
  return record;
}

// `with_producer`: see BM_Writer/with_producer above; otherwise BM_Writer/drain.
void BM_Writer(benchmark::State& state, bool with_producer) {
  const size_t n = (static_cast<size_t>(state.range(0)) << 20) / 4096;
  const std::string templ = WriterBenchRecord();
  QuietLogger logger;
  for (auto _ : state) {
    state.PauseTiming();
    WriterBenchFile file;
    CaptureOptions o;
    o.config.path = file.path;
    o.config.max_queue_bytes = with_producer ? 64 << 20 : static_cast<int64_t>(n * templ.size());
    o.logger = &logger;
    CaptureCounters counters;
    auto writer = std::make_unique<CaptureWriter>(o, Env::Default(), &logger, &counters);
    if (with_producer) {
      if (!writer->Start().ok()) state.SkipWithError("cannot open bench file");
      state.ResumeTiming();
      std::string record;  // as Capture::Offer does: one buffer, replaced by a spare
      for (size_t i = 0; i < n; ++i) {
        record.assign(templ);
        while (!writer->Enqueue(std::move(record), &record)) {
          std::this_thread::sleep_for(std::chrono::microseconds(50));
        }
      }
    } else {
      for (size_t i = 0; i < n; ++i) writer->Enqueue(std::string(templ));
      state.ResumeTiming();
      if (!writer->Start().ok()) state.SkipWithError("cannot open bench file");
    }
    writer->Stop();
    state.PauseTiming();
    if (counters.recorded.load() != n) state.SkipWithError("records lost");
    state.SetBytesProcessed(state.bytes_processed() +
                            static_cast<int64_t>(counters.bytes_written.load()));
    writer.reset();
    file.Remove();
    state.ResumeTiming();
  }
}
BENCHMARK_CAPTURE(BM_Writer, drain, false)
    ->Arg(1024)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(3);
BENCHMARK_CAPTURE(BM_Writer, with_producer, true)
    ->Arg(1024)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(3);

}  // namespace
}  // namespace llmtap

BENCHMARK_MAIN();

// llmtap._native: the capture core (capture/capture.h) and the response usage scanner
// (proxy/usage_scanner.h) for Python hosts, above all the ASGI middleware of python/llmtap/asgi.py.
// A thin adapter: every decision, format and file is the core's, exactly as in `llmtap proxy`.
//
// The GIL is released while the core compacts and queues a body (Offer), while Stop drains the
// queue, and while a response chunk is scanned; what runs then touches no Python object (the
// bytes objects it reads are immutable and kept alive by the caller's references).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "capture/capture.h"
#include "capture/config.h"
#include "common/env.h"
#include "common/log.h"
#include "proxy/usage_scanner.h"

namespace py = pybind11;

namespace llmtap::python {
namespace {

std::string_view View(const py::bytes& b) {
  char* data = nullptr;
  Py_ssize_t size = 0;
  PyBytes_AsStringAndSize(b.ptr(), &data, &size);
  return {data, static_cast<size_t>(size)};
}

// "dir/requests.jsonl" + "pid42" -> "dir/requests.pid42.jsonl": each worker process of a
// multi-process server writes its own file, with its own manifest and sidecars.
std::string TaggedPath(const std::string& path, const std::string& tag) {
  if (tag.empty()) return path;
  const size_t slash = path.rfind('/');
  const size_t dot = path.rfind('.');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash) ||
      dot == (slash == std::string::npos ? 0 : slash + 1)) {
    return path + "." + tag;
  }
  return path.substr(0, dot) + "." + tag + path.substr(dot);
}

// The response usage scanner, fed the response body as the app sends it.
class PyUsageScanner {
 public:
  explicit PyUsageScanner(std::string_view content_type)
      : scanner_(proxy::UsageScanner::ModeFor(content_type)) {}

  void Feed(const py::bytes& chunk) {
    const std::string_view bytes = View(chunk);
    if (bytes.size() < 4096) {
      scanner_.Feed(bytes);
      return;
    }
    py::gil_scoped_release unlocked;
    scanner_.Feed(bytes);
  }

  py::tuple Usage() const {
    const proxy::ResponseUsage& u = scanner_.usage();
    auto opt = [](const std::optional<int64_t>& v) -> py::object {
      return v ? py::object(py::int_(*v)) : py::object(py::none());
    };
    return py::make_tuple(opt(u.prompt_tokens), opt(u.completion_tokens), py::str(u.finish_reason));
  }

  const proxy::UsageScanner& scanner() const { return scanner_; }

 private:
  proxy::UsageScanner scanner_;
};

class PyCapture {
 public:
  // enable, args: NIM_CAPTURE_ENABLE and NIM_CAPTURE_ARGS as the process has them (None:
  // unset), parsed by the same rules and with the same warnings as the proxy's.
  // env: None, or a capsule named "llmtap.Env" holding the Env* the core's files go through
  // (a test seam: the _llmtap_fault module of the test build makes one).
  PyCapture(std::optional<std::string> enable, std::optional<std::string> args,
            const std::string& file_tag, const py::object& env) {
    ParsedCaptureConfig parsed =
        ParseCaptureConfig(enable ? std::optional<std::string_view>(*enable) : std::nullopt,
                           args ? std::optional<std::string_view>(*args) : std::nullopt);
    Logger* log = Logger::Stderr();
    for (const ConfigDiagnostic& d : parsed.diagnostics) log->Log(d.level, d.message);
    CaptureOptions options;
    options.enabled = parsed.enabled;
    options.config = std::move(parsed.config);
    options.config.path = TaggedPath(options.config.path, file_tag);
    if (!env.is_none()) {
      options.env = static_cast<Env*>(PyCapsule_GetPointer(env.ptr(), "llmtap.Env"));
      if (options.env == nullptr) throw py::error_already_set();
      env_ = env;  // the capsule's owner keeps the Env alive; so does this reference
    }
    capture_ = std::make_unique<Capture>(std::move(options));
  }

  // A destination that cannot be written is a warning (logged by the core); capture goes on
  // retrying, as in the proxy. Returns that first probe's result as text ("" when fine).
  std::string Start() {
    const Status s = capture_->Start();
    return s.ok() ? std::string() : s.message();
  }

  void Stop() {
    py::gil_scoped_release unlocked;
    capture_->Stop();
  }

  bool WouldRecord(std::string_view path) const { return capture_->WouldRecord(path); }

  // body: bytes, or a list of the bytes chunks the app received (joined here, unlocked).
  // headers: the ASGI scope's [(name, value), ...] (only read when the core wants them).
  // Returns the ticket for Report (0: nothing to report).
  uint64_t Offer(std::string_view path, const py::object& body, const py::object& headers) {
    std::vector<std::string_view> chunks;
    std::vector<py::bytes> held;  // keeps every chunk alive while the GIL is released
    if (py::isinstance<py::bytes>(body)) {
      held.push_back(py::reinterpret_borrow<py::bytes>(body));
    } else {
      for (const py::handle item : body) held.push_back(py::reinterpret_borrow<py::bytes>(item));
    }
    chunks.reserve(held.size());
    for (const py::bytes& b : held) chunks.push_back(View(b));

    std::vector<HeaderPairs::Pair> pairs;
    std::vector<py::bytes> held_headers;  // [name, value] pairs (tuples or lists) of bytes
    if (!headers.is_none() && capture_->wants_headers()) {
      for (const py::handle item : headers) {
        const py::sequence pair = py::reinterpret_borrow<py::sequence>(item);
        held_headers.push_back(pair[0].cast<py::bytes>());
        held_headers.push_back(pair[1].cast<py::bytes>());
      }
      for (size_t i = 0; i + 1 < held_headers.size(); i += 2) {
        pairs.emplace_back(View(held_headers[i]), View(held_headers[i + 1]));
      }
    }
    const std::string path_copy(path);
    uint64_t ticket = 0;
    {
      py::gil_scoped_release unlocked;
      thread_local std::string joined;
      std::string_view whole;
      if (chunks.size() == 1) {
        whole = chunks[0];
      } else {
        joined.clear();
        for (std::string_view c : chunks) joined.append(c);
        whole = joined;
      }
      if (pairs.empty()) {
        capture_->Offer(path_copy, whole, &ticket);
      } else {
        const HeaderPairs lookup(std::move(pairs));
        OfferContext context;
        context.headers = &lookup;
        capture_->Offer(path_copy, whole, context, &ticket);
      }
      if (joined.capacity() > (size_t{4} << 20)) joined = std::string();
    }
    return ticket;
  }

  void OfferOversized(std::string_view path, uint64_t size) {
    capture_->OfferOversized(path, size);
  }

  // The response of a recorded request ended: status 0 when none was sent; ttft_us -1 when no
  // body byte was sent; app_error when the app raised before finishing the response.
  void Report(uint64_t ticket, int status, int64_t ttft_us, int64_t total_us,
              const PyUsageScanner* scanner, bool cancelled, bool app_error) {
    ResponseOutcome o;
    o.status = status;
    o.ttft_us = ttft_us;
    o.total_us = total_us;
    if (scanner != nullptr) {
      const proxy::ResponseUsage& u = scanner->scanner().usage();
      o.prompt_tokens = u.prompt_tokens.value_or(-1);
      o.completion_tokens = u.completion_tokens.value_or(-1);
      o.SetFinishReason(u.finish_reason);
    }
    o.client_cancelled = cancelled;
    if (app_error) o.error = "app_error";
    capture_->ReportOutcome(ticket, o);
  }

  void Rotate() { capture_->RequestRotation(); }

  py::dict Counters() const {
    const CaptureCountersSnapshot c = capture_->counters();
    py::dict d;
    d["offered"] = c.offered;
    d["matched"] = c.matched;
    d["recorded"] = c.recorded;
    d["bytes_written"] = c.bytes_written;
    d["skipped_too_large"] = c.skipped_too_large;
    d["sampled_out"] = c.sampled_out;
    d["invalid_body"] = c.invalid_body;
    d["dropped_queue_full"] = c.dropped_queue_full;
    d["write_failed_records"] = c.write_failed_records;
    d["queued_records"] = c.queued_records;
    d["outcomes_written"] = c.outcomes_written;
    d["outcomes_lost"] = c.outcomes_lost;
    d["files_rotated"] = c.files_rotated;
    return d;
  }

  bool enabled() const { return capture_->enabled(); }
  bool outcomes() const { return capture_->outcomes_enabled(); }
  std::string path() const { return capture_->enabled() ? capture_->config().path : ""; }
  std::string manifest_path() const { return capture_->enabled() ? capture_->manifest_path() : ""; }
  int64_t max_request_bytes() const {
    return capture_->enabled() ? capture_->config().max_request_bytes : 0;
  }

 private:
  py::object env_;
  std::unique_ptr<Capture> capture_;
};

}  // namespace
}  // namespace llmtap::python

PYBIND11_MODULE(_native, m) {
  using llmtap::python::PyCapture;
  using llmtap::python::PyUsageScanner;
  m.doc() = "llmtap's capture core and response usage scanner (see llmtap.asgi)";

  py::class_<PyUsageScanner>(m, "UsageScanner")
      .def(py::init<std::string_view>(), py::arg("content_type"))
      .def("feed", &PyUsageScanner::Feed, py::arg("chunk"))
      .def_property_readonly("usage", &PyUsageScanner::Usage,
                             "(prompt_tokens or None, completion_tokens or None, finish_reason)");

  py::class_<PyCapture>(m, "Capture")
      .def(py::init<std::optional<std::string>, std::optional<std::string>, const std::string&,
                    const py::object&>(),
           py::arg("enable"), py::arg("args"), py::arg("file_tag") = "", py::kw_only(),
           py::arg("env") = py::none())
      .def("start", &PyCapture::Start)
      .def("stop", &PyCapture::Stop)
      .def("would_record", &PyCapture::WouldRecord, py::arg("path"))
      .def("offer", &PyCapture::Offer, py::arg("path"), py::arg("body"),
           py::arg("headers") = py::none())
      .def("offer_oversized", &PyCapture::OfferOversized, py::arg("path"), py::arg("size"))
      .def("report", &PyCapture::Report, py::arg("ticket"), py::arg("status"), py::arg("ttft_us"),
           py::arg("total_us"), py::arg("scanner"), py::arg("cancelled"), py::arg("app_error"))
      .def("rotate", &PyCapture::Rotate)
      .def("counters", &PyCapture::Counters)
      .def_property_readonly("enabled", &PyCapture::enabled)
      .def_property_readonly("outcomes", &PyCapture::outcomes)
      .def_property_readonly("path", &PyCapture::path)
      .def_property_readonly("manifest_path", &PyCapture::manifest_path)
      .def_property_readonly("max_request_bytes", &PyCapture::max_request_bytes);
}

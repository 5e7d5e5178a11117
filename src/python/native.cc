// llmtap._native: the capture core (capture/capture.h) and the response reader
// (proxy/response_reader.h) for Python hosts, above all the ASGI middleware of
// python/llmtap/asgi.py. A thin adapter: every decision, format and file is the core's, exactly as
// in `llmtap proxy`.
//
// The GIL is released while the core compacts and queues a body (Offer) and while Stop drains
// the queue; what runs then touches no Python object (the bytes objects it reads are immutable
// and kept alive by the caller's references). The response reader reads each response chunk in
// place, under the GIL (a few ns a byte, less than releasing it would cost).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <cstdint>
#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "api/endpoints.h"
#include "capture/capture.h"
#include "capture/config.h"
#include "common/ascii.h"
#include "common/env.h"
#include "common/log.h"
#include "proxy/response_reader.h"

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
  // Returns the ticket for the response's outcome (ResponseWatch; 0: nothing to report).
  uint64_t Offer(std::string_view path, const py::object& body, const py::object& headers) {
    // `path` points into the caller's str object and each chunk into a bytes object; the
    // caller's references keep them alive (and unchanged) while the GIL is released.
    uint64_t ticket = 0;
    if (PyBytes_Check(body.ptr()) && (headers.is_none() || !capture_->wants_headers())) {
      // The common case: the body in one message, no header lookup. No allocation here.
      const std::string_view whole = View(py::reinterpret_borrow<py::bytes>(body));
      py::gil_scoped_release unlocked;
      capture_->Offer(path, whole, &ticket);
      return ticket;
    }
    std::vector<std::string_view> chunks;
    std::vector<py::bytes> held;  // keeps every chunk alive while the GIL is released
    if (PyBytes_Check(body.ptr())) {
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
        capture_->Offer(path, whole, &ticket);
      } else {
        const HeaderPairs lookup(std::move(pairs));
        OfferContext context;
        context.headers = &lookup;
        capture_->Offer(path, whole, context, &ticket);
      }
      if (joined.capacity() > (size_t{4} << 20)) joined = std::string();
    }
    return ticket;
  }

  void OfferOversized(std::string_view path, uint64_t size) {
    capture_->OfferOversized(path, size);
  }

  void Rotate() { capture_->RequestRotation(); }
  void ReportOutcome(uint64_t ticket, ResponseOutcome&& o) {
    capture_->ReportOutcome(ticket, std::move(o));
  }
  // What a response scanner is given to collect text with (capture_responses), else 0.
  size_t max_text_bytes() const {
    return capture_->responses_enabled()
               ? static_cast<size_t>(capture_->config().max_response_bytes)
               : 0;
  }

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
    d["non_standard_json"] = c.non_standard_json;
    d["dropped_queue_full"] = c.dropped_queue_full;
    d["write_failed_records"] = c.write_failed_records;
    d["queued_records"] = c.queued_records;
    d["outcomes_written"] = c.outcomes_written;
    d["outcomes_lost"] = c.outcomes_lost;
    d["files_rotated"] = c.files_rotated;
    d["responses_truncated"] = c.responses_truncated;
    return d;
  }

  bool enabled() const { return capture_->enabled(); }
  bool outcomes() const { return capture_->outcomes_enabled(); }
  bool wants_headers() const { return capture_->wants_headers(); }
  std::string path() const { return capture_->enabled() ? capture_->config().path : ""; }
  std::string manifest_path() const { return capture_->enabled() ? capture_->manifest_path() : ""; }
  int64_t max_request_bytes() const {
    return capture_->enabled() ? capture_->config().max_request_bytes : 0;
  }

 private:
  py::object env_;
  std::unique_ptr<Capture> capture_;
};

// The ASGI `send` of a recorded request, wrapped (outcomes on): each message the app sends is
// looked at here (the status, the first body byte, the end, the body through the response reader)
// and passed on unchanged: the call returns the server's send(message) awaitable itself, so no
// Python frame is added. Finish() reports the outcome once the app has returned or raised.
class PyResponseWatch {
 public:
  PyResponseWatch(PyCapture* capture, py::object send, int64_t started_ns, std::string_view path)
      : capture_(capture),
        send_(std::move(send)),
        started_ns_(started_ns),
        endpoint_(
            api::EndpointForPath(path.substr(0, path.find('?'))).value_or(api::Endpoint::kOther)) {}

  py::object Call(const py::dict& message) {
    if (ticket_ == 0) return send_(message);
    const char* type = PyUnicode_AsUTF8(PyDict_GetItemString(message.ptr(), "type"));
    if (type == nullptr) {
      PyErr_Clear();
      return send_(message);
    }
    const std::string_view kind(type);
    if (kind == "http.response.body") {
      PyObject* body = PyDict_GetItemString(message.ptr(), "body");  // borrowed, or null
      if (body != nullptr && PyBytes_Check(body) && PyBytes_GET_SIZE(body) > 0) {
        if (first_byte_ns_ == 0) first_byte_ns_ = NowNs();
        if (reader_) reader_->Feed({PyBytes_AS_STRING(body), size_t(PyBytes_GET_SIZE(body))});
      }
      PyObject* more = PyDict_GetItemString(message.ptr(), "more_body");
      if (more == nullptr || PyObject_IsTrue(more) == 0) end_ns_ = NowNs();
    } else if (kind == "http.response.start") {
      PyObject* status = PyDict_GetItemString(message.ptr(), "status");
      if (status != nullptr && PyLong_Check(status))
        status_ = static_cast<int>(PyLong_AsLong(status));
      std::string content_type, content_encoding;  // the first of each
      bool have_type = false, have_encoding = false;
      PyObject* headers = PyDict_GetItemString(message.ptr(), "headers");
      if (headers != nullptr) {
        for (const py::handle item : py::reinterpret_borrow<py::iterable>(headers)) {
          const py::sequence pair = py::reinterpret_borrow<py::sequence>(item);
          const py::object name = pair[0];
          const py::object value = pair[1];
          if (!PyBytes_Check(name.ptr()) || !PyBytes_Check(value.ptr())) continue;
          const std::string_view n(PyBytes_AS_STRING(name.ptr()),
                                   size_t(PyBytes_GET_SIZE(name.ptr())));
          const std::string_view v(PyBytes_AS_STRING(value.ptr()),
                                   size_t(PyBytes_GET_SIZE(value.ptr())));
          if (!have_type && AsciiEqualsIgnoreCase(n, "content-type")) {
            content_type = v;
            have_type = true;
          } else if (!have_encoding && AsciiEqualsIgnoreCase(n, "content-encoding")) {
            content_encoding = v;
            have_encoding = true;
          }
        }
      }
      reader_.emplace(endpoint_, content_type, content_encoding, capture_->max_text_bytes());
    }
    return send_(message);
  }

  // The response's end, or the app's: reports the outcome of a recorded request (once). An app
  // that raised before sending a status gets the 500 the server then answers.
  void Finish(bool app_error) {
    if (ticket_ == 0) return;
    ResponseOutcome o;
    o.status = status_ == 0 && app_error ? 500 : status_;
    o.ttft_us = first_byte_ns_ != 0 ? (first_byte_ns_ - started_ns_) / 1000 : -1;
    o.total_us = ((end_ns_ != 0 ? end_ns_ : NowNs()) - started_ns_) / 1000;
    if (reader_) reader_->Finish(&o);
    o.client_cancelled = disconnected_ && end_ns_ == 0;
    if (app_error) o.error = "app_error";
    capture_->ReportOutcome(ticket_, std::move(o));
    ticket_ = 0;
  }

  uint64_t ticket_ = 0;        // set once the body was offered; 0: not recorded, nothing to watch
  bool disconnected_ = false;  // the client went away (http.disconnect, or the app cancelled)

 private:
  // CLOCK_MONOTONIC in nanoseconds: Python's time.monotonic_ns().
  static int64_t NowNs() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
  }

  PyCapture* capture_;  // kept alive by the Python object (keep_alive)
  py::object send_;
  const int64_t started_ns_;
  int64_t first_byte_ns_ = 0;
  int64_t end_ns_ = 0;
  int status_ = 0;
  const api::Endpoint endpoint_;  // the API of the request's path
  std::optional<proxy::ResponseReader> reader_;
};

}  // namespace
}  // namespace llmtap::python

PYBIND11_MODULE(_native, m) {
  using llmtap::python::PyCapture;
  using llmtap::python::PyResponseWatch;
  m.doc() = "llmtap's capture core, and a response watch for its outcomes (see llmtap.asgi)";

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
      .def("rotate", &PyCapture::Rotate)
      .def("counters", &PyCapture::Counters)
      .def_property_readonly("enabled", &PyCapture::enabled)
      .def_property_readonly("outcomes", &PyCapture::outcomes)
      .def_property_readonly("wants_headers", &PyCapture::wants_headers)
      .def_property_readonly("path", &PyCapture::path)
      .def_property_readonly("manifest_path", &PyCapture::manifest_path)
      .def_property_readonly("max_request_bytes", &PyCapture::max_request_bytes);

  py::class_<PyResponseWatch>(m, "ResponseWatch")
      .def(py::init<PyCapture*, py::object, int64_t, std::string_view>(), py::arg("capture"),
           py::arg("send"), py::arg("started_ns"), py::arg("path") = "", py::keep_alive<1, 2>())
      .def("__call__", &PyResponseWatch::Call, py::arg("message"))
      .def("finish", &PyResponseWatch::Finish, py::arg("app_error"))
      .def_readwrite("ticket", &PyResponseWatch::ticket_)
      .def_readwrite("disconnected", &PyResponseWatch::disconnected_);
}

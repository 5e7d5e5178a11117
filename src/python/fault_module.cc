// _llmtap_fault: a test-only extension module (built with the tests, never in the wheel) that
// gives llmtap._native.Capture a slow or full disk through the capture core's Env seam
// (common/testing/fault_env.h), as llmtap_slow_disk does for the proxy:
//
//   disk = _llmtap_fault.FaultDisk(); disk.set_write_delay_us(1_000_000)
//   CaptureMiddleware(app, core_env=disk.env)
//
// stall() makes every write block until unstall(): a disk as slow as the test wants, ended by
// an event of the test's rather than by a time.
#include <pybind11/pybind11.h>

#include <chrono>
#include <cstdint>

#include "common/testing/fault_env.h"

namespace py = pybind11;

namespace {

class FaultDisk {
 public:
  FaultDisk()
      : env_(new llmtap::testing::FaultEnv(), "llmtap.Env", [](PyObject* capsule) {
          delete static_cast<llmtap::testing::FaultEnv*>(
              PyCapsule_GetPointer(capsule, "llmtap.Env"));
        }) {}

  llmtap::testing::FaultEnv& env() {
    return *static_cast<llmtap::testing::FaultEnv*>(PyCapsule_GetPointer(env_.ptr(), "llmtap.Env"));
  }
  py::object capsule() const { return env_; }

 private:
  py::capsule env_;  // owns the FaultEnv; llmtap._native.Capture keeps a reference to it
};

}  // namespace

PYBIND11_MODULE(_llmtap_fault, m) {
  py::class_<FaultDisk>(m, "FaultDisk")
      .def(py::init<>())
      .def_property_readonly("env", &FaultDisk::capsule)
      .def("set_write_delay_us",
           [](FaultDisk& d, int64_t us) { d.env().SetWriteDelay(std::chrono::microseconds(us)); })
      .def("set_disk_space", [](FaultDisk& d, int64_t bytes) { d.env().SetDiskSpace(bytes); })
      .def("stall", [](FaultDisk& d) { d.env().Stall(); })
      .def("unstall", [](FaultDisk& d) { d.env().Unstall(); });
}

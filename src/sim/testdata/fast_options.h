// SimOptions for tests that run the simulator in-process: a free port and next to no modelled
// time (1 ms to the first token, no prefill time, 0.2 ms a token, no jitter), so that a test
// waits on the code it tests rather than on the model. Each test sets on its copy what it needs
// besides (threads, seed, output lengths, a slower stream). It serves every model name
// (any_model): the tests that use it are about what sits in front of the sim, whatever model their
// requests name. Used by src/sim/server_test.cc (which turns any_model off: it tests the sim's
// own model-name rules), src/proxy/server_test.cc and tests/report/server_metrics_test.cc.
#pragma once

#include "sim/options.h"

namespace llmtap::sim::testing {

inline SimOptions FastSimOptions() {
  SimOptions o;
  o.port = 0;
  o.timing.ttft_ms = 1;
  o.timing.prefill_us_per_token = 0;
  o.timing.itl_ms = 0.2;
  o.timing.itl_jitter_ms = 0;
  o.any_model = true;
  return o;
}

}  // namespace llmtap::sim::testing

// Transceiver's calls that may run while another thread stops it (transceiver.h, CallGuard).
#pragma once

#include <stdexcept>
#include <string>

#include "rt/host/transceiver.h"

namespace rt::host {

// Counts a call in progress for stop(); refuses one that begins after stop() did.
class Transceiver::CallGuard {
 public:
  CallGuard(const Transceiver& t, const char* what) : t_(t) {
    t_.active_calls_.fetch_add(1, std::memory_order_acq_rel);
    if (t_.closing_.load(std::memory_order_acquire)) {
      t_.active_calls_.fetch_sub(1, std::memory_order_acq_rel);
      throw std::logic_error(std::string(what) + ": the transceiver is stopped");
    }
  }
  ~CallGuard() { t_.active_calls_.fetch_sub(1, std::memory_order_acq_rel); }
  CallGuard(const CallGuard&) = delete;
  CallGuard& operator=(const CallGuard&) = delete;

 private:
  const Transceiver& t_;
};

}  // namespace rt::host

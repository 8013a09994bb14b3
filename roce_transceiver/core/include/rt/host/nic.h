// What carries frames between a wire and the queues' rings: the far side of every rx ring
// (it produces) and tx ring (it drains), as a ConnectX is in GPUNetIO's Ethernet mode. A
// Transceiver is its memory, one Nic and one Executor; which Nic is the configuration's
// `nic` (make_nic), or one the caller brings (a test's, a user's).
//
//   loopback  the host is the wire: inject, preload, collect, the far end's runs
//             (loopback_nic.h)
//   socket    a CPU thread joining the rings to Linux (socket_nic.h)
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "rt/host/socket_nic.h"
#include "rt/queues/steering.h"

namespace rt::host {

// One counter or fact of a Nic, by name: a count, or a text.
using NicValue = std::variant<uint64_t, std::string>;
using NicFields = std::vector<std::pair<std::string, NicValue>>;

class Nic {
 public:
  virtual ~Nic() = default;
  virtual std::string name() const = 0;
  // The rings a Nic serves, one a queue, from where their far sides stand, and how frames
  // pick their queue: given once, when the Transceiver has laid them out (before start()),
  // and valid until detach().
  virtual void attach(std::vector<NicQueue> queues, const Steering& steering) {
    static_cast<void>(queues);
    static_cast<void>(steering);
  }
  // Before the executor starts (a NIC that cannot start fails the Transceiver's start() with
  // nothing running): frames may flow from now on, and the engines find them when they run.
  virtual void start() {}
  // Idempotent: the wire goes quiet. Throws what failed while it ran.
  virtual void stop() {}
  // After stop(), once the engines have stopped and no call of the Transceiver's runs: the
  // rings are freed next, and what the Nic made for them goes now.
  virtual void detach() {}
  // What failed while it runs; empty while it is fine.
  virtual std::string error() const { return {}; }
  // Its counters (the stats' nic_* keys) and what it is (nic_info()'s keys); after stop(),
  // what they were then.
  virtual NicFields stats() const { return {}; }
  virtual NicFields info() const { return {}; }
};

// The socket NIC behind the interface: its sockets are opened at start(), which comes before
// the engines start, so that a socket that cannot be opened fails with nothing running.
class SocketWireNic final : public Nic {
 public:
  explicit SocketWireNic(SocketNicConfig config) : cfg_(std::move(config)) {}
  std::string name() const override { return "socket"; }
  void attach(std::vector<NicQueue> queues, const Steering& steering) override;
  void start() override;
  void stop() override;
  std::string error() const override;
  NicFields stats() const override;
  NicFields info() const override;

 private:
  SocketNicConfig cfg_;
  std::vector<NicQueue> queues_;
  Steering steering_{};
  std::unique_ptr<SocketNic> nic_;
  NicFields final_stats_, final_info_;
  bool stopped_ = false;
};

}  // namespace rt::host

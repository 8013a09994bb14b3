// nic: doca, a ConnectX driven through DOCA GPUNetIO by the persistent kernel. Its host set-up
// is not built yet: making one probes the machine the way the backend will load it
// (doca_probe.h) and refuses, saying in one message everything that is missing here and
// which NICs do work, so that a deployment file is checked anywhere and fails clearly.
#pragma once

#include <string>

#include "rt/host/nic.h"

namespace rt::host {

struct DocaNicConfig {
  std::string device;    // the RDMA device (doca.device)
  std::string sdk_path;  // the DOCA SDK's prefix (DOCA_PATH, else its usual one)
  bool sdk_path_chosen;  // DOCA_PATH set: no hint to set it
};

class DocaNic final : public Nic {
 public:
  explicit DocaNic(const DocaNicConfig& config);  // throws std::runtime_error: not built yet
  std::string name() const override { return "doca"; }
};

}  // namespace rt::host

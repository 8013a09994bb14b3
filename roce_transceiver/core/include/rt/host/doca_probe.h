// What the DOCA backend (nic: doca) would load on this machine, found the way it will load it:
// the DOCA SDK's host libraries by dlopen from the SDK's prefix, and the RDMA devices through
// libibverbs' ibv_get_device_list (also dlopen'ed, so the package builds and imports where
// neither exists). Nothing here needs the SDK's headers.
#pragma once

#include <string>
#include <vector>

namespace rt::host {

struct DocaProbe {
  std::string sdk_path;                        // the prefix searched
  std::vector<std::string> libraries_found;    // full paths of the DOCA libraries loaded
  std::vector<std::string> libraries_missing;  // of the ones the backend needs
  std::vector<std::string> symbols_missing;    // host API entry points no library exports
  bool ibverbs_loaded = false;
  std::string ibverbs_error;              // why libibverbs did not load
  std::vector<std::string> rdma_devices;  // names ibv_get_device_list returned
};

// The host API entry points the backend calls (QP/CQ creation and export, connect, proxy
// progress, memory): every one must resolve in the libraries found.
const std::vector<std::string>& doca_required_symbols();

DocaProbe probe_doca(const std::string& sdk_path);

// What the probe says is missing, in words; empty where nothing is. `hint_doca_path`: the SDK
// path was not the user's choice (no DOCA_PATH), so the message says how to set it.
std::string doca_sdk_problem(const DocaProbe& probe, bool hint_doca_path);
std::string doca_device_problem(const DocaProbe& probe, const std::string& device);
// Why nic 'doca' with RDMA device `device` cannot start on this machine: everything missing,
// and which NICs do work here. One message, for the DocaNic's refusal and doctor alike.
std::string doca_refusal(const DocaProbe& probe, const std::string& device, bool hint_doca_path);

}  // namespace rt::host

// Looking for the DOCA SDK and RDMA devices the way the backend will use them (doca_probe.h).
#include "rt/host/doca_probe.h"

#include <dlfcn.h>

namespace rt::host {
namespace {

const std::vector<std::string> kLibraries = {"libdoca_common.so", "libdoca_verbs.so",
                                             "libdoca_gpunetio.so"};
// Where SDK installs put them: Debian multiarch (x86_64 hosts, aarch64 IGX / Thor), then flat.
const std::vector<std::string> kLibDirs = {"lib/x86_64-linux-gnu", "lib/aarch64-linux-gnu", "lib64",
                                           "lib"};

// libibverbs' own types stay opaque: only pointers to them cross this file.
struct IbvDevice;
using GetDeviceList = IbvDevice** (*)(int*);
using FreeDeviceList = void (*)(IbvDevice**);
using GetDeviceName = const char* (*)(IbvDevice*);

void probe_ibverbs(DocaProbe& out) {
  void* lib = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* e = dlerror();
    out.ibverbs_error = e ? e : "libibverbs.so.1 not found";
    return;
  }
  out.ibverbs_loaded = true;
  auto list = reinterpret_cast<GetDeviceList>(dlsym(lib, "ibv_get_device_list"));
  auto free_list = reinterpret_cast<FreeDeviceList>(dlsym(lib, "ibv_free_device_list"));
  auto name = reinterpret_cast<GetDeviceName>(dlsym(lib, "ibv_get_device_name"));
  if (!list || !free_list || !name) {
    out.ibverbs_error = "libibverbs.so.1 lacks ibv_get_device_list";
    dlclose(lib);
    return;
  }
  int n = 0;
  if (IbvDevice** devices = list(&n)) {
    for (int i = 0; i < n; ++i) out.rdma_devices.emplace_back(name(devices[i]));
    free_list(devices);
  }
  dlclose(lib);
}

}  // namespace

const std::vector<std::string>& doca_required_symbols() {
  static const std::vector<std::string> symbols = {
      "doca_gpu_create",
      "doca_gpu_destroy",
      "doca_verbs_dev_open",
      "doca_gpu_verbs_create_qp_hl",
      "doca_gpu_verbs_destroy_qp_hl",
      "doca_gpu_verbs_get_qp_dev",
      "doca_verbs_qp_get_qpn",
      "doca_verbs_qp_attr_create",
      "doca_verbs_qp_modify",
      "doca_verbs_ah_attr_create",
      "doca_gpu_verbs_cpu_proxy_progress",
      "doca_gpu_verbs_query_last_error",
      "doca_gpu_mem_alloc",
      "doca_gpu_mem_free",
      "doca_gpu_get_dmabuf_fd",
  };
  return symbols;
}

DocaProbe probe_doca(const std::string& sdk_path) {
  DocaProbe out;
  out.sdk_path = sdk_path;
  std::vector<void*> handles;
  for (const std::string& lib : kLibraries) {
    void* handle = nullptr;
    for (const std::string& dir : kLibDirs) {
      const std::string path = sdk_path + "/" + dir + "/" + lib;
      if ((handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL))) {
        out.libraries_found.push_back(path);
        break;
      }
    }
    if (handle)
      handles.push_back(handle);
    else
      out.libraries_missing.push_back(lib);
  }
  for (const std::string& symbol : doca_required_symbols()) {
    bool found = false;
    for (void* h : handles) found = found || dlsym(h, symbol.c_str()) != nullptr;
    if (!found) out.symbols_missing.push_back(symbol);
  }
  for (void* h : handles) dlclose(h);
  probe_ibverbs(out);
  return out;
}

namespace {

std::string joined(const std::vector<std::string>& items, size_t first, size_t count) {
  std::string out;
  for (size_t i = first; i < items.size() && i < first + count; ++i)
    out += (out.empty() ? "" : ", ") + items[i];
  return out;
}

}  // namespace

std::string doca_sdk_problem(const DocaProbe& p, bool hint_doca_path) {
  const std::string at = "the DOCA SDK at " + p.sdk_path;
  if (p.libraries_found.empty())
    return "no DOCA SDK found at " + p.sdk_path + ": none of " +
           joined(p.libraries_missing, 0, p.libraries_missing.size()) +
           (hint_doca_path ? " (set DOCA_PATH to the SDK's prefix)" : "");
  if (!p.libraries_missing.empty())
    return at + " lacks " + joined(p.libraries_missing, 0, p.libraries_missing.size());
  if (!p.symbols_missing.empty()) {
    const size_t n = p.symbols_missing.size();
    return at + " does not export " + std::to_string(n) +
           " entry points the backend calls: " + joined(p.symbols_missing, 0, 4) +
           (n > 4 ? " and " + std::to_string(n - 4) + " more" : "");
  }
  return {};
}

std::string doca_device_problem(const DocaProbe& p, const std::string& device) {
  if (!p.ibverbs_loaded)
    return "libibverbs did not load (" + p.ibverbs_error +
           "; apt-get install libibverbs1 ibverbs-providers)";
  if (p.rdma_devices.empty()) return "ibv_get_device_list found no device";
  for (const std::string& d : p.rdma_devices)
    if (d == device) return {};
  return "RDMA device '" + device +
         "' not present (present: " + joined(p.rdma_devices, 0, p.rdma_devices.size()) + ")";
}

std::string doca_refusal(const DocaProbe& p, const std::string& device, bool hint_doca_path) {
  std::string problems;
  for (const std::string& x : {doca_sdk_problem(p, hint_doca_path), doca_device_problem(p, device),
                               std::string("this build has no DOCA GPUNetIO backend host set-up "
                                           "yet (docs/deployment.md)")})
    if (!x.empty()) problems += (problems.empty() ? "" : "; ") + x;
  return "nic 'doca' cannot start here: " + problems +
         ". NICs that work here: loopback (in memory), socket (udp mode; packet mode as root)";
}

}  // namespace rt::host

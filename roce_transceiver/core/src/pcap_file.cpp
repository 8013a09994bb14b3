// pcap capture files (rt/host/pcap_file.h).
#include "rt/host/pcap_file.h"

#include <cerrno>
#include <cstring>
#include <ctime>
#include <stdexcept>

namespace rt::host {

PcapFile::PcapFile(const std::string& path) {
  if (path.empty()) return;
  f_ = std::fopen(path.c_str(), "wb");
  if (!f_) throw std::runtime_error("capture: cannot open '" + path + "': " + std::strerror(errno));
  const uint32_t header[6] = {0xA1B23C4Du, 0x00040002u, 0, 0, 65535, 1};
  std::fwrite(header, sizeof header, 1, f_);
}

PcapFile::~PcapFile() {
  if (f_) std::fclose(f_);
}

void PcapFile::write(const uint8_t* frame, uint32_t len, uint64_t t_ns) {
  if (!f_) return;
  const uint32_t rec[4] = {uint32_t(t_ns / 1000000000u), uint32_t(t_ns % 1000000000u), len, len};
  std::fwrite(rec, sizeof rec, 1, f_);
  std::fwrite(frame, 1, len, f_);
}

uint64_t wall_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return uint64_t(ts.tv_sec) * 1000000000u + uint64_t(ts.tv_nsec);
}

}  // namespace rt::host

// A pcap capture file (nanosecond timestamps, Ethernet link type: what Wireshark and tshark
// open), written frame by frame by one thread. An empty path makes a capture that writes
// nothing.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace rt::host {

class PcapFile {
 public:
  explicit PcapFile(const std::string& path);  // throws, naming the path, if it cannot open
  ~PcapFile();
  PcapFile(const PcapFile&) = delete;
  PcapFile& operator=(const PcapFile&) = delete;
  void write(const uint8_t* frame, uint32_t len, uint64_t t_ns);

 private:
  std::FILE* f_ = nullptr;
};

// Wall-clock nanoseconds (CLOCK_REALTIME): what capture timestamps carry.
uint64_t wall_ns();

}  // namespace rt::host

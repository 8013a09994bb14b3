// A pcap capture file (nanosecond timestamps, Ethernet link type: what Wireshark and tshark
// open), written frame by frame by one thread. An empty path makes a capture that writes
// nothing.
//
// Records are buffered whole and written with write(2), every one checked: the file only ever
// ends at a record boundary, so a reader gets every record in it. The first failure (a full
// disk, a file size limit, an I/O error) stops the capture: the file is cut back to its last
// whole record where it can be, the error names the file and errno, and every frame the file
// does not hold from then on is counted in lost(). Writing never throws: the loop that
// captures goes on.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace rt::host {

class PcapFile {
 public:
  // Opens the file and writes its header; throws, naming the path and errno, if either fails
  // (a capture that cannot even hold its header is refused before any traffic).
  explicit PcapFile(const std::string& path);
  ~PcapFile();  // close(), any error dropped: call close() to see it
  PcapFile(const PcapFile&) = delete;
  PcapFile& operator=(const PcapFile&) = delete;

  void write(const uint8_t* frame, uint32_t len, uint64_t t_ns);
  // Writes what is buffered (the capturing thread calls it when it goes quiet).
  void flush();
  // flush(), then close the file; idempotent.
  void close();

  // Frames not in the file because of a write error (plus 1 if closing it failed); any thread.
  uint64_t lost() const { return lost_.load(std::memory_order_relaxed); }
  // The first error, naming the file; empty while the capture is whole. Any thread.
  std::string error() const;

 private:
  void fail(const std::string& what, int err);
  std::string path_;
  int fd_ = -1;
  std::vector<uint8_t> buf_;  // whole records, not yet written
  uint64_t buffered_ = 0;     // records in buf_
  uint64_t written_ = 0;      // bytes in the file, all of them whole records
  std::atomic<uint64_t> lost_{0};
  mutable std::mutex error_mu_;
  std::string error_;
};

// Wall-clock nanoseconds (CLOCK_REALTIME): what capture timestamps carry.
uint64_t wall_ns();

}  // namespace rt::host

// pcap capture files (rt/host/pcap_file.h).
#include "rt/host/pcap_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <stdexcept>

namespace rt::host {
namespace {

// Records wait in memory up to this much: one write(2) per 64 KiB under load, not per frame.
constexpr size_t kFlushBytes = 64 * 1024;

// Writes all of `n` bytes; false with errno set when the file took fewer.
bool write_all(int fd, const uint8_t* p, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      if (w == 0) errno = ENOSPC;  // a write that takes nothing is a full file
      return false;
    }
    p += w;
    n -= size_t(w);
  }
  return true;
}

void append(std::vector<uint8_t>& buf, const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  buf.insert(buf.end(), b, b + n);
}

constexpr uint32_t kSnapBytes = 262144;

}  // namespace

PcapFile::PcapFile(const std::string& path) : path_(path) {
  if (path.empty()) return;
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd_ < 0)
    throw std::runtime_error("capture: cannot open '" + path + "': " + std::strerror(errno));
  // Snap length 262144 (libpcap's largest): a slot holds up to 65536 bytes, and a reader
  // that holds records to the snap length (ours does) must take the longest one.
  const uint32_t header[6] = {0xA1B23C4Du, 0x00040002u, 0, 0, kSnapBytes, 1};
  if (!write_all(fd_, reinterpret_cast<const uint8_t*>(header), sizeof header)) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    throw std::runtime_error("capture: cannot write '" + path + "': " + std::strerror(err));
  }
  written_ = sizeof header;
  buf_.reserve(kFlushBytes + 65536);
}

PcapFile::~PcapFile() { close(); }

void PcapFile::write(const uint8_t* frame, uint32_t len, uint64_t t_ns) {
  if (fd_ < 0) {
    if (!path_.empty()) lost_.fetch_add(1, std::memory_order_relaxed);  // stopped by an error
    return;
  }
  const uint32_t rec[4] = {uint32_t(t_ns / 1000000000u), uint32_t(t_ns % 1000000000u), len, len};
  append(buf_, rec, sizeof rec);
  append(buf_, frame, len);
  ++buffered_;
  if (buf_.size() >= kFlushBytes) flush();
}

void PcapFile::flush() {
  if (fd_ < 0 || buf_.empty()) return;
  if (!write_all(fd_, buf_.data(), buf_.size())) {
    fail("writing", errno);
    return;
  }
  written_ += buf_.size();
  buf_.clear();
  buffered_ = 0;
}

void PcapFile::close() {
  flush();
  if (fd_ < 0) return;
  const int fd = fd_;
  fd_ = -1;
  std::string path;
  std::swap(path, path_);  // closed: later frames are not the capture's (nothing is lost)
  if (::close(fd) != 0) {  // NFS, for one, reports a failed write only here
    const int err = errno;
    lost_.fetch_add(1, std::memory_order_relaxed);
    const std::lock_guard<std::mutex> lock(error_mu_);
    if (error_.empty()) error_ = "capture: closing '" + path + "' failed: " + std::strerror(err);
  }
}

void PcapFile::fail(const std::string& what, int err) {
  // Part of the buffer may have gone out: cut the file back to its last whole record. A
  // device (/dev/full) or a pipe refuses the cut, and then there is nothing more to do.
  const bool cut = ftruncate(fd_, off_t(written_)) == 0;
  ::close(fd_);
  fd_ = -1;
  lost_.fetch_add(buffered_, std::memory_order_relaxed);
  buf_.clear();
  buf_.shrink_to_fit();
  buffered_ = 0;
  const std::lock_guard<std::mutex> lock(error_mu_);
  if (error_.empty())
    error_ = "capture: " + what + " '" + path_ + "' failed: " + std::strerror(err) +
             " (the capture stopped there" +
             (cut ? ", its file cut back to " + std::to_string(written_) + " bytes of whole records"
                  : std::string()) +
             ")";
}

std::string PcapFile::error() const {
  const std::lock_guard<std::mutex> lock(error_mu_);
  return error_;
}

uint64_t wall_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return uint64_t(ts.tv_sec) * 1000000000u + uint64_t(ts.tv_nsec);
}

}  // namespace rt::host

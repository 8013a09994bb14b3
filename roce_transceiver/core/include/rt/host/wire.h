// What a software NIC's packets travel on: the loopback far end of a Transceiver (in memory),
// or a packet socket on a real interface (a veth end, possibly in another network namespace),
// with a pcap capture of both directions.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "rt/host/pcap_file.h"

namespace rt::host {

class Transceiver;

class Wire {
 public:
  virtual ~Wire() = default;
  // False: no room right now (the caller tries again); the frame was not sent.
  virtual bool send(const uint8_t* frame, size_t len) = 0;
  // Appends up to `max` frames that arrived; never waits.
  virtual void receive(std::vector<std::vector<uint8_t>>& out, size_t max) = 0;
};

// The Transceiver's loopback far end: our frames go into its engine, its frames come back.
class LoopbackWire : public Wire {
 public:
  explicit LoopbackWire(Transceiver& t) : t_(t) {}
  bool send(const uint8_t* frame, size_t len) override;
  void receive(std::vector<std::vector<uint8_t>>& out, size_t max) override;

 private:
  Transceiver& t_;
};

// A loopback for a port whose NIC is both halves of our queue pair, facing a peer that has both
// too: the peer's engine (a Transceiver: the responder to our requests) and a host requester
// (whose requests our NIC answers). The port's end sends requests into the peer's engine and
// answers to the requester, and receives what both of them send.
struct SplitLoopback {
  std::shared_ptr<Wire> port;       // the port's wire (one thread: the NIC's)
  std::shared_ptr<Wire> requester;  // the peer requester's (one thread)
};
SplitLoopback split_loopback(Transceiver& peer);

// An AF_PACKET socket already bound to an interface (opened by the caller, perhaps inside a
// network namespace); this class owns it from here on. Frames the socket sees leave or
// arrive are written to `capture` (empty: no capture); our own outgoing copies are skipped.
class PacketWire : public Wire {
 public:
  PacketWire(int fd, const std::string& capture);
  ~PacketWire() override;
  PacketWire(const PacketWire&) = delete;
  PacketWire& operator=(const PacketWire&) = delete;
  bool send(const uint8_t* frame, size_t len) override;
  void receive(std::vector<std::vector<uint8_t>>& out, size_t max) override;

 private:
  int fd_;
  PcapFile pcap_;
};

}  // namespace rt::host

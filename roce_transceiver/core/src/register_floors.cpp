// The latency floors (rt/bench/floors.h) for roce_transceiver.bench.floors.
//
// Each call measures with the GIL released, so a Python thread elsewhere (a
// peer, a progress printer) neither stalls the measurement nor is stalled by
// it. std::runtime_error arrives in Python as RuntimeError and
// std::invalid_argument as ValueError, each with the C++ message.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "register.h"
#include "rt/bench/floors.h"
#include "rt/bench/op_costs.h"

namespace rt::py {

void register_floors(pybind11::module_& m) {
  using pybind11::arg;
  m.attr("FLOOR_WARMUP") = bench::kFloorWarmup;
  m.attr("FLOOR_MAX_ITERATIONS") = bench::kFloorMaxIterations;
  m.def(
      "floor_cpu_thread_pingpong",
      [](int64_t iterations, double timeout_s) {
        pybind11::gil_scoped_release nogil;
        return bench::cpu_thread_pingpong(iterations, timeout_s);
      },
      arg("iterations"), arg("timeout_s") = bench::kFloorDefaultTimeoutS,
      "Round trips (ns) of two CPU threads ping-ponging through two cache lines, timed with "
      "steady_clock, after a warm-up. Raises RuntimeError if a round trip takes over timeout_s.");
  m.def(
      "floor_pinned_pingpong",
      [](int64_t iterations, double timeout_s) {
        pybind11::gil_scoped_release nogil;
        return bench::pinned_pingpong(iterations, timeout_s);
      },
      arg("iterations"), arg("timeout_s") = bench::kFloorDefaultTimeoutS,
      "Round trips (ns) between the host and a persistent kernel through flags in mapped pinned "
      "memory, timed on the host with steady_clock, after a warm-up. Raises RuntimeError without "
      "a GPU, or naming the iteration the kernel did not answer within timeout_s.");
  m.def(
      "floor_device_block_pingpong",
      [](int64_t iterations, double timeout_s) {
        pybind11::gil_scoped_release nogil;
        return bench::device_block_pingpong(iterations, timeout_s);
      },
      arg("iterations"), arg("timeout_s") = bench::kFloorDefaultTimeoutS,
      "Round trips (ns) between two thread blocks of one kernel through device-memory flags, "
      "timed on the GPU (SM cycles scaled by %globaltimer over the run), after a warm-up. Raises "
      "RuntimeError without a GPU, or when the kernel makes no progress for timeout_s.");
  m.def(
      "floor_launch_per_message",
      [](int64_t iterations, size_t size, bool graph) {
        pybind11::gil_scoped_release nogil;
        return bench::launch_per_message(iterations, size, graph);
      },
      arg("iterations"), arg("size") = 32, arg("graph") = false,
      "Per message (ns): copy `size` bytes into pinned memory, launch an echo kernel (a CUDA "
      "graph if graph=True), synchronise the stream; timed on the host with steady_clock, after "
      "a warm-up; every echo is checked. Raises RuntimeError without a GPU.");
  m.def(
      "floor_plain_pass",
      [](const std::vector<std::string>& packets, uint32_t slot_bytes, uint32_t blocks,
         uint32_t threads, uint32_t qpn_first, uint32_t qpn_count, uint32_t rkey,
         uint64_t region_va, uint64_t region_bytes, int repeats) {
        const bench::PlainPassTarget target{qpn_first, qpn_count, rkey, region_va, region_bytes};
        bench::PlainPassResult r;
        {
          pybind11::gil_scoped_release nogil;
          r = bench::plain_pass(packets, slot_bytes, blocks, threads, target, repeats);
        }
        pybind11::dict out;
        out["ns"] = r.ns;
        out["good"] = r.good;
        out["bad"] = r.bad;
        out["bytes"] = r.bytes;
        return out;
      },
      arg("packets"), arg("slot_bytes"), arg("blocks"), arg("threads"), arg("qpn_first"),
      arg("qpn_count"), arg("rkey"), arg("region_va"), arg("region_bytes"), arg("repeats") = 5,
      "The plain per-packet pass by `blocks` blocks of `threads` threads, a thread a packet: "
      "the engine's own header checks, ICRC and placement in one pass (icrc_place), with no "
      "batch, commit or ordering, over `packets` (bytes) in a device ring of slot_bytes slots, "
      "into a device region at region_va. {'ns': the best of `repeats` launches after a warm-up "
      "(CUDA events), 'good': packets that passed every check, 'bad': the others, 'bytes': the "
      "good ones' payload bytes}. Raises ValueError for bad arguments (in every build), "
      "RuntimeError without a GPU.");
  m.def(
      "device_op_costs",
      [](pybind11::bytes request, int repeats) {
        const std::string frame = request;
        const std::vector<uint8_t> bytes(frame.begin(), frame.end());
        pybind11::gil_scoped_release nogil;
        const bench::OpCosts c = bench::device_op_costs(bytes, repeats);
        pybind11::gil_scoped_acquire gil;
        pybind11::list ops;
        for (const bench::OpCost& op : c.ops)
          ops.append(pybind11::make_tuple(op.name, op.min_cycles, op.median_cycles));
        return pybind11::make_tuple(ops, c.sm_ghz, c.express_taken);
      },
      arg("request"), arg("repeats") = 32,
      "SM cycles (min, median over `repeats`) of each piece of the engine on the GPU, for the "
      "SEND frame `request`: ([(name, min, median), ...], SM GHz, requests the express-path steps "
      "took that way). Raises RuntimeError without a "
      "GPU, ValueError for a frame that does not decode.");
}

}  // namespace rt::py

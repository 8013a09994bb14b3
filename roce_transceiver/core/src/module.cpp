// roce_transceiver._core: the C++ core as seen from Python. A table of contents.
#include <pybind11/pybind11.h>

#include "register.h"

PYBIND11_MODULE(_core, m) {
  m.doc() = "roce_transceiver C++/CUDA core (private; use the roce_transceiver package)";
  rt::py::register_protocol(m);
  rt::py::register_build_info(m);
  rt::py::register_device_checks(m);
  rt::py::register_nic(m);  // before the Transceiver, which may take one
  rt::py::register_engine(m);
  rt::py::register_bench(m);
  rt::py::register_floors(m);
  rt::py::register_handlers(m);
  rt::py::register_packet_tools(m);
  rt::py::register_verbs(m);
}

// One register_* function per concept of the core, called from module.cpp.
#pragma once

#include <pybind11/pybind11.h>

#include "rt/host/nic.h"

namespace rt::py {

void register_protocol(pybind11::module_& m);
void register_build_info(pybind11::module_& m);
void register_device_checks(pybind11::module_& m);
void register_engine(pybind11::module_& m);
void register_bench(pybind11::module_& m);
void register_floors(pybind11::module_& m);
void register_handlers(pybind11::module_& m);
void register_packet_tools(pybind11::module_& m);
void register_verbs(pybind11::module_& m);
void register_nic(pybind11::module_& m);

// A NIC's counters or facts (rt/host/nic.h) as a dict, in their order.
pybind11::dict nic_fields(const rt::host::NicFields& fields);

}  // namespace rt::py

// What a launch plan needs to know about the device it plans for (ATen-free; the ATen wrappers
// fill it from the current device's properties). Whether a kernel's sm_90 body runs here and how
// many of its blocks fit an SM are asked of the kernel itself (launch_cache.h), by the plans.
#pragma once

namespace liger_cpp::kernels {

struct DeviceInfo {
  int sm_count = 0;  // multiprocessors
};

}  // namespace liger_cpp::kernels

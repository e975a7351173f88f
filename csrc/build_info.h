#pragma once

#include <string>

namespace liger_cpp {
// One line per fact: "cuda: yes|no", "cuda_archs: ...", "nvcc: ...".
std::string build_info();
}  // namespace liger_cpp

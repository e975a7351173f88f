// What this build contains; the values come from setup.py as macros.
#include "build_info.h"

#if __has_include("build_config.h")
#include "build_config.h"
#endif

// Defaults when build_config.h is absent.
#ifndef LIGER_CPP_CUDA_ARCHS
#define LIGER_CPP_CUDA_ARCHS ""
#endif
#ifndef LIGER_CPP_BUILD_NOTE
#define LIGER_CPP_BUILD_NOTE ""
#endif

namespace liger_cpp {

std::string build_info() {
  std::string s;
#ifdef LIGER_CPP_WITH_CUDA
  s += "cuda: yes\n";
  s += std::string("cuda_archs: ") + LIGER_CPP_CUDA_ARCHS + "\n";
#else
  s += "cuda: no\n";
#endif
  s += "cpu: yes\n";
  s += std::string("note: ") + LIGER_CPP_BUILD_NOTE + "\n";
  return s;
}

}  // namespace liger_cpp

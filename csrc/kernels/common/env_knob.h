// Kernel-variant knobs (LIGER_CPP_* environment variables), for A/B
// measurements: the benchmarks and tests switch kernels per call through them.
// Host only, ATen-free.
#pragma once

#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <stdexcept>
#include <string>

namespace liger_cpp::kernels {

// The index of environment variable `name`'s value in `choices`, or -1 when
// it is unset or empty (the caller's default). Any other value throws
// std::invalid_argument naming the variable and what it accepts: a typo must
// not silently measure the default kernel.
inline int env_choice(const char* name, std::initializer_list<const char*> choices) {
  const char* e = std::getenv(name);
  if (e == nullptr || *e == '\0') return -1;
  int i = 0;
  for (const char* c : choices) {
    if (std::strcmp(e, c) == 0) return i;
    ++i;
  }
  std::string accepted;
  for (const char* c : choices) accepted += (accepted.empty() ? "" : ", ") + std::string(c);
  throw std::invalid_argument(std::string("liger_cpp: environment variable ") + name + ": expected one of " +
                              accepted + " (or unset), got '" + e + "'");
}

}  // namespace liger_cpp::kernels

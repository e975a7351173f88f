#pragma once

#include <string>

namespace liger_cpp {

// Replaces the plan override by `spec` ("key=value,..."; "" clears); returns the previous spec.
std::string set_plan_override(std::string spec);

}  // namespace liger_cpp

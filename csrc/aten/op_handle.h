// A liger op's typed dispatcher handle, for C++ that calls another op through the dispatcher (the
// autograd kernels, composites that reuse an op's CPU twin and CUDA kernel).
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

namespace liger_cpp {

// The op's handle, looked up once per call site (a function-local static at the caller).
template <typename Sig>
c10::TypedOperatorHandle<Sig> find_op(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Sig>();
}

}  // namespace liger_cpp

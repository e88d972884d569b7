// The fake libc10_cuda.so (see fake_c10.h): c10::OutOfMemoryError's vtable and type_info.
#include "fake_c10.h"

namespace c10 {

OutOfMemoryError::~OutOfMemoryError() = default;

} // namespace c10

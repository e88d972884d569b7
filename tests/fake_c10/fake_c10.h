// Stand-ins for PyTorch's libc10.so and libc10_cuda.so, for check_torch_throw: the names the
// plug-in looks up (plugin/spool_torch_throw.cc), with the same mangled names and the same class
// shapes as c10/util/Exception.h (c10::Error derived from std::exception, its constructor from
// a SourceLocation and a std::string; c10::OutOfMemoryError derived from it, no members of its
// own), so that the plug-in's way of building and throwing the exception can be checked without
// PyTorch. The members differ from c10's: what matters is what the plug-in relies on.
#ifndef SPOOL_FAKE_C10_H
#define SPOOL_FAKE_C10_H

#include <cstdint>
#include <exception>
#include <string>

#define FAKE_C10_API __attribute__((visibility("default")))

namespace c10 {

struct SourceLocation {
  const char *function;
  const char *file;
  std::uint32_t line;
};

class FAKE_C10_API Error : public std::exception {
public:
  Error(SourceLocation where, std::string msg); // exported by libc10.so, as c10's
  ~Error() override;
  const char *what() const noexcept override;

private:
  std::string what_;
};

class FAKE_C10_API OutOfMemoryError : public Error {
public:
  using Error::Error;
  ~OutOfMemoryError() override; // out of line: the vtable is emitted in libc10_cuda.so
};

} // namespace c10

// c10::Error objects constructed and not yet destroyed (libc10.so): the thrown exception's
// destructor must bring it back to 0.
extern "C" FAKE_C10_API int fake_c10_alive;

#endif

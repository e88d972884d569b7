// spool__torch_throw: the plug-in's failures as the C++ exceptions PyTorch handles.
//
// PyTorch's allocator interface has no error return: its own allocator throws
// c10::OutOfMemoryError, which the Python binding turns into torch.OutOfMemoryError, and
// anything derived from std::exception becomes RuntimeError. A NULL return would become a tensor
// at address 0, silently. So the plug-in throws, and this is the one C++ file it needs.
//
// The plug-in cannot include c10's headers (it builds without PyTorch), so it builds the
// exception from what libc10 exports, relying on the Itanium C++ ABI (GCC and Clang on Linux)
// and on c10's layout:
//   - c10::Error's complete-object constructor Error(SourceLocation, std::string) is exported
//     by libc10.so; c10::OutOfMemoryError derives from c10::Error and adds no members (it
//     inherits the constructors), so an Error built in place becomes an OutOfMemoryError by
//     taking OutOfMemoryError's vtable.
//   - That vtable is exported by libc10_cuda.so (and by libtorch_cuda.so and libtorch_python.so,
//     which emit it too). Its address point, where an object's vtable pointer points, is two
//     pointers in (offset-to-top, then the type_info pointer); slot 0 there is the
//     complete-object destructor, which is not exported: __cxa_throw gets it from the slot.
//   - PyTorch loads these libraries RTLD_LOCAL, so dlsym(RTLD_DEFAULT, ...) does not see them;
//     dlopen(name, RTLD_NOLOAD) finds the copy already loaded (by its soname) without loading
//     anything.
//   - The std::string in the constructor's mangled name is the C++11 ABI's (std::__cxx11), as
//     PyTorch's wheels are built; a build with the old ABI would not export this name and gets
//     the fallback.
// When a symbol is missing (no PyTorch in the process, another ABI) or the failure is not an
// out-of-memory one, std::runtime_error carries the same message.
//
// The exception unwinds through the plug-in's C caller (compiled with -fexceptions; it holds
// nothing at the throw) into PyTorch's C++ frames.
#include "spool_torch.h"

#include <cxxabi.h>
#include <dlfcn.h>

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <typeinfo>

namespace {

// c10::SourceLocation (c10/util/Exception.h), which c10 prints as "Exception raised from
// <function> at <file>:<line>". Passed by value: the layout must match.
struct source_location {
  const char *function;
  const char *file;
  std::uint32_t line;
};

// The constructor as the ABI calls it: the object first, then the trivially copyable
// SourceLocation by value, then the std::string by the address of a temporary that the caller
// makes and destroys (which this declaration makes the compiler do).
using error_ctor = void (*)(void *self, source_location where, std::string message);
using destructor = void (*)(void *);

constexpr char kErrorCtor[] = "_ZN3c105ErrorC1ENS_14SourceLocationENSt7__cxx1112basic_string"
                              "IcSt11char_traitsIcESaIcEEE";
constexpr char kOomVtable[] = "_ZTVN3c1016OutOfMemoryErrorE";
constexpr char kOomTypeName[] = "N3c1016OutOfMemoryErrorE"; // its type_info::name()

// c10::Error holds a few strings and pointers (about 200 bytes in PyTorch 2.x): the exception
// object is made larger so that a bigger Error of a later PyTorch still fits.
constexpr std::size_t kExceptionBytes = 1024;

const char *const kCtorLibs[] = {"libc10.so", nullptr};
const char *const kVtableLibs[] = {"libc10_cuda.so", "libtorch_cuda.so", "libtorch_python.so",
                                   nullptr};

// The symbol from the first of libs that is loaded and has it; nullptr if none. The handle
// dlopen adds is closed again: PyTorch keeps the library loaded.
void *find(const char *const *libs, const char *symbol) {
  for (const char *const *lib = libs; *lib; ++lib) {
    void *handle = dlopen(*lib, RTLD_NOLOAD | RTLD_LAZY);
    if (!handle) continue;
    void *p = dlsym(handle, symbol);
    dlclose(handle);
    if (p) return p;
  }
  return nullptr;
}

struct c10_oom {
  error_ctor ctor;
  void *vptr;          // the vtable's address point: what the object's first word must hold
  std::type_info *type;
  destructor dtor;
};

// Finds what building and throwing a c10::OutOfMemoryError needs; false when anything is
// missing. The type_info comes from the vtable itself (the pointer just before the address
// point), so the thrown type is the object's; its name is checked as a guard against a vtable
// laid out otherwise.
bool find_c10_oom(c10_oom *out) {
  void *ctor = find(kCtorLibs, kErrorCtor);
  void **vtable = static_cast<void **>(find(kVtableLibs, kOomVtable));
  if (!ctor || !vtable) return false;
  void **point = vtable + 2;
  auto *type = static_cast<std::type_info *>(point[-1]);
  if (!type || !point[0] || std::strcmp(type->name(), kOomTypeName) != 0) return false;
  out->ctor = reinterpret_cast<error_ctor>(ctor);
  out->vptr = point;
  out->type = type;
  out->dtor = reinterpret_cast<destructor>(point[0]);
  return true;
}

[[noreturn]] void throw_c10_oom(const c10_oom &c, const source_location &where,
                                const std::string &message) {
  void *obj = abi::__cxa_allocate_exception(kExceptionBytes);
  try {
    c.ctor(obj, where, message); // builds a c10::Error (its vtable pointer is Error's)
  } catch (...) {
    abi::__cxa_free_exception(obj); // e.g. std::bad_alloc copying the message
    throw;
  }
  *static_cast<void **>(obj) = c.vptr; // now a c10::OutOfMemoryError
  abi::__cxa_throw(obj, c.type, c.dtor);
}

} // namespace

extern "C" void spool__torch_throw(int oom, const char *function, const char *file, int line,
                                   const char *message) {
  std::string text(message ? message : "spool_torch: unknown failure");
  c10_oom c;
  if (oom && find_c10_oom(&c)) {
    source_location where{function, file, static_cast<std::uint32_t>(line < 0 ? 0 : line)};
    throw_c10_oom(c, where, text);
  }
  throw std::runtime_error(text);
}

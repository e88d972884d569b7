// PyTorch's CUDA caching allocator behind torch_strategy.h, through the C++ API that libc10_cuda
// exports (c10/cuda/CUDACachingAllocator.h), written against PyTorch 2.11's headers. The only C++
// file of spool_bench, built with -DSPOOL_BENCH_TORCH=ON.
//
// Without libtorch nobody else prepares the allocator: libc10_cuda's static initializer picks
// the backend (native unless PYTORCH_CUDA_ALLOC_CONF says backend:cudaMallocAsync), and init()
// is what libtorch_cuda calls when a PyTorch process first uses CUDA.
//
// expandable_segments is read through AcceleratorAllocatorConfig, not through
// CUDAAllocatorConfig::expandable_segments(): that inline function answers false in any file
// compiled without PyTorch's own PYTORCH_C10_DRIVER_API_SUPPORTED, as this one is.
#include "torch_strategy.h"

#include <c10/core/AllocatorConfig.h>
#include <c10/cuda/CUDACachingAllocator.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>
#include <string>

#ifndef SPOOL_BENCH_TORCH_VERSION
#define SPOOL_BENCH_TORCH_VERSION "unknown" // bench/CMakeLists.txt passes torch/version.py's
#endif
#ifndef SPOOL_BENCH_TORCH_LIB
#define SPOOL_BENCH_TORCH_LIB "unknown"
#endif

namespace tca = c10::cuda::CUDACachingAllocator;

namespace {

constexpr auto kAll = static_cast<std::size_t>(c10::CachingAllocator::StatType::AGGREGATE);

// c10::Error's what() ends in a C++ backtrace; a failure line wants the message alone.
const char *message(const std::exception &e) {
  const auto *err = dynamic_cast<const c10::Error *>(&e);
  return err != nullptr ? err->what_without_backtrace() : e.what();
}

// The harness's failures are one line; c10's CUDA errors add lines of general advice.
int first_line(const char *text) { return static_cast<int>(std::strcspn(text, "\n")); }

bool failed(const char *call, const std::exception &e) {
  const char *text = message(e);
  return bench_fail("%s failed: %.*s", call, first_line(text), text);
}

bool failed_other(const char *call) {
  return bench_fail("%s failed: a C++ exception that is no std::exception", call);
}

// f() with whatever PyTorch throws turned into the harness's one failure line.
template <typename F> bool guarded(const char *call, F &&f) {
  try {
    return f();
  } catch (const std::exception &e) {
    return failed(call, e);
  } catch (...) {
    return failed_other(call);
  }
}

// The variable PyTorch took its settings from, in the order CUDAAllocatorConfig::instance()
// reads them; nullptr when neither is set.
const char *conf_variable() {
  for (const char *name : {"PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"})
    if (std::getenv(name) != nullptr) return name;
  return nullptr;
}

// What a strategy hands setAllocatorSettings: the user's settings less their expandable_segments,
// then its own. The user's other items are repeated because some PyTorch versions put every key
// that a settings text leaves out back to its default. Items are split at the commas outside
// roundup_power2_divisions' brackets.
std::string settings(bool expandable) {
  static const std::string key = "expandable_segments";
  std::string out, item;
  const char *name = conf_variable();
  const char *text = name != nullptr ? std::getenv(name) : "";
  int depth = 0;
  for (const char *c = text;; ++c) {
    if (*c == '\0' || (*c == ',' && depth == 0)) {
      const bool ours = item.compare(0, key.size(), key) == 0 &&
                        (item.size() == key.size() || item[key.size()] == ':');
      if (!item.empty() && !ours) out += item + ",";
      item.clear();
      if (*c == '\0') break;
      continue;
    }
    depth += *c == '[' ? 1 : *c == ']' ? -1 : 0;
    if (*c != ' ') item += *c;
  }
  return out + key + (expandable ? ":True" : ":False");
}

// PyTorch numbers devices with int8_t.
bool device_index(int device, c10::DeviceIndex *out) {
  if (device < 0 || device > std::numeric_limits<c10::DeviceIndex>::max())
    return bench_fail("device %d: PyTorch numbers devices 0..%d", device,
                      std::numeric_limits<c10::DeviceIndex>::max());
  *out = static_cast<c10::DeviceIndex>(device);
  return true;
}

std::string backend() {
  tca::CUDAAllocator *al = tca::get();
  return al != nullptr ? al->name() : "none";
}

} // namespace

extern "C" {

bool bench_torch_built(void) { return true; }

bool bench_torch_describe(char *out, std::size_t len) {
  std::string chosen;
  try {
    chosen = backend();
  } catch (const std::exception &e) {
    chosen = std::string("unknown: ") + message(e);
  }
  const char *name = conf_variable();
  std::snprintf(out, len, "PyTorch %s (c10 from %s), allocator backend %s, %s%s%s",
                SPOOL_BENCH_TORCH_VERSION, SPOOL_BENCH_TORCH_LIB, chosen.c_str(),
                name != nullptr ? name : "PYTORCH_CUDA_ALLOC_CONF",
                name != nullptr ? "=" : " unset", name != nullptr ? std::getenv(name) : "");
  return true;
}

bool bench_torch_usable(char *why, std::size_t len) {
  try {
    const std::string chosen = backend();
    if (chosen == "native") return true;
    const char *name = conf_variable();
    std::snprintf(why, len,
                  "PyTorch runs its %s allocator in this process, not the caching allocator "
                  "that torch-* measure: %s=%s",
                  chosen.c_str(), name != nullptr ? name : "PYTORCH_CUDA_ALLOC_CONF",
                  name != nullptr ? std::getenv(name) : "unset");
  } catch (const std::exception &e) {
    const char *text = message(e);
    std::snprintf(why, len, "PyTorch's allocator cannot be asked its name: %.*s",
                  first_line(text), text);
  } catch (...) {
    std::snprintf(why, len, "PyTorch's allocator cannot be asked its name");
  }
  return false;
}

bool bench_torch_setup(int device, bool expandable) {
  c10::DeviceIndex idx = 0;
  if (!device_index(device, &idx)) return false;
  return guarded("PyTorch allocator setup", [&] {
    int count = 0;
    CUDA_TRY(cudaGetDeviceCount(&count));
    tca::init(count); // does nothing once the allocator has every device
    const std::string text = settings(expandable);
    c10::CachingAllocator::setAllocatorSettings(text);
    if (c10::CachingAllocator::AcceleratorAllocatorConfig::use_expandable_segments() != expandable)
      return bench_fail("setAllocatorSettings(\"%s\") left expandable_segments %s", text.c_str(),
                        expandable ? "off" : "on");
    // Whatever an earlier torch strategy cached goes back to the device first.
    CUDA_TRY(cudaDeviceSynchronize());
    tca::emptyCache();
    tca::resetAccumulatedStats(idx);
    tca::resetPeakStats(idx);
    return true;
  });
}

// The timed pair: a try block costs nothing until something throws.
bool bench_torch_alloc(struct allocator *, void **p, std::size_t n, cudaStream_t s) {
  try {
    *p = tca::raw_alloc_with_stream(n, s);
  } catch (const std::exception &e) {
    *p = nullptr;
    return failed("raw_alloc_with_stream", e);
  } catch (...) {
    *p = nullptr;
    return failed_other("raw_alloc_with_stream");
  }
  return *p != nullptr || n == 0 ||
         bench_fail("raw_alloc_with_stream(%zu) returned NULL without throwing", n);
}

bool bench_torch_free(struct allocator *, void *p, cudaStream_t) {
  try {
    tca::raw_delete(p);
  } catch (const std::exception &e) {
    return failed("raw_delete", e);
  } catch (...) {
    return failed_other("raw_delete");
  }
  return true;
}

bool bench_torch_reset_peaks(int device) {
  c10::DeviceIndex idx = 0;
  return device_index(device, &idx) && guarded("resetPeakStats", [&] {
           tca::resetPeakStats(idx);
           return true;
         });
}

bool bench_torch_peaks(int device, uint64_t *reserved, uint64_t *allocated) {
  c10::DeviceIndex idx = 0;
  *reserved = 0, *allocated = 0;
  return device_index(device, &idx) && guarded("getDeviceStats", [&] {
           const auto st = tca::getDeviceStats(idx);
           *reserved = static_cast<uint64_t>(st.reserved_bytes[kAll].peak);
           *allocated = static_cast<uint64_t>(st.allocated_bytes[kAll].peak);
           return true;
         });
}

bool bench_torch_teardown(int device, bool expandable) {
  c10::DeviceIndex idx = 0;
  if (!device_index(device, &idx)) return false;
  return guarded("PyTorch allocator teardown", [&] {
    bool ok = bench_cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize()", __FILE__,
                            __LINE__);
    // A strategy's figures are its own only if PyTorch made every segment the way it names.
    std::size_t segments = 0, other = 0;
    for (const auto &seg : tca::snapshot({0, 0}, false).segments) {
      if (seg.device != idx) continue;
      ++segments;
      if (seg.is_expandable != expandable) ++other;
    }
    if (other != 0)
      ok = bench_fail("%zu of PyTorch's %zu segments on device %d are %sexpandable: "
                      "expandable_segments:%s did not take effect",
                      other, segments, device, expandable ? "not " : "",
                      expandable ? "True" : "False") && ok;
    tca::emptyCache();
    const int64_t left = tca::getDeviceStats(idx).reserved_bytes[kAll].current;
    if (left != 0)
      ok = bench_fail("PyTorch still reserves %lld bytes after emptyCache(): a buffer was not "
                      "freed", static_cast<long long>(left)) && ok;
    return ok;
  });
}

} // extern "C"

// spool's allocator class for PyTorch: a CUDAPluggableAllocator over the C plug-in's functions
// (libspool_torch.so, plugin/spool_torch.h) that also answers what the base class refuses, so
// that PyTorch treats spool as its own allocator: cuDNN's benchmark (cacheInfo), the memory
// statistics (getDeviceStats, resetPeakStats, resetAccumulatedStats) and graph pools
// (beginAllocateToPool, endAllocateToPool, releasePool, checkPoolLiveAllocations).
//
// python/spool/_native.py builds this file against the installed PyTorch on first use and links
// it to the package's libspool_torch.so, the copy the ctypes adapters loaded, so that PyTorch,
// CuPy and Numba keep sharing one pool per device. The functions Python calls are extern "C"
// (ctypes, no Python headers): they return 0 or write their failure into the caller's buffer.
//
// Graph pools: under stream capture spool allocates from the cudaMemPool inside the graph
// (cudaMallocFromPoolAsync becomes a memory node: graph-owned memory, freed and allocated again
// at each replay, since PyTorch instantiates with cudaGraphInstantiateFlagAutoFreeOnLaunch). So
// torch.cuda.graph and pools shared between graphs work, and the class keeps only the
// bookkeeping: which live pointers were allocated into which pool, so that
// checkPoolLiveAllocations answers from facts. CUDA graph trees (torch.compile with
// mode="reduce-overhead") also need getCheckpointState and setCheckpointPoolState: they record
// the caching allocator's blocks of a pool and later rebuild them, handing out new deleters for
// the storages that come back to life. Graph-owned memory has no blocks to rebuild, so both
// raise one clear error instead of an answer that would be wrong.
#include "spool_torch.h"

#include <torch/csrc/cuda/CUDAPluggableAllocator.h>

#include <c10/core/CachingDeviceAllocator.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/util/Exception.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace {

namespace cca = c10::cuda::CUDACachingAllocator;
using Base = torch::cuda::CUDAPluggableAllocator::CUDAPluggableAllocator;
using c10::CachingAllocator::Stat;
using c10::CachingAllocator::StatType;
using c10::CachingDeviceAllocator::DeviceStats;
using MempoolId = c10::cuda::MempoolId_t;

constexpr char kGraphTrees[] =
    "spool: CUDA graph trees (torch.compile with mode=\"reduce-overhead\") are not supported by "
    "spool's allocator: they checkpoint and rebuild the caching allocator's blocks of a graph "
    "pool, and spool serves allocations under capture as CUDA graph-owned memory (memory nodes "
    "of cudaMallocFromPoolAsync), which has no blocks to rebuild. Use "
    "mode=\"max-autotune-no-cudagraphs\" or mode=\"default\", torch.cuda.graph directly, or "
    "PyTorch's own allocator for this process";

// A graph pool and its live allocations, on one device.
struct PoolKey {
  int device;
  MempoolId id;
  bool operator==(const PoolKey &o) const { return device == o.device && id == o.id; }
};
struct PoolKeyHash {
  size_t operator()(const PoolKey &k) const noexcept {
    std::hash<unsigned long long> h;
    return h(k.id.first) * 1000003u ^ h(k.id.second) * 31u ^ static_cast<size_t>(k.device);
  }
};
struct Pool {
  int uses = 0;                    // beginAllocateToPool calls not yet released
  std::unordered_set<void *> live; // allocated into the pool and not freed
};

// A pool receiving the allocations whose stream its filter accepts (a capture: the stream
// belongs to it; graph trees' warm-up: the allocating thread is the recording one).
struct Route {
  MempoolId id;
  std::function<bool(cudaStream_t)> filter;
};

// What is known of an allocation made while a route was open.
struct Tracked {
  PoolKey pool;
  bool in_pool;                 // false once the pool was released
  bool captured;                // made on a stream under capture ...
  unsigned long long capture;   // ... of this capture
};

// A free that has to wait until no route is open on its device (see must_defer).
struct Deferred {
  void *ptr;
  size_t size;
  int device;
  cudaStream_t stream;
};

bool capture_of(cudaStream_t stream, unsigned long long *id) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  *id = 0;
  if (cudaStreamGetCaptureInfo(stream, &status, id) != cudaSuccess) {
    (void)cudaGetLastError(); // the answer is "not known to be capturing"; no sticky error
    return false;
  }
  return status == cudaStreamCaptureStatusActive;
}

bool is_legacy(cudaStream_t stream) { return stream == nullptr || stream == cudaStreamLegacy; }

void check_device(int device) {
  TORCH_CHECK(device >= 0 && device < SPOOL_TORCH_MAX_DEVICES, "spool: device ", device,
              " is out of range (spool serves devices 0 to ", SPOOL_TORCH_MAX_DEVICES - 1, ")");
}

void check_status(int status) {
  TORCH_CHECK(status == 0, spool_torch_last_error());
}

spool_torch_counters counters_of(int device) {
  spool_torch_counters c{};
  c.size = sizeof c;
  check_status(spool_torch_counters_get(device, &c));
  return c;
}

int64_t as_stat(uint64_t v) { return static_cast<int64_t>(v); }

void set_stat(Stat &s, uint64_t current, uint64_t peak, uint64_t allocated, uint64_t freed) {
  s.current = as_stat(current);
  s.peak = as_stat(peak);
  s.allocated = as_stat(allocated);
  s.freed = as_stat(freed);
}

// One pool serves every size: PyTorch's "large pool" holds the figures, equal to the aggregate,
// and the small pool stays zero, so that small + large = all as in PyTorch's summary.
void set_stat_array(std::array<Stat, static_cast<size_t>(StatType::NUM_TYPES)> &a,
                    uint64_t current, uint64_t peak, uint64_t allocated, uint64_t freed) {
  set_stat(a[static_cast<size_t>(StatType::AGGREGATE)], current, peak, allocated, freed);
  set_stat(a[static_cast<size_t>(StatType::LARGE_POOL)], current, peak, allocated, freed);
}

uint64_t since(uint64_t now, uint64_t base) { return now > base ? now - base : 0; }

class SpoolAllocator final : public Base {
public:
  SpoolAllocator()
      : Base([this](size_t size, int device, cudaStream_t stream) {
               return alloc(size, device, stream);
             },
             [this](void *ptr, size_t size, int device, cudaStream_t stream) {
               release(ptr, size, device, stream);
             }) {
    set_init_fn(&spool_torch_init);
    set_reset_fn(&spool_torch_empty_cache);
    set_memory_fraction_fn(&spool_torch_set_memory_fraction);
    set_record_stream_fn(&spool_torch_record_stream);
  }

  std::string name() override { return "spool"; }

  void cacheInfo(c10::DeviceIndex device, size_t *largestBlock) override {
    check_device(device);
    check_status(spool_torch_cache_info(device, largestBlock));
  }

  DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    check_device(device);
    spool_torch_counters c = counters_of(device);
    spool_torch_counters base;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      base = baseline_[device];
    }
    DeviceStats st;
    uint64_t freed_bytes = since(c.bytes_allocated, c.bytes_in_use);
    uint64_t base_freed = since(base.bytes_allocated, base.bytes_in_use);
    // spool counts the bytes asked for: allocated, active and requested bytes are those.
    for (auto *a : {&st.allocated_bytes, &st.active_bytes, &st.requested_bytes})
      set_stat_array(*a, c.bytes_in_use, c.bytes_in_use_peak,
                     since(c.bytes_allocated, base.bytes_allocated),
                     since(freed_bytes, base_freed));
    for (auto *a : {&st.allocation, &st.active})
      set_stat_array(*a, c.buffers_in_use, c.buffers_in_use_peak,
                     since(c.allocs, base.allocs), since(c.frees, base.frees));
    // What the cudaMemPool holds from the device: spool does not count bytes taken and given
    // back, so allocated and freed stay zero here.
    set_stat_array(st.reserved_bytes, c.bytes_reserved, c.bytes_reserved_peak, 0, 0);
    st.num_alloc_retries = as_stat(since(c.oom_retries, base.oom_retries));
    st.num_ooms = as_stat(since(c.ooms, base.ooms));
    // The heap's chunks are what spool takes from and gives back to the cudaMemPool.
    st.num_device_alloc = as_stat(since(c.chunk_allocs, base.chunk_allocs));
    st.num_device_free = as_stat(since(c.chunk_frees, base.chunk_frees));
    st.max_split_size = -1; // any idle range of a chunk may serve a smaller request
    return st;
  }

  void resetAccumulatedStats(c10::DeviceIndex device) override {
    check_device(device);
    spool_torch_counters c = counters_of(device);
    std::lock_guard<std::mutex> lock(mutex_);
    baseline_[device] = c;
  }

  void resetPeakStats(c10::DeviceIndex device) override {
    check_device(device);
    check_status(spool_torch_reset_peaks(device));
  }

  void beginAllocateToPool(c10::DeviceIndex device, MempoolId id,
                           std::function<bool(cudaStream_t)> filter) override {
    check_device(device);
    std::lock_guard<std::mutex> lock(mutex_);
    pools_[PoolKey{device, id}].uses++;
    routes_[device].push_back(Route{id, std::move(filter)});
    routes_open_.fetch_add(1);
  }

  void endAllocateToPool(c10::DeviceIndex device, MempoolId id) override {
    check_device(device);
    std::vector<Deferred> now;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto &routes = routes_[device];
      auto it = std::find_if(routes.begin(), routes.end(),
                             [&](const Route &r) { return r.id == id; });
      TORCH_CHECK(it != routes.end(), "spool: endAllocateToPool: device ", device,
                  " is not allocating to pool (", id.first, ", ", id.second, ")");
      routes.erase(it);
      routes_open_.fetch_sub(1);
      if (routes.empty()) now.swap(deferred_[device]);
    }
    free_all(now);
  }

  void releasePool(c10::DeviceIndex device, MempoolId id) override {
    check_device(device);
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = pools_.find(PoolKey{device, id});
    if (it == pools_.end() || --it->second.uses > 0) return;
    // Its allocations stay live (tensors still hold them) but belong to no pool any more.
    for (void *ptr : it->second.live) {
      auto t = tracked_.find(ptr);
      if (t != tracked_.end()) t->second.in_pool = false;
    }
    pools_.erase(it);
  }

  bool checkPoolLiveAllocations(c10::DeviceIndex device, MempoolId id,
                                const std::unordered_set<void *> &expected) override {
    check_device(device);
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = pools_.find(PoolKey{device, id});
    if (it == pools_.end()) return expected.empty();
    const auto &live = it->second.live;
    return live.size() == expected.size() &&
           std::all_of(expected.begin(), expected.end(),
                       [&](void *p) { return live.count(p) != 0; });
  }

  std::shared_ptr<cca::AllocatorState> getCheckpointState(c10::DeviceIndex,
                                                          MempoolId) override {
    TORCH_CHECK(false, kGraphTrees);
  }

  cca::CheckpointDelta setCheckpointPoolState(
      c10::DeviceIndex, std::shared_ptr<cca::AllocatorState>) override {
    TORCH_CHECK(false, kGraphTrees);
  }

private:
  void *alloc(size_t size, int device, cudaStream_t stream) {
    void *ptr = spool_torch_alloc(size, device, stream); // throws for PyTorch on failure
    if (!ptr || routes_open_.load() == 0) return ptr;
    unsigned long long capture = 0;
    bool captured = capture_of(stream, &capture);
    std::lock_guard<std::mutex> lock(mutex_);
    for (const Route &r : routes_[device]) {
      if (!r.filter(stream)) continue;
      PoolKey key{device, r.id};
      pools_[key].live.insert(ptr);
      tracked_[ptr] = Tracked{key, true, captured, capture};
      tracked_count_.store(tracked_.size());
      break;
    }
    return ptr;
  }

  // While a route is open on the device, spool_torch_free could break the capture or be
  // refused: a stream under capture may only free what that capture allocated, and the legacy
  // stream synchronizes with every stream, the capturing ones included. Such frees wait for
  // the route to close, as PyTorch's cudaMallocAsync backend defers them.
  static bool must_defer(const Tracked *t, cudaStream_t stream) {
    if (is_legacy(stream)) return true;
    unsigned long long capture = 0;
    return capture_of(stream, &capture) && !(t && t->captured && t->capture == capture);
  }

  void release(void *ptr, size_t size, int device, cudaStream_t stream) {
    if (!ptr) return;
    if (routes_open_.load() != 0 || tracked_count_.load() != 0) {
      std::lock_guard<std::mutex> lock(mutex_);
      Tracked t{};
      bool known = forget(ptr, &t);
      bool open = device >= 0 && device < SPOOL_TORCH_MAX_DEVICES && !routes_[device].empty();
      if (open && must_defer(known ? &t : nullptr, stream)) {
        deferred_[device].push_back(Deferred{ptr, size, device, stream});
        return;
      }
    }
    spool_torch_free(ptr, size, device, stream); // never throws: PyTorch frees in destructors
  }

  // Drops ptr from the bookkeeping; true (and *out) when it was tracked. mutex_ held.
  bool forget(void *ptr, Tracked *out) {
    auto it = tracked_.find(ptr);
    if (it == tracked_.end()) return false;
    *out = it->second;
    if (out->in_pool) {
      auto p = pools_.find(out->pool);
      if (p != pools_.end()) p->second.live.erase(ptr);
    }
    tracked_.erase(it);
    tracked_count_.store(tracked_.size());
    return true;
  }

  static void free_all(const std::vector<Deferred> &frees) {
    for (const Deferred &d : frees) spool_torch_free(d.ptr, d.size, d.device, d.stream);
  }

  std::mutex mutex_; // the members below; never held while calling into the plug-in
  std::array<spool_torch_counters, SPOOL_TORCH_MAX_DEVICES> baseline_{};
  std::array<std::vector<Route>, SPOOL_TORCH_MAX_DEVICES> routes_;
  std::array<std::vector<Deferred>, SPOOL_TORCH_MAX_DEVICES> deferred_;
  std::unordered_map<PoolKey, Pool, PoolKeyHash> pools_;
  std::unordered_map<void *, Tracked> tracked_;
  std::atomic<int> routes_open_{0};     // read without the lock on every allocation and free
  std::atomic<size_t> tracked_count_{0};
};

// Never destroyed: tensors freed during the process's exit still reach the allocator, after
// static destructors may have run (PyTorch holds it too).
std::shared_ptr<SpoolAllocator> *const installed = new std::shared_ptr<SpoolAllocator>();

void put_message(char *buf, size_t len, const char *text) {
  if (buf && len) std::snprintf(buf, len, "%s", text);
}

} // namespace

extern "C" {

// Makes the class PyTorch's CUDA allocator (changeCurrentAllocator). Returns 0, or -1 with the
// reason in buf (len bytes): PyTorch's own message when its allocator is initialized already.
__attribute__((visibility("default"))) int spool_torch_native_install(char *buf, size_t len) {
  try {
    auto allocator = std::make_shared<SpoolAllocator>();
    torch::cuda::CUDAPluggableAllocator::changeCurrentAllocator(allocator);
    *installed = allocator;
    return 0;
  } catch (const c10::Error &e) {
    put_message(buf, len, e.what_without_backtrace());
  } catch (const std::exception &e) {
    put_message(buf, len, e.what());
  }
  return -1;
}

// 1 when PyTorch's current CUDA allocator is the one installed here.
__attribute__((visibility("default"))) int spool_torch_native_active(void) {
  return *installed && cca::allocator.load() == installed->get() ? 1 : 0;
}

// The address of spool_torch_alloc as this library was linked to it: Python compares it with
// the copy it loaded, to be sure both use one set of pools.
__attribute__((visibility("default"))) void *spool_torch_native_alloc_address(void) {
  return reinterpret_cast<void *>(&spool_torch_alloc);
}

} // extern "C"

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
// Graph pools: PyTorch routes the allocations of a capture (torch.cuda.graph, and torch.compile
// with mode="reduce-overhead", whose CUDA graph trees also route their warm-up) into a private
// pool, whose memory no allocation outside the pool may take while a graph of the pool may still
// replay. The class keeps those pools itself, of blocks that are ordinary spool buffers: a block
// is allocated from spool on the class's own stream of the device, outside the capture (in
// relaxed capture mode, then that stream is synchronized), so that the graph's kernels get real,
// mapped memory. Memory nodes of a captured cudaMallocFromPoolAsync would not do: their
// addresses have no memory until a replay, and Triton's launchers ask the driver about every
// pointer argument (cuPointerGetAttribute), which fails on them with "invalid argument". A block
// freed into its pool is reused by the pool's later allocations on the same stream (graphs of a
// pool replay in the order they were captured, as with PyTorch's own allocator); it goes back to
// spool only once its pool is released and it is free, at the next empty_cache or when spool
// runs out of memory, after a device synchronize (a released graph may still be replaying), as
// PyTorch's own private pools go back at empty_cache. Graph trees checkpoint a pool
// (getCheckpointState) and later restore it (setCheckpointPoolState): the state is which of the
// pool's blocks are allocated, and a restore hands PyTorch new deleters for the storages that
// come back to life.
#include "spool_torch.h"

#include <torch/csrc/cuda/CUDAPluggableAllocator.h>

#include <c10/core/CachingDeviceAllocator.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGraphsC10Utils.h>
#include <c10/cuda/CUDAGuard.h>
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
#include <map>
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

// A graph pool on one device.
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

// Free blocks of a pool by (stream, size): a request takes the smallest that fits on its stream.
using IdleKey = std::pair<uintptr_t, size_t>;
using IdleIndex = std::multimap<IdleKey, void *>;

struct Pool {
  int uses = 0;                    // beginAllocateToPool calls not yet released
  std::unordered_set<void *> live; // the pool's allocated blocks
  IdleIndex idle;                  // its free ones
};

// A block of a graph pool: one spool buffer of size bytes, allocated on the class's stream.
struct Block {
  PoolKey pool;
  size_t size;
  cudaStream_t stream;  // the stream PyTorch allocated it for: reuse stays on it
  bool allocated;
  bool orphan = false;  // its pool was released while it was allocated
  bool shared = false;  // record_stream named another stream: never reused, only given back
};

// A block that goes back to spool at the next safe point (see give_back).
struct Spare {
  void *ptr;
  size_t size;
};

// getCheckpointState's answer: which blocks of the pool were allocated.
struct Checkpoint final : cca::AllocatorState {
  struct Entry {
    void *ptr;
    size_t size;
    cudaStream_t stream;
    bool allocated;
  };
  PoolKey pool;
  std::vector<Entry> blocks;
};

// A pool receiving the allocations whose stream its filter accepts (a capture: the stream
// belongs to it; graph trees' warm-up: the allocating thread is the recording one).
struct Route {
  MempoolId id;
  std::function<bool(cudaStream_t)> filter;
};

// What spool_torch_free needs for a pointer: kept for a free that has to wait until no route is
// open on its device (see must_defer), and for a DataPtr a checkpoint's restore handed out.
struct FreeArgs {
  void *ptr;
  size_t size;
  int device;
  cudaStream_t stream;
};

// Requests are rounded to this, so that a freed block serves the next request of its size.
constexpr size_t kGranule = 512;
// A free block serves a request this much smaller, and no smaller (blocks are never split).
size_t slack(size_t want) { return want / 4 + (64u << 10); }

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

void check_cuda(cudaError_t e, const char *what, int device) {
  TORCH_CHECK(e == cudaSuccess, "spool: graph pool on device ", device, ": ", what, " failed: ",
              cudaGetErrorString(e));
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
    set_reset_fn([this] { empty_cache(); });
    set_memory_fraction_fn(&spool_torch_set_memory_fraction);
    set_record_stream_fn([this](void *ptr, cudaStream_t stream) { record_stream(ptr, stream); });
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
    uint64_t idle_bytes, idle_blocks;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      base = baseline_[device];
      idle_bytes = idle_bytes_[device];
      idle_blocks = idle_blocks_[device];
    }
    // Free blocks of graph pools are spool buffers that no tensor holds: reserved, not in use.
    uint64_t in_use = since(c.bytes_in_use, idle_bytes);
    uint64_t buffers = since(c.buffers_in_use, idle_blocks);
    DeviceStats st;
    uint64_t freed_bytes = since(c.bytes_allocated, c.bytes_in_use);
    uint64_t base_freed = since(base.bytes_allocated, base.bytes_in_use);
    // spool counts the bytes asked for: allocated, active and requested bytes are those.
    for (auto *a : {&st.allocated_bytes, &st.active_bytes, &st.requested_bytes})
      set_stat_array(*a, in_use, c.bytes_in_use_peak,
                     since(c.bytes_allocated, base.bytes_allocated),
                     since(freed_bytes, base_freed));
    for (auto *a : {&st.allocation, &st.active})
      set_stat_array(*a, buffers, c.buffers_in_use_peak, since(c.allocs, base.allocs),
                     since(c.frees, base.frees));
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
    std::vector<FreeArgs> now;
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
    for (const FreeArgs &d : now) spool_torch_free(d.ptr, d.size, d.device, d.stream);
  }

  // The pool's free blocks wait to go back to spool; its allocated ones follow when freed.
  void releasePool(c10::DeviceIndex device, MempoolId id) override {
    check_device(device);
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = pools_.find(PoolKey{device, id});
    if (it == pools_.end() || --it->second.uses > 0) return;
    for (void *ptr : it->second.live) blocks_.at(ptr).orphan = true;
    for (const auto &kv : it->second.idle) to_spare(device, kv.second);
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

  std::shared_ptr<cca::AllocatorState> getCheckpointState(c10::DeviceIndex device,
                                                          MempoolId id) override {
    check_device(device);
    auto cp = std::make_shared<Checkpoint>();
    cp->pool = PoolKey{device, id};
    std::lock_guard<std::mutex> lock(mutex_);
    Pool &pool = find_pool(cp->pool, "getCheckpointState");
    auto add = [&](void *ptr) {
      const Block &b = blocks_.at(ptr);
      cp->blocks.push_back(Checkpoint::Entry{ptr, b.size, b.stream, b.allocated});
    };
    for (void *ptr : pool.live) add(ptr);
    for (const auto &kv : pool.idle) add(kv.second);
    return cp;
  }

  // Every allocated block of the pool becomes free (PyTorch drops the deleters of the storages
  // that held them) and the checkpoint's allocated blocks are allocated again, each with a new
  // DataPtr for PyTorch to give to the storage that comes back to life.
  cca::CheckpointDelta setCheckpointPoolState(
      c10::DeviceIndex device, std::shared_ptr<cca::AllocatorState> state) override {
    check_device(device);
    auto cp = std::dynamic_pointer_cast<Checkpoint>(state);
    TORCH_CHECK(cp && cp->pool.device == device, "spool: setCheckpointPoolState: the state was "
                "not taken by spool's allocator on device ", device);
    cca::CheckpointDelta delta;
    std::vector<Checkpoint::Entry> allocd;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      Pool &pool = find_pool(cp->pool, "setCheckpointPoolState");
      for (const auto &e : cp->blocks) {
        auto b = blocks_.find(e.ptr);
        TORCH_CHECK(b != blocks_.end() && b->second.pool == cp->pool && !b->second.orphan,
                    "spool: setCheckpointPoolState: block ", e.ptr, " of the checkpoint is "
                    "no longer in pool (", cp->pool.id.first, ", ", cp->pool.id.second, ")");
      }
      std::vector<void *> live(pool.live.begin(), pool.live.end());
      for (void *ptr : live) {
        make_idle(pool, ptr);
        delta.ptrs_freed.push_back(ptr);
      }
      for (const auto &e : cp->blocks) {
        if (!e.allocated) continue;
        take_idle(pool, e.ptr);
        allocd.push_back(e);
      }
    }
    {
      // The base class's record of the pointers it gave out: those freed here lose their
      // deleters, so their entries would only mislead a later allocation at the same address.
      std::lock_guard<std::mutex> lock(allocator_mutex_);
      for (void *ptr : delta.ptrs_freed) allocation_metadata_.erase(ptr);
    }
    std::lock_guard<std::mutex> lock(mutex_);
    for (void *ptr : delta.ptrs_freed) restored_.erase(ptr);
    for (const auto &e : allocd) {
      restored_[e.ptr] = FreeArgs{e.ptr, e.size, device, e.stream};
      delta.dataptrs_allocd.emplace_back(e.ptr, e.ptr, raw_deleter(),
                                         c10::Device(c10::DeviceType::CUDA, device));
    }
    return delta;
  }

  // PyTorch's deleter (raw_deleter) calls this for every pointer it holds: the ones a restore
  // handed out are known here, the rest to the base class.
  void raw_delete(void *ptr) override {
    FreeArgs r{};
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = restored_.find(ptr);
      if (it == restored_.end()) r.ptr = nullptr;
      else {
        r = it->second;
        restored_.erase(it);
      }
    }
    if (r.ptr) release(r.ptr, r.size, r.device, r.stream);
    else Base::raw_delete(ptr);
  }

private:
  void *alloc(size_t size, int device, cudaStream_t stream) {
    if (size == 0 || routes_open_.load() == 0) return spool_torch_alloc(size, device, stream);
    MempoolId id;
    if (!route_of(device, stream, &id)) return spool_torch_alloc(size, device, stream);
    return pool_alloc(size, device, stream, PoolKey{device, id});
  }

  // The pool of the first open route on device whose filter takes stream.
  bool route_of(int device, cudaStream_t stream, MempoolId *id) {
    if (device < 0 || device >= SPOOL_TORCH_MAX_DEVICES) return false;
    std::lock_guard<std::mutex> lock(mutex_);
    for (const Route &r : routes_[device]) {
      if (!r.filter(stream)) continue;
      *id = r.id;
      return true;
    }
    return false;
  }

  void *pool_alloc(size_t size, int device, cudaStream_t stream, PoolKey key) {
    size_t want = (size + kGranule - 1) / kGranule * kGranule;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto pool = pools_.find(key);
      if (pool != pools_.end()) {
        auto &idle = pool->second.idle;
        auto it = idle.lower_bound(IdleKey{reinterpret_cast<uintptr_t>(stream), want});
        if (it != idle.end() && it->first.first == reinterpret_cast<uintptr_t>(stream) &&
            it->first.second <= want + slack(want)) {
          void *ptr = it->second;
          take_idle(pool->second, ptr);
          return ptr;
        }
      }
    }
    void *ptr = fresh_block(want, device, stream);
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = pools_.find(key);
    blocks_[ptr] = Block{key, want, stream, true};
    blocks_count_.store(blocks_.size());
    if (it == pools_.end()) blocks_[ptr].orphan = true; // released meanwhile
    else it->second.live.insert(ptr);
    return ptr;
  }

  // A new block from spool, ready for any stream: allocated on the class's stream of the device
  // outside any capture of this thread, then that stream synchronized. A spool out-of-memory
  // first gives back the blocks of released pools and tries once more.
  void *fresh_block(size_t want, int device, cudaStream_t stream) {
    c10::cuda::CUDAStreamCaptureModeGuard relaxed{cudaStreamCaptureModeRelaxed};
    cudaStream_t own = own_stream(device);
    void *ptr = nullptr;
    try {
      ptr = spool_torch_alloc(want, device, own);
    } catch (const c10::OutOfMemoryError &) {
      unsigned long long capture = 0;
      if (capture_of(stream, &capture) || !give_back(device)) throw;
      ptr = spool_torch_alloc(want, device, own);
    }
    cudaError_t e = cudaStreamSynchronize(own);
    if (e != cudaSuccess) {
      spool_torch_free(ptr, want, device, own);
      check_cuda(e, "cudaStreamSynchronize of the pool's stream", device);
    }
    return ptr;
  }

  // The class's stream of device: made once, never destroyed (nothing CUDA runs at exit).
  cudaStream_t own_stream(int device) {
    std::lock_guard<std::mutex> lock(streams_mutex_);
    cudaStream_t &s = own_streams_[device];
    if (!s) {
      c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
      check_cuda(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate", device);
    }
    return s;
  }

  // Gives the blocks of released pools back to spool, once the device is synchronized (a
  // released graph may still be replaying). Not while a route is open on the device: a capture
  // may be under way, and a synchronize would break it. True when anything went back.
  bool give_back(int device) {
    std::vector<Spare> spares;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!routes_[device].empty() || spares_[device].empty()) return false;
      spares.swap(spares_[device]);
    }
    cudaError_t e;
    {
      c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
      e = cudaDeviceSynchronize();
    }
    if (e != cudaSuccess) {
      std::lock_guard<std::mutex> lock(mutex_);
      spares_[device].insert(spares_[device].end(), spares.begin(), spares.end());
      check_cuda(e, "cudaDeviceSynchronize before giving released blocks back", device);
    }
    cudaStream_t own = own_stream(device);
    for (const Spare &s : spares) spool_torch_free(s.ptr, s.size, device, own);
    std::lock_guard<std::mutex> lock(mutex_);
    for (const Spare &s : spares) {
      idle_bytes_[device] -= s.size;
      idle_blocks_[device]--;
    }
    return true;
  }

  void empty_cache() {
    for (int d = 0; d < SPOOL_TORCH_MAX_DEVICES; d++) {
      bool any;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        any = !spares_[d].empty();
      }
      if (any) give_back(d);
    }
    spool_torch_empty_cache();
  }

  void record_stream(void *ptr, cudaStream_t stream) {
    if (blocks_count_.load() != 0) {
      std::lock_guard<std::mutex> lock(mutex_);
      auto b = blocks_.find(ptr);
      if (b != blocks_.end()) {
        if (stream != b->second.stream) b->second.shared = true;
        return;
      }
    }
    spool_torch_record_stream(ptr, stream);
  }

  // While a route is open on the device, spool_torch_free could break the capture: a stream
  // under capture would record the free into the graph, and the legacy stream synchronizes with
  // every stream, the capturing ones included. Such frees wait for the route to close, as
  // PyTorch's cudaMallocAsync backend defers them.
  static bool must_defer(cudaStream_t stream) {
    if (is_legacy(stream)) return true;
    unsigned long long capture = 0;
    return capture_of(stream, &capture);
  }

  void release(void *ptr, size_t size, int device, cudaStream_t stream) {
    if (!ptr) return;
    if (routes_open_.load() != 0 || blocks_count_.load() != 0) {
      std::lock_guard<std::mutex> lock(mutex_);
      auto b = blocks_.find(ptr);
      if (b != blocks_.end()) {
        free_block(b);
        return;
      }
      bool open = device >= 0 && device < SPOOL_TORCH_MAX_DEVICES && !routes_[device].empty();
      if (open && must_defer(stream)) {
        deferred_[device].push_back(FreeArgs{ptr, size, device, stream});
        return;
      }
    }
    spool_torch_free(ptr, size, device, stream); // never throws: PyTorch frees in destructors
  }

  // A tensor's free of a pool block: back into its pool, or to the spares. mutex_ held.
  void free_block(std::unordered_map<void *, Block>::iterator b) {
    Block &blk = b->second;
    int device = blk.pool.device;
    if (!blk.orphan && !blk.shared) {
      make_idle(pools_.at(blk.pool), b->first);
      return;
    }
    if (!blk.orphan) pools_.at(blk.pool).live.erase(b->first);
    spares_[device].push_back(Spare{b->first, blk.size});
    idle_bytes_[device] += blk.size;
    idle_blocks_[device]++;
    blocks_.erase(b);
    blocks_count_.store(blocks_.size());
  }

  // A free block of a released pool joins the spares. mutex_ held.
  void to_spare(int device, void *ptr) {
    auto b = blocks_.find(ptr);
    spares_[device].push_back(Spare{ptr, b->second.size}); // already counted idle
    blocks_.erase(b);
    blocks_count_.store(blocks_.size());
  }

  void make_idle(Pool &pool, void *ptr) {
    Block &b = blocks_.at(ptr);
    pool.live.erase(ptr);
    pool.idle.emplace(IdleKey{reinterpret_cast<uintptr_t>(b.stream), b.size}, ptr);
    b.allocated = false;
    idle_bytes_[b.pool.device] += b.size;
    idle_blocks_[b.pool.device]++;
  }

  void take_idle(Pool &pool, void *ptr) {
    Block &b = blocks_.at(ptr);
    auto range = pool.idle.equal_range(IdleKey{reinterpret_cast<uintptr_t>(b.stream), b.size});
    for (auto it = range.first; it != range.second; ++it) {
      if (it->second != ptr) continue;
      pool.idle.erase(it);
      break;
    }
    pool.live.insert(ptr);
    b.allocated = true;
    idle_bytes_[b.pool.device] -= b.size;
    idle_blocks_[b.pool.device]--;
  }

  Pool &find_pool(const PoolKey &key, const char *what) {
    auto it = pools_.find(key);
    TORCH_CHECK(it != pools_.end(), "spool: ", what, ": device ", key.device, " has no graph "
                "pool (", key.id.first, ", ", key.id.second, ")");
    return it->second;
  }

  std::mutex mutex_; // the members below; never held while calling into the plug-in
  std::array<spool_torch_counters, SPOOL_TORCH_MAX_DEVICES> baseline_{};
  std::array<std::vector<Route>, SPOOL_TORCH_MAX_DEVICES> routes_;
  std::array<std::vector<FreeArgs>, SPOOL_TORCH_MAX_DEVICES> deferred_;
  std::array<std::vector<Spare>, SPOOL_TORCH_MAX_DEVICES> spares_;
  std::array<uint64_t, SPOOL_TORCH_MAX_DEVICES> idle_bytes_{};  // free pool blocks and spares
  std::array<uint64_t, SPOOL_TORCH_MAX_DEVICES> idle_blocks_{};
  std::unordered_map<PoolKey, Pool, PoolKeyHash> pools_;
  std::unordered_map<void *, Block> blocks_; // every block of a live pool, and orphans
  std::unordered_map<void *, FreeArgs> restored_; // DataPtrs made by setCheckpointPoolState
  std::atomic<int> routes_open_{0};          // read without the lock on every allocation and free
  std::atomic<size_t> blocks_count_{0};
  std::mutex streams_mutex_;
  std::array<cudaStream_t, SPOOL_TORCH_MAX_DEVICES> own_streams_{};
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

/* spool.hpp: optional header-only C++17 layer over the C API of <spool/spool.h>.
 *
 *   spool::error      a failed spool call (std::runtime_error + the spool_status)
 *   spool::config     spool_config with parse / load / from_env that throw
 *   spool::pool       owns a spool_pool (RAII, move-only)
 *   spool::buffer<T>  owns count Ts of device memory (move-only); its destructor frees them in
 *                     stream order on the buffer's current stream
 *   spool::scope      a spool_scope (move-only): temporaries for one stream, all freed in
 *                     stream order when the scope ends (its destructor, or end())
 *   spool::batch      owns a spool_alloc_batch allocation: several sub-buffers, one free
 *
 *   spool::pool pool{spool::config{}.parse("release_threshold=4GiB").from_env()};
 *   spool::buffer<float> tmp = pool.alloc<float>(n, stream);  // records this file and line
 *   my_kernel<<<grid, block, 0, stream>>>(tmp.data(), tmp.size());
 *   // tmp's destructor: spool_free on `stream`, reusable once the stream gets there
 *
 * Errors are exceptions, not status returns, because:
 *  - constructors cannot return a status, and the types here acquire in their constructors;
 *  - RAII ownership is only safe if a failed acquisition cannot produce a usable-looking object:
 *    a spool::pool or spool::buffer that exists owns what it says it owns (only a moved-from or
 *    released object is empty, and that is the caller's doing). A status return would need a
 *    "valid?" check at every use, which is the C API again.
 *  - Destructors never throw: ~pool and ~buffer report instead (see each). Functions that can
 *    fail throw spool::error, whose status() is the C status and whose what() is
 *    spool_last_error() as it was at the throw (the C message: numbers included). Functions
 *    marked noexcept cannot fail.
 * Everything else follows the C API's conventions (spool.h): thread safety, who owns what, no
 * work at process exit (destroy pools before main returns: a static spool::pool is a mistake).
 * The raw C objects are always reachable (get()), for the C functions not wrapped here.
 *
 *   {
 *     spool::scope tmp = pool.begin_scope(stream);  // or spool::scope tmp{pool.get(), stream}
 *     float *a = tmp.alloc<float>(n), *b = tmp.alloc<float>(n);  // no CUDA call, mostly
 *     my_kernel<<<grid, block, 0, stream>>>(a, b, n);
 *   }  // ~scope: every temporary freed in stream order on `stream`
 *
 * Needs C++17 and exceptions; works with GCC, Clang and nvcc. Header-only: link spool as usual.
 */
#ifndef SPOOL_SPOOL_HPP
#define SPOOL_SPOOL_HPP

#if !defined(__cplusplus) ||                                                                       \
    (__cplusplus < 201703L && !(defined(_MSVC_LANG) && _MSVC_LANG >= 201703L))
#error "spool.hpp needs C++17"
#endif
#if !defined(__cpp_exceptions) && !defined(__EXCEPTIONS) && !defined(_CPPUNWIND)
#error "spool.hpp reports failures as exceptions: compile with exceptions enabled"
#endif

#include <spool/spool.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

/* Call sites. buffer allocation records the caller's file and line (for the leak report and
 * double-free messages) through defaulted __builtin_FILE() / __builtin_LINE() arguments, which
 * GCC, Clang, nvcc (its front end and host compilers) and MSVC 2019+ provide. Elsewhere (or with
 * SPOOL_HPP_NO_BUILTIN_SITE defined) the defaults are "no site", and SPOOL_POOL_ALLOC(pool, T,
 * count, stream) passes __FILE__ and __LINE__ explicitly, as SPOOL_ALLOC does in C. */
#if !defined(SPOOL_HPP_NO_BUILTIN_SITE)
#if defined(__has_builtin)
#if __has_builtin(__builtin_FILE) && __has_builtin(__builtin_LINE)
#define SPOOL_HPP_BUILTIN_SITE 1
#endif
#endif
#if !defined(SPOOL_HPP_BUILTIN_SITE) &&                                                       \
    ((defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 5) || defined(__NVCC__) ||       \
     (defined(_MSC_VER) && _MSC_VER >= 1926))
#define SPOOL_HPP_BUILTIN_SITE 1
#endif
#endif

#if defined(SPOOL_HPP_BUILTIN_SITE)
#define SPOOL_HPP_FILE_ARG const char *file = __builtin_FILE()
#define SPOOL_HPP_LINE_ARG int line = __builtin_LINE()
#else
#define SPOOL_HPP_FILE_ARG const char *file = nullptr
#define SPOOL_HPP_LINE_ARG int line = 0
#endif

/* pool.alloc<T>(count, stream) with this file and line, on any compiler. */
#define SPOOL_POOL_ALLOC(pool, T, count, stream)                                                  \
  ((pool).template alloc<T>((count), (stream), __FILE__, __LINE__))

namespace spool {

/* ---- error ------------------------------------------------------------------------------- */

/* A spool call failed. status() is what the C function returned; what() is spool_last_error()
 * captured when the exception was made (later spool calls on the thread may change
 * spool_last_error(); the exception keeps its copy). Failures the wrapper finds itself (a
 * buffer size that overflows size_t) have their own message and leave spool_last_error()
 * alone. */
class error : public std::runtime_error {
 public:
  /* From the C library's last failure on this thread. */
  explicit error(spool_status status) : error(status, last_message(status)) {}
  error(spool_status status, const std::string &message)
      : std::runtime_error(message), status_(status) {}

  spool_status status() const noexcept { return status_; }
  /* "SPOOL_ERR_OOM" */
  const char *name() const noexcept { return spool_status_name(status_); }

 private:
  static std::string last_message(spool_status status) {
    const char *m = spool_last_error();
    if (m && *m) return m;
    return std::string(spool_status_name(status)) + ": " + spool_status_string(status);
  }
  spool_status status_;
};

namespace detail {
/* Throws spool::error for anything but SPOOL_OK. */
inline void check(spool_status s) {
  if (s != SPOOL_OK) throw error(s);
}
} // namespace detail

/* ---- config ------------------------------------------------------------------------------ */

/* A spool_config, starting from the documented defaults. The functions that apply text return
 * *this, so they chain: spool::config{}.load("spool.conf").from_env(). On failure they throw
 * spool::error (SPOOL_ERR_CONFIG naming the line and key, SPOOL_ERR_IO, ...) and the settings
 * are unchanged, as in C. Fields are set through get(). Not thread safe on one object. */
class config {
 public:
  config() noexcept { spool_config_init(&cfg_); }
  explicit config(const spool_config &cfg) noexcept : cfg_(cfg) {}

  config &parse(const char *text) {
    detail::check(spool_config_parse(&cfg_, text));
    return *this;
  }
  config &parse(const std::string &text) { return parse(text.c_str()); }

  config &load(const char *path) {
    detail::check(spool_config_load(&cfg_, path));
    return *this;
  }
  config &load(const std::string &path) { return load(path.c_str()); }

  /* SPOOL_CONF on top, when it is set. */
  config &from_env() {
    detail::check(spool_config_from_env(&cfg_));
    return *this;
  }

  /* spool_config_validate: throws SPOOL_ERR_CONFIG when settings contradict each other. */
  const config &validate() const {
    detail::check(spool_config_validate(&cfg_));
    return *this;
  }

  /* The settings as config text (spool_config_format). */
  std::string str() const {
    std::size_t needed = 0;
    detail::check(spool_config_format_sized(&cfg_, nullptr, 0, &needed));
    std::vector<char> buf(needed);
    detail::check(spool_config_format_sized(&cfg_, buf.data(), buf.size(), &needed));
    return std::string(buf.data());
  }

  spool_config &get() noexcept { return cfg_; }
  const spool_config &get() const noexcept { return cfg_; }
  spool_config *operator->() noexcept { return &cfg_; }
  const spool_config *operator->() const noexcept { return &cfg_; }

 private:
  spool_config cfg_;
};

/* ---- buffer ------------------------------------------------------------------------------ */

/* count elements of T in device memory from a spool pool, owned: the destructor frees them with
 * spool_free in stream order on stream(). Move-only; a moved-from buffer is empty (data()
 * NULL, size() 0) and frees nothing. A buffer of 0 elements holds NULL and frees nothing.
 *
 * No constructors or destructors of T run (it is device memory), hence T must be trivially
 * copyable; the memory is aligned to at least 256 bytes, hence alignof(T) <= 256.
 *
 * The pool must outlive the buffer (a buffer outliving its pool is undefined behaviour, as
 * spool_free on a destroyed pool is). Like any C++ object, one buffer is not to be used by two
 * threads at once; distinct buffers of one pool may. */
template <class T>
class buffer {
  static_assert(std::is_trivially_copyable<T>::value,
                "spool::buffer<T>: device memory holds trivially copyable types only");
  static_assert(alignof(T) <= 256, "spool::buffer<T>: spool aligns buffers to 256 bytes");

 public:
  using value_type = T;

  /* Empty: no pool, NULL, 0 elements. */
  buffer() noexcept = default;

  /* Allocates count elements on stream from pool (spool_alloc_at, recording file and line: by
   * default the caller's, see SPOOL_HPP_BUILTIN_SITE). file must outlive the buffer (a
   * __FILE__ does). Throws spool::error: SPOOL_ERR_INVALID (pool NULL, count * sizeof(T)
   * overflows), SPOOL_ERR_OOM, SPOOL_ERR_CUDA, SPOOL_ERR_HOST_OOM: whatever spool_alloc
   * returns. */
  buffer(spool_pool *pool, std::size_t count, cudaStream_t stream, SPOOL_HPP_FILE_ARG,
         SPOOL_HPP_LINE_ARG)
      : pool_(pool), count_(count), stream_(stream) {
    if (count > std::numeric_limits<std::size_t>::max() / sizeof(T))
      throw error(SPOOL_ERR_INVALID, "spool::buffer: " + std::to_string(count) +
                                         " elements of " + std::to_string(sizeof(T)) +
                                         " bytes overflow size_t");
    void *p = nullptr;
    detail::check(spool_alloc_at(pool, &p, count * sizeof(T), stream, file, line));
    ptr_ = static_cast<T *>(p);
  }

  buffer(const buffer &) = delete;
  buffer &operator=(const buffer &) = delete;

  buffer(buffer &&other) noexcept
      : pool_(std::exchange(other.pool_, nullptr)), ptr_(std::exchange(other.ptr_, nullptr)),
        count_(std::exchange(other.count_, 0)), stream_(std::exchange(other.stream_, nullptr)) {}

  /* Frees what this buffer held (as the destructor does), then takes other's. */
  buffer &operator=(buffer &&other) noexcept {
    if (this != &other) {
      free_noexcept();
      pool_ = std::exchange(other.pool_, nullptr);
      ptr_ = std::exchange(other.ptr_, nullptr);
      count_ = std::exchange(other.count_, 0);
      stream_ = std::exchange(other.stream_, nullptr);
    }
    return *this;
  }

  /* Frees the memory in stream order on stream(). Never throws: a failure (the pool refused the
   * free, say because the pointer was freed behind the buffer's back) is written to stderr with
   * spool_last_error(), and the memory stays with the pool (the leak report lists it). */
  ~buffer() { free_noexcept(); }

  T *data() const noexcept { return ptr_; }
  std::size_t size() const noexcept { return count_; }                /* elements */
  std::size_t bytes() const noexcept { return count_ * sizeof(T); }
  bool empty() const noexcept { return count_ == 0; }
  explicit operator bool() const noexcept { return ptr_ != nullptr; }
  cudaStream_t stream() const noexcept { return stream_; }
  spool_pool *pool() const noexcept { return pool_; }

  /* The stream the free will be ordered on (the destructor's and reset()'s). spool frees at
   * once in stream order on that stream: the caller must first make it wait for all work that
   * uses the buffer on the old stream (cudaEventRecord on the old one + cudaStreamWaitEvent on
   * the new one, or a synchronize), or the memory may be handed out again while that work still
   * runs. */
  void set_stream(cudaStream_t stream) noexcept { stream_ = stream; }

  /* Gives up ownership: returns the pointer (NULL for an empty buffer), which the caller now
   * frees with spool_free on pool(); the buffer is left empty. */
  [[nodiscard]] T *release() noexcept {
    pool_ = nullptr;
    count_ = 0;
    stream_ = nullptr;
    return std::exchange(ptr_, nullptr);
  }

  /* Frees now, in stream order on stream(), recording the caller's site as the free's, and
   * leaves the buffer empty. Throws spool::error with what spool_free returns; then the buffer
   * still owns the memory (spool freed nothing) and its destructor will try again. */
  void reset(SPOOL_HPP_FILE_ARG, SPOOL_HPP_LINE_ARG) {
    if (ptr_) detail::check(spool_free_at(pool_, ptr_, stream_, file, line));
    pool_ = nullptr;
    ptr_ = nullptr;
    count_ = 0;
    stream_ = nullptr;
  }

 private:
  void free_noexcept() noexcept {
    if (!ptr_) return;
    /* The free's site is this line: spool::buffer's destructor (the caller is not known). */
    spool_status s = spool_free_at(pool_, ptr_, stream_, __FILE__, __LINE__);
    if (s != SPOOL_OK)
      std::fprintf(stderr, "spool::buffer: freeing %p (%zu bytes) failed: %s\n",
                   static_cast<void *>(ptr_), bytes(), spool_last_error());
    pool_ = nullptr;
    ptr_ = nullptr;
    count_ = 0;
    stream_ = nullptr;
  }

  spool_pool *pool_ = nullptr;
  T *ptr_ = nullptr;
  std::size_t count_ = 0;
  cudaStream_t stream_ = nullptr;
};

/* ---- scope ------------------------------------------------------------------------------- */

/* A spool_scope, owned: begun in the constructor, ended in the destructor (or end()), which
 * frees every temporary allocated from it in stream order on stream(). Move-only; a moved-from
 * or ended scope is empty (get() NULL) and alloc throws SPOOL_ERR_INVALID. Scopes nest: one
 * begun while this thread has a scope open on the same stream is its child and must end first,
 * which C++ lifetimes give for free when scopes are locals. The pool must outlive the scope. */
class scope {
 public:
  scope() noexcept = default;
  /* spool_scope_begin. Throws spool::error with what it returns. */
  scope(spool_pool *pool, cudaStream_t stream) {
    detail::check(spool_scope_begin(pool, stream, &scope_));
  }

  scope(const scope &) = delete;
  scope &operator=(const scope &) = delete;
  scope(scope &&other) noexcept : scope_(std::exchange(other.scope_, nullptr)) {}
  /* Ends what this scope held (as the destructor does), then takes other's. */
  scope &operator=(scope &&other) noexcept {
    if (this != &other) {
      end_noexcept();
      scope_ = std::exchange(other.scope_, nullptr);
    }
    return *this;
  }

  /* spool_scope_end. Never throws: a failure (children still open, a capture begun or ended
   * since the scope began) is written to stderr with spool_last_error(), and the scope's memory
   * stays with the pool (spool_pool_destroy lists it as a leak). */
  ~scope() { end_noexcept(); }

  /* count Ts (256-aligned, uninitialised) valid until the scope ends. count 0 gives NULL.
   * Throws spool::error: SPOOL_ERR_INVALID (empty scope, count * sizeof(T) overflows),
   * SPOOL_ERR_SCOPE_ENDED, or what spool_alloc returns. */
  template <class T>
  [[nodiscard]] T *alloc(std::size_t count) {
    static_assert(std::is_trivially_copyable<T>::value,
                  "spool::scope::alloc<T>: device memory holds trivially copyable types only");
    static_assert(alignof(T) <= 256, "spool::scope::alloc<T>: pieces are 256-aligned");
    if (!scope_) throw error(SPOOL_ERR_INVALID, "spool::scope: alloc on an empty scope");
    if (count > std::numeric_limits<std::size_t>::max() / sizeof(T))
      throw error(SPOOL_ERR_INVALID, "spool::scope: " + std::to_string(count) + " elements of " +
                                         std::to_string(sizeof(T)) + " bytes overflow size_t");
    void *p = nullptr;
    detail::check(spool_scope_alloc(scope_, &p, count * sizeof(T)));
    return static_cast<T *>(p);
  }

  /* Ends the scope now (spool_scope_end). Throws spool::error with its status; then the scope
   * is still open and the destructor tries again. Empty: nothing. */
  void end() {
    if (scope_) detail::check(spool_scope_end(scope_));
    scope_ = nullptr;
  }

  spool_scope *get() const noexcept { return scope_; }
  explicit operator bool() const noexcept { return scope_ != nullptr; }
  cudaStream_t stream() const noexcept { return spool_scope_stream(scope_); } /* NULL if empty */

 private:
  void end_noexcept() noexcept {
    if (!scope_) return;
    if (spool_scope_end(scope_) != SPOOL_OK)
      std::fprintf(stderr, "spool::scope: ending scope %p failed: %s\n",
                   static_cast<void *>(scope_), spool_last_error());
    scope_ = nullptr;
  }

  spool_scope *scope_ = nullptr;
};

/* ---- batch ------------------------------------------------------------------------------- */

/* A spool_alloc_batch allocation, owned: sizes.size() sub-buffers carved from one allocation,
 * freed together by the destructor with spool_free of the first pointer, in stream order on
 * stream(). Move-only; a moved-from batch is empty. Sub-buffers are plain pointers (get<T>(i));
 * never free one yourself. The pool must outlive the batch. */
class batch {
 public:
  batch() noexcept = default;

  /* spool_alloc_batch_at (alignment 0: 256 bytes), recording file and line. Throws
   * spool::error with what spool_alloc_batch returns. */
  batch(spool_pool *pool, const std::vector<std::size_t> &sizes, cudaStream_t stream,
        std::size_t alignment = 0, SPOOL_HPP_FILE_ARG, SPOOL_HPP_LINE_ARG)
      : pool_(pool), ptrs_(sizes.size()), sizes_(sizes), stream_(stream) {
    detail::check(spool_alloc_batch_at(pool, stream, sizes.size(), sizes.data(), ptrs_.data(),
                                       alignment, file, line));
  }

  batch(const batch &) = delete;
  batch &operator=(const batch &) = delete;
  batch(batch &&other) noexcept
      : pool_(std::exchange(other.pool_, nullptr)), ptrs_(std::move(other.ptrs_)),
        sizes_(std::move(other.sizes_)), stream_(std::exchange(other.stream_, nullptr)) {
    other.ptrs_.clear();
    other.sizes_.clear();
  }
  batch &operator=(batch &&other) noexcept {
    if (this != &other) {
      free_noexcept();
      pool_ = std::exchange(other.pool_, nullptr);
      ptrs_ = std::move(other.ptrs_);
      sizes_ = std::move(other.sizes_);
      stream_ = std::exchange(other.stream_, nullptr);
      other.ptrs_.clear();
      other.sizes_.clear();
    }
    return *this;
  }

  /* Frees the batch in stream order on stream(); never throws (a failure goes to stderr). */
  ~batch() { free_noexcept(); }

  /* Sub-buffer i as a T * (NULL for an empty batch; i must be below count()). */
  template <class T = void>
  T *get(std::size_t i) const noexcept {
    return ptrs_.empty() ? nullptr : static_cast<T *>(ptrs_[i]);
  }
  std::size_t count() const noexcept { return ptrs_.size(); }
  std::size_t bytes(std::size_t i) const noexcept { return sizes_[i]; } /* asked for */
  cudaStream_t stream() const noexcept { return stream_; }
  /* The stream the free is ordered on; as buffer::set_stream. */
  void set_stream(cudaStream_t stream) noexcept { stream_ = stream; }
  spool_pool *pool() const noexcept { return pool_; }

  /* Frees now; throws spool::error with spool_free's status (then it still owns the batch). */
  void reset(SPOOL_HPP_FILE_ARG, SPOOL_HPP_LINE_ARG) {
    if (!ptrs_.empty() && ptrs_[0])
      detail::check(spool_free_at(pool_, ptrs_[0], stream_, file, line));
    clear();
  }

 private:
  void clear() noexcept {
    pool_ = nullptr;
    ptrs_.clear();
    sizes_.clear();
    stream_ = nullptr;
  }
  void free_noexcept() noexcept {
    if (!ptrs_.empty() && ptrs_[0] &&
        spool_free_at(pool_, ptrs_[0], stream_, __FILE__, __LINE__) != SPOOL_OK)
      std::fprintf(stderr, "spool::batch: freeing %p (%zu sub-buffers) failed: %s\n", ptrs_[0],
                   ptrs_.size(), spool_last_error());
    clear();
  }

  spool_pool *pool_ = nullptr;
  std::vector<void *> ptrs_;
  std::vector<std::size_t> sizes_;
  cudaStream_t stream_ = nullptr;
};

/* ---- pool -------------------------------------------------------------------------------- */

/* Owns a spool_pool: created in the constructor, destroyed in the destructor. Move-only; a
 * moved-from pool is empty (get() NULL): destroying it does nothing, and calls that need a pool
 * throw SPOOL_ERR_INVALID. Thread safety as in C: the member functions may be called from
 * several threads at once, except destruction and assignment. */
class pool {
 public:
  /* The defaults, then SPOOL_CONF on top (spool_pool_create with cfg NULL). Throws
   * spool::error with what spool_pool_create returns (SPOOL_ERR_NO_DEVICE, SPOOL_ERR_CONFIG,
   * ...). */
  pool() { detail::check(spool_pool_create(&pool_, nullptr)); }
  /* Exactly these settings (SPOOL_CONF is not read: apply it with config::from_env). */
  explicit pool(const config &cfg) { detail::check(spool_pool_create(&pool_, &cfg.get())); }
  explicit pool(const spool_config &cfg) { detail::check(spool_pool_create(&pool_, &cfg)); }

  /* Over an existing cudaMemPool_t that the caller keeps owning (spool_pool_adopt; cfg->device
   * must be the pool's device). */
  static pool adopt(cudaMemPool_t handle, const config &cfg) {
    spool_pool *p = nullptr;
    detail::check(spool_pool_adopt(&p, handle, &cfg.get()));
    return pool(p);
  }

  /* Takes ownership of a pool made by spool_pool_create or spool_pool_adopt (NULL: empty). */
  static pool from_raw(spool_pool *p) noexcept { return pool(p); }

  pool(const pool &) = delete;
  pool &operator=(const pool &) = delete;
  pool(pool &&other) noexcept : pool_(std::exchange(other.pool_, nullptr)) {}
  /* Destroys the pool this one held (as the destructor does), then takes other's. */
  pool &operator=(pool &&other) noexcept {
    if (this != &other) {
      (void)destroy();
      pool_ = std::exchange(other.pool_, nullptr);
    }
    return *this;
  }

  /* spool_pool_destroy. Never throws, and ignores its status: with buffers still allocated
   * (SPOOL_ERR_LEAKS) or a CUDA failure the library has already written the leak report to
   * stderr or the report file (cfg.report / SPOOL_REPORT) and freed what it could. Call
   * destroy() to see the status. All buffers of the pool must be gone or released first. */
  ~pool() { (void)destroy(); }

  /* Destroys the pool now and returns spool_pool_destroy's status (SPOOL_OK, SPOOL_ERR_LEAKS,
   * SPOOL_ERR_CUDA; the pool is gone in every case, *this is empty). Empty: SPOOL_OK. */
  spool_status destroy() noexcept { return spool_pool_destroy(std::exchange(pool_, nullptr)); }

  /* Gives up ownership: the caller destroys the returned pool with spool_pool_destroy. */
  [[nodiscard]] spool_pool *release() noexcept { return std::exchange(pool_, nullptr); }

  spool_pool *get() const noexcept { return pool_; }
  explicit operator bool() const noexcept { return pool_ != nullptr; }
  cudaMemPool_t handle() const noexcept { return spool_pool_handle(pool_); } /* NULL if empty */
  int device() const noexcept { return spool_pool_device(pool_); }          /* -1 if empty */
  /* The settings the pool was created with; NULL if empty. Valid while the pool lives. */
  const spool_config *settings() const noexcept { return spool_pool_config(pool_); }

  /* Allocates count Ts on stream; see buffer's constructor. [[nodiscard]]: a discarded buffer
   * would be freed at once. */
  template <class T>
  [[nodiscard]] buffer<T> alloc(std::size_t count, cudaStream_t stream, SPOOL_HPP_FILE_ARG,
                                SPOOL_HPP_LINE_ARG) {
    return buffer<T>(pool_, count, stream, file, line);
  }

  /* A scope for temporaries on stream (see spool::scope). */
  [[nodiscard]] spool::scope begin_scope(cudaStream_t stream) {
    return spool::scope(pool_, stream);
  }

  /* Sub-buffers of the given sizes in one allocation (see spool::batch). */
  [[nodiscard]] batch alloc_batch(const std::vector<std::size_t> &sizes, cudaStream_t stream,
                                  std::size_t alignment = 0, SPOOL_HPP_FILE_ARG,
                                  SPOOL_HPP_LINE_ARG) {
    return batch(pool_, sizes, stream, alignment, file, line);
  }

  /* spool_record_stream and spool_free_after, for raw pointers (buffer: data(); a buffer
   * whose streams were recorded frees through the hand-off by itself). Throw spool::error. */
  void record_stream(void *ptr, cudaStream_t other) {
    detail::check(spool_record_stream(pool_, ptr, other));
  }
  void free_after(void *ptr, cudaStream_t stream, cudaEvent_t event) {
    detail::check(spool_free_after(pool_, ptr, stream, event));
  }

  spool_stats stats() const {
    spool_stats st{};
    detail::check(spool_stats_get(pool_, &st));
    return st;
  }
  void reset_peaks() { detail::check(spool_stats_reset_peaks(pool_)); }
  /* Gives reserved but unused memory back to the driver down to keep bytes (spool_trim). */
  void trim(std::size_t keep = 0) { detail::check(spool_trim(pool_, keep)); }
  /* Gives stream's cached blocks back before the caller destroys it (spool_stream_release). */
  void release_stream(cudaStream_t stream) {
    detail::check(spool_stream_release(pool_, stream));
  }
  /* The human report (spool_report); out is the caller's. */
  void report(std::FILE *out = stdout) const { detail::check(spool_report(pool_, out)); }
  /* The leak report of the live buffers (spool_leaks). */
  void leaks(std::FILE *out = stderr) const { detail::check(spool_leaks(pool_, out)); }

 private:
  explicit pool(spool_pool *p) noexcept : pool_(p) {}
  spool_pool *pool_ = nullptr;
};

} // namespace spool

#endif /* SPOOL_SPOOL_HPP */

/* hello: the smallest complete spool program, every status checked.
 *
 * Creates a pool (the defaults, 64 MiB reserved up front, then SPOOL_CONF) and a non-blocking
 * stream; then, a few times, allocates a buffer, fills it with cudaMemsetAsync (where a kernel
 * launch would go), copies a piece back and frees the buffer, all in stream order, and checks
 * the bytes. Then it prints the pool's counters and report, gives the stream back to spool
 * before destroying it, and destroys the pool (which would list and free any buffer left).
 *
 * Plain C11: it needs the CUDA runtime's headers and library, not nvcc. Build it against an
 * installed spool with CMake (find_package(spool), target spool::spool) or with pkg-config:
 *   cc -std=c11 hello.c $(pkg-config --cflags --libs spool) -o hello
 * (a shared libspool also needs LD_LIBRARY_PATH or an rpath: see the README, "Build and install").
 *
 * Exit status: 0 ok; 1 a CUDA or spool call failed (the call and its reason are printed) or the
 * bytes read back are wrong; 77 no CUDA device (CTest reads 77 as "skipped").
 */
#include <spool/spool.h>

#include <cuda_runtime.h>

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* Each call's status is checked where it is made: an unchecked failure turns into a crash far
 * from its cause. These print the call, the line and the reason, and say whether it worked. */
static int cuda_ok(cudaError_t err, const char *call, int line) {
  if (err == cudaSuccess) return 1;
  fprintf(stderr, "hello: line %d: %s failed: %s: %s\n", line, call, cudaGetErrorName(err),
          cudaGetErrorString(err));
  return 0;
}

static int spool_ok(spool_status st, const char *call, int line) {
  if (st == SPOOL_OK) return 1;
  fprintf(stderr, "hello: line %d: %s failed: %s: %s\n", line, call, spool_status_name(st),
          spool_last_error()); /* in words, with the numbers: sizes, device, what is free */
  return 0;
}

#define CHECK_CUDA(call) cuda_ok((call), #call, __LINE__)
#define CHECK_SPOOL(call) spool_ok((call), #call, __LINE__)

enum { ROUNDS = 4 };
static const size_t kBytes = (size_t)64 << 20; /* 64 MiB per buffer */

/* ROUNDS times on stream: allocate, fill, read back the last bytes, free; then the counters.
 * Returns 1 on success. */
static int work(spool_pool *pool, cudaStream_t stream) {
  static unsigned char tail[4096]; /* the buffer's last bytes, copied back */
  for (int pass = 0; pass < ROUNDS; ++pass) {
    const int value = 0x40 + pass;
    void *buf = NULL;
    /* Stream-ordered, like cudaMallocAsync; SPOOL_ALLOC records this line for the leak report. */
    if (!CHECK_SPOOL(SPOOL_ALLOC(pool, &buf, kBytes, stream))) return 0;
    /* Work queued on stream after the allocation may use the buffer: here a memset and a copy;
     * in a .cu file, a kernel launch: my_kernel<<<grid, block, 0, stream>>>(buf). */
    int ok = CHECK_CUDA(cudaMemsetAsync(buf, value, kBytes, stream)) &&
             CHECK_CUDA(cudaMemcpyAsync(tail, (unsigned char *)buf + kBytes - sizeof tail,
                                     sizeof tail, cudaMemcpyDeviceToHost, stream)) &&
             CHECK_CUDA(cudaStreamSynchronize(stream)); /* tail is pageable host memory: wait */
    /* Freed in stream order, after the work above, even when that failed: nothing leaks. The
     * next pass's allocation on the same stream reuses the block. */
    ok = CHECK_SPOOL(SPOOL_FREE(pool, buf, stream)) && ok;
    if (!ok) return 0;
    for (size_t i = 0; i < sizeof tail; ++i) {
      if (tail[i] != value) {
        fprintf(stderr, "hello: pass %d: byte %zu read back as 0x%02x, wanted 0x%02x\n", pass,
                kBytes - sizeof tail + i, tail[i], value);
        return 0;
      }
    }
  }
  if (!CHECK_CUDA(cudaStreamSynchronize(stream))) return 0; /* the last free has run */

  spool_stats st;
  if (!CHECK_SPOOL(spool_stats_get(pool, &st))) return 0;
  printf("hello: %" PRIu64 " allocations, %" PRIu64 " frees, %" PRIu64
         " buffers in use; peak %.1f MiB in use, %.1f MiB reserved at most\n",
         st.allocs, st.frees, st.buffers_in_use, (double)st.bytes_in_use_peak / (1 << 20),
         (double)st.bytes_reserved_peak / (1 << 20));
  if (st.buffers_in_use != 0) {
    fprintf(stderr, "hello: %" PRIu64 " buffers still in use\n", st.buffers_in_use);
    return 0;
  }
  return CHECK_SPOOL(spool_report(pool, stdout)); /* in use, peaks, reserved, cudaMemGetInfo */
}

int main(void) {
  /* No device, no driver, or a driver too old for this runtime: one line, and 77. */
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err == cudaSuccess && count == 0) err = cudaErrorNoDevice;
  if (err != cudaSuccess) {
    fprintf(stderr, "hello: no CUDA device: %s: %s\n", cudaGetErrorName(err),
            cudaGetErrorString(err));
    return 77;
  }

  spool_config cfg;
  spool_config_init(&cfg); /* the documented defaults */
  if (!CHECK_SPOOL(spool_config_parse(&cfg, "reserve=64MiB")) || /* text, as in a file */
      !CHECK_SPOOL(spool_config_from_env(&cfg)))                 /* SPOOL_CONF on top */
    return 1;
  spool_pool *pool = NULL;
  if (!CHECK_SPOOL(spool_pool_create(&pool, &cfg))) return 1;

  cudaStream_t stream = NULL;
  /* The pool's device is current for the stream (SPOOL_CONF may have picked another device). */
  int ok = CHECK_CUDA(cudaSetDevice(spool_pool_device(pool))) &&
           CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  if (ok) {
    ok = work(pool, stream);
    /* Before destroying a stream spool has seen: its cached blocks go back to the pool. */
    ok = CHECK_SPOOL(spool_stream_release(pool, stream)) && ok;
    ok = CHECK_CUDA(cudaStreamDestroy(stream)) && ok;
  }
  /* SPOOL_ERR_LEAKS (after listing and freeing them) if any buffer was left allocated. */
  ok = CHECK_SPOOL(spool_pool_destroy(pool)) && ok;
  if (ok) printf("hello: ok\n");
  return ok ? 0 : 1;
}

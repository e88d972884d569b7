/* check_nvtx: what memory tools are told. Each heap chunk is a heap of the NVTX memory API
 * while the pool holds it; each buffer handed out of it is a region of exactly its size while
 * the user holds it; batch members and scope pieces are regions of their own; nothing is
 * registered with nvtx=off.
 *
 * The tool here is a stand-in linked into the test (NVTX's static injection): it keeps the
 * heaps and regions it is told of and counts every call that breaks the API's rules (a region
 * outside its heap, one over another, an unknown one unregistered). compute-sanitizer itself,
 * on the planted errors, is tests/sanitizer.
 *
 * Built twice: check_nvtx_sim (cudasim) and check_nvtx_gpu (real CUDA). */
#include "test_main.h"

#define NVTX_NO_IMPL /* a tool: its hook below is what the library's NVTX calls find */
#include <nvtx3/nvToolsExtMem.h>

#include <stdio.h>
#include <string.h>

/* ---- the stand-in tool ------------------------------------------------------------------------ */

#define HEAPS 256
#define REGIONS 4096

typedef struct {
  uintptr_t addr;
  size_t size;
  bool live;
} heap_rec;

typedef struct {
  uintptr_t ptr;
  size_t size;
  intptr_t heap;
  bool live;
} region_rec;

static heap_rec heaps[HEAPS];
static region_rec regions[REGIONS];
static int nheaps, nregions;
static long calls, misuses;
static char first_misuse[256];

static void misuse(const char *what, uintptr_t p) {
  if (misuses++ == 0) snprintf(first_misuse, sizeof first_misuse, "%s (%#lx)", what,
                               (unsigned long)p);
}

static void tool_reset(void) {
  memset(heaps, 0, sizeof heaps);
  memset(regions, 0, sizeof regions);
  nheaps = nregions = 0;
  calls = misuses = 0;
  first_misuse[0] = '\0';
}

static nvtxMemHeapHandle_t NVTX_API fake_heap_register(nvtxDomainHandle_t d,
                                                       nvtxMemHeapDesc_t const *desc) {
  (void)d;
  calls++;
  const nvtxMemVirtualRangeDesc_t *r = desc->typeSpecificDesc;
  if (desc->usage != NVTX_MEM_HEAP_USAGE_TYPE_SUB_ALLOCATOR || nheaps == HEAPS) {
    misuse("a heap that is not a sub-allocator, or too many", (uintptr_t)r->ptr);
    return NULL;
  }
  heaps[nheaps] = (heap_rec){(uintptr_t)r->ptr, r->size, true};
  return (nvtxMemHeapHandle_t)(intptr_t)++nheaps;
}

static void NVTX_API fake_heap_unregister(nvtxDomainHandle_t d, nvtxMemHeapHandle_t h) {
  (void)d;
  calls++;
  intptr_t k = (intptr_t)h;
  if (k < 1 || k > nheaps || !heaps[k - 1].live) {
    misuse("unregister of an unknown heap", (uintptr_t)k);
    return;
  }
  heaps[k - 1].live = false;
  for (int i = 0; i < nregions; i++) /* its regions go with it */
    if (regions[i].live && regions[i].heap == k) regions[i].live = false;
}

static region_rec *region_at(uintptr_t p) {
  for (int i = 0; i < nregions; i++)
    if (regions[i].live && regions[i].ptr == p) return &regions[i];
  return NULL;
}

static bool overlaps_live(uintptr_t p, size_t n) {
  for (int i = 0; i < nregions; i++)
    if (regions[i].live && p < regions[i].ptr + regions[i].size && regions[i].ptr < p + n)
      return true;
  return false;
}

static void NVTX_API fake_regions_register(nvtxDomainHandle_t d,
                                           nvtxMemRegionsRegisterBatch_t const *b) {
  (void)d;
  calls++;
  const nvtxMemVirtualRangeDesc_t *r = b->regionDescElements;
  for (size_t i = 0; i < b->regionCount; i++) {
    uintptr_t p = (uintptr_t)r[i].ptr;
    intptr_t k = (intptr_t)b->heap;
    const heap_rec *h = k >= 1 && k <= nheaps ? &heaps[k - 1] : NULL;
    if (!h || !h->live || p < h->addr || p + r[i].size > h->addr + h->size)
      misuse("a region outside its heap", p);
    else if (overlaps_live(p, r[i].size)) misuse("a region over another", p);
    else if (nregions == REGIONS) misuse("too many regions", p);
    else regions[nregions++] = (region_rec){p, r[i].size, k, true};
  }
}

static void NVTX_API fake_regions_unregister(nvtxDomainHandle_t d,
                                             nvtxMemRegionsUnregisterBatch_t const *b) {
  (void)d;
  calls++;
  for (size_t i = 0; i < b->refCount; i++) {
    region_rec *r = region_at((uintptr_t)b->refElements[i].pointer);
    if (b->refType != NVTX_MEM_REGION_REF_TYPE_POINTER || !r)
      misuse("unregister of an unknown region", (uintptr_t)b->refElements[i].pointer);
    else r->live = false;
  }
}

static int NVTX_API fake_init(nvtxExtModuleInfo_t *info) {
  if (info->moduleId != NVTX_EXT_MODULEID_MEM) return 1;
  intptr_t *slots = info->segments[0].functionSlots;
  slots[NVTX3EXT_CBID_nvtxMemHeapRegister] = (intptr_t)fake_heap_register;
  slots[NVTX3EXT_CBID_nvtxMemHeapUnregister] = (intptr_t)fake_heap_unregister;
  slots[NVTX3EXT_CBID_nvtxMemRegionsRegister] = (intptr_t)fake_regions_register;
  slots[NVTX3EXT_CBID_nvtxMemRegionsUnregister] = (intptr_t)fake_regions_unregister;
  return 1;
}

NvtxExtInitializeInjectionFunc_t InitializeInjectionNvtxExtension_fnptr = fake_init;

/* ---- what a test asks of it ------------------------------------------------------------------- */

static int live_heaps(void) {
  int n = 0;
  for (int i = 0; i < nheaps; i++) n += heaps[i].live;
  return n;
}

static int live_regions(void) {
  int n = 0;
  for (int i = 0; i < nregions; i++) n += regions[i].live;
  return n;
}

static void check_region(const void *p, size_t size) {
  const region_rec *r = region_at((uintptr_t)p);
  ck_assert_msg(r, "%p (%zu bytes) is no region", p, size);
  ck_assert_msg(r->size == size, "%p is a region of %zu bytes, not %zu", p, r->size, size);
}

static void check_no_region(const void *p) {
  const region_rec *r = region_at((uintptr_t)p);
  ck_assert_msg(!r, "%p is still a region of %zu bytes", p, r ? r->size : 0);
}

static void check_no_misuse(void) {
  ck_assert_msg(misuses == 0, "%ld calls broke the NVTX rules, the first: %s", misuses,
                first_misuse);
}

static void setup(void) { tool_reset(); }

/* ---- tests ------------------------------------------------------------------------------------ */

START_TEST(each_live_buffer_is_a_region_of_its_size) {
  static const size_t sizes[] = {1000, 64 * KiB, 3 * MiB + 7, 40 * MiB + 1};
  spool_pool *p = test_pool_with("");
  cudaStream_t s = test_stream_create();
  void *a[4];
  for (int i = 0; i < 4; i++) CK_SPOOL(spool_alloc(p, &a[i], sizes[i], s));
  for (int i = 0; i < 4; i++) check_region(a[i], sizes[i]);
  ck_assert_int_eq(live_regions(), 4);
  spool_stats st = test_stats(p);
  ck_assert_int_eq(live_heaps(), (int)(st.chunk_allocs - st.chunk_frees));
  for (int i = 0; i < 4; i++) CK_SPOOL(spool_free(p, a[i], s));
  ck_assert_int_eq(live_regions(), 0);
  check_no_misuse();
  test_stream_destroy(s);
  test_pool_destroy(p);
}
END_TEST

START_TEST(a_freed_block_kept_for_reuse_is_no_region) {
  spool_pool *p = test_pool_with("");
  cudaStream_t s = test_stream_create();
  void *a = test_alloc_on(p, 4096, s);
  CK_SPOOL(spool_free(p, a, s));
  ck_assert_uint_gt(test_stats(p).bytes_front, 0); /* the stream still keeps the block */
  check_no_region(a);
  void *b = test_alloc_on(p, 3000, s); /* the kept block again, at the new size */
  ck_assert_ptr_eq(b, a);
  check_region(b, 3000);
  CK_SPOOL(spool_free(p, b, s));
  check_no_region(b);
  check_no_misuse();
  test_stream_destroy(s);
  test_pool_destroy(p);
}
END_TEST

START_TEST(batch_members_are_regions_and_go_with_the_batch) {
  spool_pool *p = test_pool_with("");
  cudaStream_t s = test_stream_create();
  size_t sizes[3] = {100, 300, 1000};
  void *m[3];
  CK_SPOOL(spool_alloc_batch(p, s, 3, sizes, m, 256));
  for (int i = 0; i < 3; i++) check_region(m[i], sizes[i]);
  ck_assert_int_eq(live_regions(), 3); /* the members, not the allocation around them */
  CK_SPOOL(spool_free(p, m[0], s));
  ck_assert_int_eq(live_regions(), 0);
  check_no_misuse();
  test_stream_destroy(s);
  test_pool_destroy(p);
}
END_TEST

START_TEST(members_of_a_page_aligned_batch_are_regions) {
  spool_pool *p = test_pool_with("");
  cudaStream_t s = test_stream_create();
  size_t sizes[2] = {5000, 100};
  void *m[2];
  CK_SPOOL(spool_alloc_batch(p, s, 2, sizes, m, 4096));
  ck_assert_uint_eq((uintptr_t)m[0] % 4096, 0);
  for (int i = 0; i < 2; i++) check_region(m[i], sizes[i]);
  ck_assert_int_eq(live_regions(), 2);
  CK_SPOOL(spool_free(p, m[0], s)); /* the first pointer, past the allocation's start */
  ck_assert_int_eq(live_regions(), 0);
  check_no_misuse();
  test_stream_destroy(s);
  test_pool_destroy(p);
}
END_TEST

START_TEST(scope_pieces_are_regions_until_the_scope_ends) {
  spool_pool *p = test_pool_with("");
  cudaStream_t s = test_stream_create();
  spool_scope *sc;
  CK_SPOOL(spool_scope_begin(p, s, &sc));
  void *a, *b, *c;
  CK_SPOOL(spool_scope_alloc(sc, &a, 10));
  CK_SPOOL(spool_scope_alloc(sc, &b, 5000));
  CK_SPOOL(spool_scope_alloc(sc, &c, 3 * MiB)); /* a chunk of its own */
  check_region(a, 10);
  check_region(b, 5000);
  check_region(c, 3 * MiB);
  ck_assert_int_eq(live_regions(), 3);
  CK_SPOOL(spool_scope_end(sc));
  ck_assert_int_eq(live_regions(), 0);
  check_no_misuse();
  test_stream_destroy(s);
  test_pool_destroy(p);
}
END_TEST

START_TEST(chunks_are_heaps_until_they_go_back) {
  spool_pool *p = test_pool_with("");
  cudaStream_t s = test_stream_create();
  void *a = test_alloc_on(p, 1000, s), *b = test_alloc_on(p, 8 * MiB, s);
  ck_assert_int_eq(live_heaps(), 2);
  CK_SPOOL(spool_free(p, a, s));
  CK_SPOOL(spool_free(p, b, s));
  CK_CUDA(cudaStreamSynchronize(s));
  CK_SPOOL(spool_trim(p, 0));
  ck_assert_int_eq(live_heaps(), 0);
  void *c = test_alloc_on(p, 1000, s);
  ck_assert_int_eq(live_heaps(), 1);
  check_region(c, 1000);
  CK_SPOOL(spool_free(p, c, s));
  test_stream_destroy(s);
  test_pool_destroy(p);
  ck_assert_int_eq(live_heaps(), 0);
  check_no_misuse();
}
END_TEST

START_TEST(buffers_freed_on_another_stream_leave_no_region) {
  spool_pool *p = test_pool_with("");
  cudaStream_t s1 = test_stream_create(), s2 = test_stream_create();
  void *a = test_alloc_on(p, 2000, s1);
  CK_SPOOL(spool_free(p, a, s2)); /* moved into the other stream's keeping */
  check_no_region(a);
  ck_assert_int_eq(spool_free(p, a, s1), SPOOL_ERR_DOUBLE_FREE);
  ck_assert_int_eq(live_regions(), 0);
  check_no_misuse();
  test_stream_destroy(s1);
  test_stream_destroy(s2);
  test_pool_destroy(p);
}
END_TEST

#ifdef SPOOL_TEST_SIM
START_TEST(a_free_waits_for_its_stream_before_the_region_goes) {
  spool_pool *p = test_pool_with("");
  cudaStream_t s = test_stream_create();
  void *a = test_alloc_on(p, 4096, s);
  cudasim_hold(s);
  CK_CUDA(cudasim_kernel(s, a, 4096, 1)); /* queued before the free, not run yet */
  ck_assert_int_eq(cudasim_pending(s), 1);
  CK_SPOOL(spool_free(p, a, s));
  ck_assert_int_eq(cudasim_pending(s), 0); /* the kernel ran before the tool lost the region */
  check_no_region(a);
  cudasim_release(s);
  check_no_misuse();
  test_stream_destroy(s);
  test_pool_destroy(p);
}
END_TEST
#endif

#ifdef SPOOL_TEST_SIM
/* compute-sanitizer takes a heap only over a cudaMalloc allocation: with a tool attached the
 * heap's chunks are cudaMalloc memory, counted in the pool's reserved bytes, given back by
 * trim with cudaFree. */
START_TEST(under_a_tool_chunks_are_cudamalloc_memory) {
  spool_pool *p = test_pool_with("");
  long probe = cudasim_calls("cudaMalloc");
  ck_assert_int_eq(probe, 1); /* the pool asked the tool once, at creation */
  cudaStream_t s = test_stream_create();
  void *a = test_alloc_on(p, 1000, s), *b = test_alloc_on(p, 8 * MiB, s);
  ck_assert_int_eq(cudasim_calls("cudaMalloc") - probe, 2);
  spool_stats st = test_stats(p);
  ck_assert_uint_eq(st.bytes_reserved, st.bytes_heap);
  CK_SPOOL(spool_free(p, a, s));
  CK_SPOOL(spool_free(p, b, s));
  long frees = cudasim_calls("cudaFree");
  CK_SPOOL(spool_trim(p, 0));
  ck_assert_int_eq(cudasim_calls("cudaFree") - frees, 2);
  ck_assert_uint_eq(test_stats(p).bytes_reserved, 0);
  test_stream_destroy(s);
  test_pool_destroy(p);
  ck_assert_int_eq(cudasim_live_allocations(), 0);
  check_no_misuse();
}
END_TEST

START_TEST(a_failed_look_for_a_tool_leaves_the_pool_on_its_pool_memory) {
  cudasim_fail("cudaMalloc", 1, cudaErrorMemoryAllocation);
  spool_pool *p = test_pool_with("");
  ck_assert_int_eq(cudaGetLastError(), cudaSuccess);
  cudaStream_t s = test_stream_create();
  void *a = test_alloc_on(p, 1000, s);
  ck_assert_int_eq(cudasim_calls("cudaMalloc"), 1); /* the look; the chunk is the pool's */
  ck_assert_int_eq(live_heaps(), 0);
  CK_SPOOL(spool_free(p, a, s));
  test_stream_destroy(s);
  test_pool_destroy(p);
  ck_assert_int_eq(cudasim_live_allocations(), 0);
  check_no_misuse();
}
END_TEST
#endif

START_TEST(nvtx_off_tells_the_tool_nothing) {
  spool_pool *p = test_pool_with("nvtx=off");
  cudaStream_t s = test_stream_create();
  void *a = test_alloc_on(p, 1000, s);
  size_t sizes[2] = {10, 20};
  void *m[2];
  CK_SPOOL(spool_alloc_batch(p, s, 2, sizes, m, 0));
  CK_SPOOL(spool_free(p, m[0], s));
  CK_SPOOL(spool_free(p, a, s));
  test_stream_destroy(s);
  test_pool_destroy(p);
  ck_assert_int_eq(calls, 0);
#ifdef SPOOL_TEST_SIM
  ck_assert_int_eq(cudasim_calls("cudaMalloc"), 0); /* the chunks are the pool's */
#endif
}
END_TEST

START_TEST(nvtx_is_on_by_default) {
  spool_config cfg;
  spool_config_init(&cfg);
  ck_assert(cfg.nvtx);
}
END_TEST

static Suite *nvtx_suite(void) {
  Suite *s = suite_create("nvtx");
  TCase *tc = test_tcase("regions");
  tcase_add_checked_fixture(tc, setup, NULL);
  tcase_add_test(tc, each_live_buffer_is_a_region_of_its_size);
  tcase_add_test(tc, a_freed_block_kept_for_reuse_is_no_region);
  tcase_add_test(tc, batch_members_are_regions_and_go_with_the_batch);
  tcase_add_test(tc, members_of_a_page_aligned_batch_are_regions);
  tcase_add_test(tc, scope_pieces_are_regions_until_the_scope_ends);
  tcase_add_test(tc, chunks_are_heaps_until_they_go_back);
  tcase_add_test(tc, buffers_freed_on_another_stream_leave_no_region);
#ifdef SPOOL_TEST_SIM
  tcase_add_test(tc, a_free_waits_for_its_stream_before_the_region_goes);
  tcase_add_test(tc, under_a_tool_chunks_are_cudamalloc_memory);
  tcase_add_test(tc, a_failed_look_for_a_tool_leaves_the_pool_on_its_pool_memory);
#endif
  tcase_add_test(tc, nvtx_off_tells_the_tool_nothing);
  tcase_add_test(tc, nvtx_is_on_by_default);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return test_main(nvtx_suite()); }

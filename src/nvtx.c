/* What spool tells memory tools (compute-sanitizer, through the NVTX memory API) about the
 * memory it keeps: every heap chunk is a sub-allocator heap, every buffer handed out of it a
 * region of its exact size. The driver sees a chunk as one live allocation however its blocks
 * come and go; registered this way, a tool sees what the user sees, and reports a use after
 * spool_free, a write past a buffer's end (into the block's slack or a neighbour's free range)
 * or an uninitialised read exactly as it does for cudaMallocAsync.
 *
 * Batches and scopes hand out pieces of one buffer: such a buffer is carved, its region
 * replaced by one per piece, and its free unregisters the pieces.
 *
 * compute-sanitizer refuses a heap over memory of a cudaMemPool ("one or more of the parameters
 * is invalid"), and takes one over a cudaMalloc allocation; so with a tool attached the pool's
 * chunks come from cudaMalloc. A pool finds out once, when it is created: with no tool (NVTX's
 * loader would find none) the switch goes off, after which each path pays one predictable
 * branch on it. Registration happens on the host; a free is stream-ordered, so with a tool
 * attached it waits for its stream before its region goes (work queued before the free may
 * still use the buffer). */
#include "internal.h"

#include <nvtx3/nvToolsExtMem.h>
#include <stdlib.h>

#define BUCKETS SPOOL__NVTX_BUCKETS

/* A carved buffer: its start and the pieces registered in it. */
typedef struct spool__carved {
  uintptr_t base;
  spool__bin pieces;
  void *heap;
  struct spool__carved *next;
} carved;

static pthread_once_t domain_once = PTHREAD_ONCE_INIT;
static nvtxDomainHandle_t domain;

static void domain_create(void) { domain = nvtxDomainCreateA("spool"); }

void spool__nvtx_init(spool_pool *p) {
  /* Off until spool__nvtx_probe finds a tool (an imported pool, never asked, stays off). */
  atomic_store_explicit(&p->nvtx.on, false, memory_order_relaxed);
  pthread_mutex_init(&p->nvtx.lock, NULL);
  for (unsigned i = 0; i < BUCKETS; i++) p->nvtx.carved[i] = NULL;
}

void spool__nvtx_fini(spool_pool *p) {
  for (unsigned i = 0; i < BUCKETS; i++) {
    carved *next;
    for (carved *c = p->nvtx.carved[i]; c; c = next) {
      next = c->next;
      free(c->pieces.items);
      free(c);
    }
    p->nvtx.carved[i] = NULL;
  }
  pthread_mutex_destroy(&p->nvtx.lock);
}

static nvtxMemHeapHandle_t heap_register(uintptr_t addr, uint64_t bytes) {
  nvtxMemVirtualRangeDesc_t range = {.size = (size_t)bytes, .ptr = (const void *)addr};
  nvtxMemHeapDesc_t desc = {
      .extCompatID = NVTX_EXT_COMPATID_MEM,
      .structSize = sizeof desc,
      .usage = NVTX_MEM_HEAP_USAGE_TYPE_SUB_ALLOCATOR,
      .type = NVTX_MEM_TYPE_VIRTUAL_ADDRESS,
      .typeSpecificDescSize = sizeof range,
      .typeSpecificDesc = &range,
      .messageType = NVTX_MESSAGE_TYPE_ASCII,
      .message.ascii = "spool heap chunk",
  };
  return nvtxMemHeapRegister(domain, &desc);
}

/* A small cudaMalloc allocation offered to the tool as a heap, and taken back. */
static bool takes_malloc_heaps(int device) {
  static const char ctx[] = "spool: asking a memory tool";
  int saved = 0;
  if (spool__device_enter(device, &saved, ctx) != SPOOL_OK) return false;
  void *u = NULL;
  bool takes = false;
  cudaError_t err = cudaMalloc(&u, SPOOL__MIN_BLOCK);
  if (err == cudaSuccess) {
    nvtxMemHeapHandle_t h = heap_register((uintptr_t)u, SPOOL__MIN_BLOCK);
    if (h) nvtxMemHeapUnregister(domain, h);
    takes = h != NULL;
    err = cudaFree(u);
  }
  bool ok = spool__device_leave(device, saved, SPOOL_OK, ctx) == SPOOL_OK && err == cudaSuccess;
  return takes && ok;
}

/* Where NVTX's loader finds a tool: the variable a tool launching the program sets, or one
 * linked in statically. (A tool may leave domains unnamed: an empty domain says nothing.) */
static bool tool_attached(void) {
  const char *path = getenv("NVTX_INJECTION64_PATH");
  return (path && *path) || InitializeInjectionNvtxExtension_fnptr != NULL;
}

void spool__nvtx_probe(spool_pool *p) {
  if (!p->cfg.nvtx) return;
  pthread_once(&domain_once, domain_create);
  char message[SPOOL__MESSAGE];
  spool__save_error(message);
  /* A shareable pool's chunks must be the pool's memory: there the tool sees whole chunks. */
  bool takes = tool_attached() && p->cfg.ipc == SPOOL_IPC_NONE && takes_malloc_heaps(p->device);
  spool__clear_cuda_error();
  spool__restore_error(message);
  p->nvtx.malloc_chunks = takes;
  atomic_store_explicit(&p->nvtx.on, takes, memory_order_relaxed);
}

void *spool__nvtx_heap(spool_pool *p, uintptr_t addr, uint64_t bytes) {
  if (!spool__nvtx_on(p)) return NULL;
  nvtxMemHeapHandle_t h = heap_register(addr, bytes);
  /* A tool that took the probe's heap and not this one: from now on the paths skip it. */
  if (!h) atomic_store_explicit(&p->nvtx.on, false, memory_order_relaxed);
  return h;
}

void spool__nvtx_heap_drop(spool_pool *p, void *heap) {
  if (heap && spool__nvtx_on(p)) nvtxMemHeapUnregister(domain, (nvtxMemHeapHandle_t)heap);
}

static void region_register(void *heap, uintptr_t ptr, uint64_t size) {
  nvtxMemVirtualRangeDesc_t range = {.size = (size_t)size, .ptr = (const void *)ptr};
  nvtxMemRegionsRegisterBatch_t batch = {
      .extCompatID = NVTX_EXT_COMPATID_MEM,
      .structSize = sizeof batch,
      .regionType = NVTX_MEM_TYPE_VIRTUAL_ADDRESS,
      .heap = (nvtxMemHeapHandle_t)heap,
      .regionCount = 1,
      .regionDescElementSize = sizeof range,
      .regionDescElements = &range,
  };
  nvtxMemRegionsRegister(domain, &batch);
}

static void regions_unregister(void *const *ptrs, size_t count) {
  for (size_t i = 0; i < count; i++) {
    nvtxMemRegionRef_t ref = {.pointer = ptrs[i]};
    nvtxMemRegionsUnregisterBatch_t batch = {
        .extCompatID = NVTX_EXT_COMPATID_MEM,
        .structSize = sizeof batch,
        .refType = NVTX_MEM_REGION_REF_TYPE_POINTER,
        .refCount = 1,
        .refElementSize = sizeof ref,
        .refElements = &ref,
    };
    nvtxMemRegionsUnregister(domain, &batch);
  }
}

void spool__nvtx_region_slow(void *heap, uintptr_t ptr, uint64_t size) {
  /* A buffer of no bytes has nothing to reach; a tool may refuse an empty region. */
  if (heap && size) region_register(heap, ptr, size);
}

static carved **slot_of(spool_pool *p, uintptr_t base) {
  carved **at = &p->nvtx.carved[(base >> 9) % BUCKETS];
  while (*at && (*at)->base != base) at = &(*at)->next;
  return at;
}

void spool__nvtx_release_slow(spool_pool *p, cudaStream_t stream, const void *heap, uintptr_t ptr,
                              uint64_t size) {
  if (!heap) return; /* a chunk the tool was not told of */
  /* Only with a tool attached, whose run is slow anyway. A failure is the stream's own error
   * (a faulted kernel, say), which the caller's next synchronize reports: not this free's. */
  if (cudaStreamSynchronize(stream) != cudaSuccess) spool__clear_cuda_error();
  pthread_mutex_lock(&p->nvtx.lock);
  carved **at = slot_of(p, ptr);
  carved *c = *at;
  if (c) *at = c->next;
  pthread_mutex_unlock(&p->nvtx.lock);
  if (!c) {
    if (size) regions_unregister((void *[]){(void *)ptr}, 1);
    return;
  }
  regions_unregister(c->pieces.items, c->pieces.count);
  free(c->pieces.items);
  free(c);
}

bool spool__nvtx_carve(spool_pool *p, void *heap, uintptr_t base, uint64_t size) {
  if (!heap || !spool__nvtx_on(p)) return false;
  carved *c = calloc(1, sizeof *c);
  if (!c) return false; /* no host memory: the buffer stays one region */
  *c = (carved){.base = base, .heap = heap};
  pthread_mutex_lock(&p->nvtx.lock);
  carved **at = slot_of(p, base);
  c->next = *at;
  *at = c;
  pthread_mutex_unlock(&p->nvtx.lock);
  if (size) regions_unregister((void *[]){(void *)base}, 1);
  return true;
}

void spool__nvtx_piece(spool_pool *p, uintptr_t base, uintptr_t ptr, uint64_t size) {
  if (!spool__nvtx_on(p) || !size) return;
  pthread_mutex_lock(&p->nvtx.lock);
  carved *c = *slot_of(p, base);
  /* Without host memory for its record a piece stays unregistered, and a tool would report
   * its use: the cost of a report that cannot be kept. */
  bool room = c && (c->pieces.count < c->pieces.cap || spool__bin_grow(&c->pieces));
  if (room) c->pieces.items[c->pieces.count++] = (void *)ptr;
  void *heap = room ? c->heap : NULL;
  pthread_mutex_unlock(&p->nvtx.lock);
  if (heap) region_register(heap, ptr, size);
}

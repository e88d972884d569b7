/* cudasim: graph allocations and graphs.
 * One part of the simulated runtime: the model is described at the top of cudasim.c; what the
 * parts share is in cudasim_internal.h. */
#include "cudasim_internal.h"

/* ---- graph allocations and graphs ------------------------------------------------------------ */

/* The graph allocation whose address is ptr (live or not). */
sim_galloc *cudasim__galloc_at(const void *ptr) {
  for (sim_galloc *ga = cudasim__g.gallocs; ga; ga = ga->next)
    if (ga->base == ptr)
      return ga;
  return NULL;
}

/* 1 when [ptr, ptr + n) lies in one graph allocation, a live one if live_only. */
int cudasim__galloc_range(const void *ptr, size_t n, int live_only) {
  uintptr_t a = (uintptr_t)ptr;
  for (sim_galloc *ga = cudasim__g.gallocs; ga; ga = ga->next) {
    uintptr_t base = (uintptr_t)ga->base;
    if ((ga->live || !live_only) && a >= base && a - base <= ga->size &&
        n <= ga->size - (a - base))
      return 1;
  }
  return 0;
}

/* An allocation node's address: reserved now, charged to the device only while live. */
sim_galloc *cudasim__galloc_new(int device, size_t size) {
  if (size > SIZE_MAX - CUDASIM_GRANULARITY)
    return NULL;
  size_t charged = cudasim__round_up(size, CUDASIM_GRANULARITY);
  sim_galloc *ga = calloc(1, sizeof *ga);
  void *mem = MAP_FAILED;
  if (ga)
    mem = mmap(NULL, charged, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
               -1, 0);
  if (mem == MAP_FAILED) {
    free(ga);
    return NULL;
  }
  ga->base = mem;
  ga->size = size;
  ga->charged = charged;
  ga->device = device;
  ga->next = cudasim__g.gallocs;
  cudasim__g.gallocs = ga;
  return ga;
}

/* Gives the address back once no node names it and it is not live. */
void cudasim__galloc_reap(sim_galloc *ga) {
  if (ga->refs > 0 || ga->live)
    return;
  for (sim_galloc **link = &cudasim__g.gallocs; *link; link = &(*link)->next)
    if (*link == ga) {
      *link = ga->next;
      break;
    }
  munmap(ga->base, ga->charged);
  free(ga);
}

static void galloc_live(sim_galloc *ga) {
  ga->live = 1;
  cudasim__g.dev[ga->device].reserved += ga->charged;
}

/* The end of a live graph allocation's lifetime (a free node, cudaFreeAsync or cudaFree). */
void cudasim__galloc_free(sim_galloc *ga) {
  ga->live = 0;
  cudasim__g.dev[ga->device].reserved -= ga->charged;
  cudasim__galloc_reap(ga);
}

static void node_release(struct CUgraphNode_st *nd) {
  if (nd->ga) {
    sim_galloc *ga = nd->ga;
    nd->ga = NULL;
    ga->refs--;
    cudasim__galloc_reap(ga);
  }
}

struct CUgraph_st *cudasim__graph_new(void) {
  struct CUgraph_st *gr = calloc(1, sizeof *gr);
  if (!gr)
    return NULL;
  gr->next = cudasim__g.graphs;
  cudasim__g.graphs = gr;
  return gr;
}

/* Adds a node (the graph owns it); NULL on host OOM. */
struct CUgraphNode_st *cudasim__graph_add(struct CUgraph_st *gr, enum sim_node_kind kind) {
  if (gr->n == gr->cap) {
    size_t cap = gr->cap ? 2 * gr->cap : 16;
    struct CUgraphNode_st **nodes = realloc(gr->nodes, cap * sizeof *nodes);
    if (!nodes)
      return NULL;
    gr->nodes = nodes;
    gr->cap = cap;
  }
  struct CUgraphNode_st *nd = calloc(1, sizeof *nd);
  if (!nd)
    return NULL;
  nd->kind = kind;
  gr->nodes[gr->n++] = nd;
  return nd;
}

static int graph_known(cudaGraph_t gr) {
  for (struct CUgraph_st *p = cudasim__g.graphs; p; p = p->next)
    if (p == gr)
      return 1;
  return 0;
}

/* Unregisters gr and frees its nodes; the handle goes to the graveyard. */
void cudasim__graph_free(struct CUgraph_st *gr) {
  for (size_t i = 0; i < gr->n; i++) {
    node_release(gr->nodes[i]);
    free(gr->nodes[i]);
  }
  free(gr->nodes);
  gr->nodes = NULL;
  gr->n = gr->cap = 0;
  for (sim_galloc *ga = cudasim__g.gallocs; ga; ga = ga->next)
    if (ga->owner == gr)
      ga->owner = NULL;
  for (struct CUgraphExec_st *x = cudasim__g.execs; x; x = x->next)
    if (x->graph == gr)
      x->graph = NULL;
  for (struct CUgraph_st **link = &cudasim__g.graphs; *link; link = &(*link)->next)
    if (*link == gr) {
      *link = gr->next;
      break;
    }
  gr->next = cudasim__graveyard.graphs;
  cudasim__graveyard.graphs = gr;
}

static int graph_has_mem_nodes(const struct CUgraph_st *gr) {
  for (size_t i = 0; i < gr->n; i++)
    if (gr->nodes[i]->kind == SIM_NODE_ALLOC || gr->nodes[i]->kind == SIM_NODE_FREE)
      return 1;
  return 0;
}

/* ---- graphs ---------------------------------------------------------------------------------- */

static cudaError_t graph_create(cudaGraph_t *out, unsigned flags) {
  if (!out || flags != 0)
    return cudaErrorInvalidValue;
  struct CUgraph_st *gr = cudasim__graph_new();
  if (!gr)
    return cudaErrorMemoryAllocation;
  *out = gr;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaGraphCreate(cudaGraph_t *pGraph, unsigned int flags) {
  SIM_CALL(graph_create(pGraph, flags));
}

static cudaError_t graph_destroy(cudaGraph_t gr) {
  if (!graph_known(gr) || gr->capture) /* a graph being captured into is the capture's */
    return cudaErrorInvalidValue;
  cudasim__graph_free(gr);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaGraphDestroy(cudaGraph_t graph) { SIM_CALL(graph_destroy(graph)); }

static cudaError_t graph_get_nodes(cudaGraph_t gr, cudaGraphNode_t *nodes, size_t *n) {
  if (!graph_known(gr) || !n)
    return cudaErrorInvalidValue;
  if (nodes) {
    for (size_t i = 0; i < *n; i++)
      nodes[i] = i < gr->n ? gr->nodes[i] : NULL;
    if (*n > gr->n)
      *n = gr->n;
  } else {
    *n = gr->n;
  }
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t *nodes,
                                        size_t *numNodes) {
  SIM_CALL(graph_get_nodes(graph, nodes, numNodes));
}

static int node_known(cudaGraphNode_t nd) {
  for (struct CUgraph_st *gr = cudasim__g.graphs; gr; gr = gr->next)
    for (size_t i = 0; i < gr->n; i++)
      if (gr->nodes[i] == nd)
        return 1;
  return 0;
}

static cudaError_t node_get_type(cudaGraphNode_t nd, enum cudaGraphNodeType *type) {
  static const enum cudaGraphNodeType types[] = {
      [SIM_NODE_MEMSET] = cudaGraphNodeTypeMemset,  [SIM_NODE_MEMCPY] = cudaGraphNodeTypeMemcpy,
      [SIM_NODE_ALLOC] = cudaGraphNodeTypeMemAlloc, [SIM_NODE_FREE] = cudaGraphNodeTypeMemFree,
      [SIM_NODE_EVENT] = cudaGraphNodeTypeEventRecord, [SIM_NODE_WAIT] = cudaGraphNodeTypeWaitEvent,
  };
  if (!type || !node_known(nd))
    return cudaErrorInvalidValue;
  *type = types[nd->kind];
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaGraphNodeGetType(cudaGraphNode_t node, enum cudaGraphNodeType *pType) {
  SIM_CALL(node_get_type(node, pType));
}

static int exec_known(cudaGraphExec_t x) {
  for (struct CUgraphExec_st *p = cudasim__g.execs; p; p = p->next)
    if (p == x)
      return 1;
  return 0;
}

static int valid_instantiate_flags(unsigned long long flags) {
  unsigned long long known = cudaGraphInstantiateFlagAutoFreeOnLaunch |
                             cudaGraphInstantiateFlagUpload | cudaGraphInstantiateFlagDeviceLaunch |
                             cudaGraphInstantiateFlagUseNodePriority;
  unsigned long long both = cudaGraphInstantiateFlagAutoFreeOnLaunch |
                            cudaGraphInstantiateFlagDeviceLaunch;
  return !(flags & ~known) && (flags & both) != both;
}

/* A graph with memory nodes may have one executable graph at a time; the copies of its nodes
 * hold their graph allocations' addresses. */
static cudaError_t instantiate(cudaGraphExec_t *out, cudaGraph_t gr, unsigned long long flags) {
  if (!out || !graph_known(gr) || !valid_instantiate_flags(flags))
    return cudaErrorInvalidValue;
  int mem = graph_has_mem_nodes(gr);
  if (mem && (gr->execs > 0 || (flags & cudaGraphInstantiateFlagDeviceLaunch)))
    return cudaErrorInvalidValue;
  struct CUgraphExec_st *x = calloc(1, sizeof *x);
  struct CUgraphNode_st *nodes = x && gr->n ? calloc(gr->n, sizeof *nodes) : NULL;
  if (!x || (gr->n && !nodes)) {
    free(x);
    return cudaErrorMemoryAllocation;
  }
  for (size_t i = 0; i < gr->n; i++) {
    nodes[i] = *gr->nodes[i];
    if (nodes[i].ga)
      nodes[i].ga->refs++;
  }
  x->nodes = nodes;
  x->n = gr->n;
  x->flags = flags;
  x->graph = gr;
  gr->execs++;
  x->next = cudasim__g.execs;
  cudasim__g.execs = x;
  *out = x;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaGraphInstantiate(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
                                           unsigned long long flags) {
  SIM_CALL(instantiate(pGraphExec, graph, flags));
}

cudaError_t CUDARTAPI cudaGraphInstantiateWithFlags(cudaGraphExec_t *pGraphExec,
                                                    cudaGraph_t graph, unsigned long long flags) {
  SIM_CALL(instantiate(pGraphExec, graph, flags));
}

/* Live graph allocations survive their executable graph (and graph): they must be freed. */
cudaError_t cudasim__exec_destroy(cudaGraphExec_t x) {
  if (!exec_known(x))
    return cudaErrorInvalidValue;
  for (size_t i = 0; i < x->n; i++)
    node_release(&x->nodes[i]);
  free(x->nodes);
  x->nodes = NULL;
  x->n = 0;
  if (x->graph)
    x->graph->execs--;
  x->graph = NULL;
  for (struct CUgraphExec_st **link = &cudasim__g.execs; *link; link = &(*link)->next)
    if (*link == x) {
      *link = x->next;
      break;
    }
  x->next = cudasim__graveyard.execs;
  cudasim__graveyard.execs = x;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaGraphExecDestroy(cudaGraphExec_t graphExec) {
  SIM_CALL(cudasim__exec_destroy(graphExec));
}

/* What a launch checks before it runs anything: no allocation of the graph may still be live
 * (unless auto-free), and its allocations must fit each device at their peak. */
static cudaError_t launch_check(const struct CUgraphExec_st *x) {
  int autofree = (x->flags & cudaGraphInstantiateFlagAutoFreeOnLaunch) != 0;
  for (size_t i = 0; i < x->n; i++)
    if (x->nodes[i].kind == SIM_NODE_ALLOC && x->nodes[i].ga->live && !autofree)
      return cudaErrorInvalidValue;
  for (int d = 0; d < cudasim__g.ndev; d++) {
    size_t cur = cudasim__g.dev[d].reserved;
    for (size_t i = 0; i < x->n; i++) {
      const struct CUgraphNode_st *nd = &x->nodes[i];
      if (!nd->ga || nd->ga->device != d)
        continue;
      if (nd->kind == SIM_NODE_ALLOC && nd->ga->live) /* auto-freed first */
        cur -= nd->ga->charged;
      if (nd->kind == SIM_NODE_FREE)
        cur -= nd->ga->charged < cur ? nd->ga->charged : cur;
      else if (cudasim__g.dev[d].capacity < cur ||
               nd->ga->charged > cudasim__g.dev[d].capacity - cur)
        return cudaErrorMemoryAllocation;
      else
        cur += nd->ga->charged;
    }
  }
  return cudaSuccess;
}

static cudaError_t node_run(const struct CUgraphNode_st *nd, struct CUstream_st *s) {
  switch (nd->kind) {
  case SIM_NODE_MEMSET: return cudasim__do_memset(nd->dst, nd->value, nd->n);
  case SIM_NODE_MEMCPY: return cudasim__do_memcpy(nd->dst, nd->src, nd->n, nd->dir);
  case SIM_NODE_ALLOC:
    if (nd->ga->live)
      cudasim__galloc_free(nd->ga); /* cudaGraphInstantiateFlagAutoFreeOnLaunch */
    galloc_live(nd->ga);
    return cudaSuccess;
  case SIM_NODE_FREE:
    if (!nd->ga->live)
      return cudaErrorInvalidValue;
    cudasim__galloc_free(nd->ga);
    return cudaSuccess;
  case SIM_NODE_EVENT:
    if (cudasim__event_known(nd->ev))
      cudasim__event_set(nd->ev, s);
    return cudaSuccess;
  case SIM_NODE_WAIT: return cudaSuccess;
  }
  return cudaErrorUnknown;
}

/* Runs the nodes in capture order, each one operation of s. */
static cudaError_t graph_launch(cudaGraphExec_t x, cudaStream_t h) {
  struct CUstream_st *s;
  if (!exec_known(x))
    return cudaErrorInvalidValue;
  cudaError_t e = cudasim__stream_get(h, &s);
  if (e == cudaSuccess)
    e = cudasim__stream_use(s);
  if (e != cudaSuccess)
    return e;
  if (s->cap)
    return cudaErrorStreamCaptureUnsupported; /* cudasim captures no child graphs */
  e = launch_check(x);
  for (size_t i = 0; e == cudaSuccess && i < x->n; i++) {
    e = node_run(&x->nodes[i], s);
    if (x->nodes[i].kind != SIM_NODE_EVENT)
      cudasim__enqueue(s);
  }
  return e;
}

cudaError_t CUDARTAPI cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream) {
  SIM_CALL(graph_launch(graphExec, stream));
}


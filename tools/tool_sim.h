/* For the -sim builds of the replaying tools: the simulated device the replays run on. */
#ifndef SPOOL_TOOLS_TOOL_SIM_H
#define SPOOL_TOOLS_TOOL_SIM_H

#include "cudasim.h"
#include "trace_read.h"

/* capacity 0: the recorded device's memory, else 80 GiB (an H100's or so). Pools reserve in an
 * H200's 32 MiB segments, so that the replays' reserved bytes read as a GPU's. */
static inline void tool_sim_device(int device, uint64_t capacity, const tf_trace *t) {
  uint64_t bytes = capacity ? capacity : t->device_total ? t->device_total : (uint64_t)80 << 30;
  cudasim_set_device_count(device + 1);
  cudasim_set_capacity(device, (size_t)bytes);
  cudasim_set_pool_segment(CUDASIM_H200_POOL_SEGMENT);
}

#endif

/* The trace file's layout (docs/trace.md), shared by the writer (trace.c) and the readers in
 * tools/. Every integer is little-endian; the file header's byte-order mark says so. */
#ifndef SPOOL_TRACE_FORMAT_H
#define SPOOL_TRACE_FORMAT_H

#include <stdint.h>

#define SPOOL_TRACE_MAGIC "SPOOLTRC" /* 8 bytes, no NUL */
#define SPOOL_TRACE_VERSION 1
#define SPOOL_TRACE_BOM 0x01020304u
#define SPOOL_TRACE_BLOCK_MAGIC 0x4B425053u /* "SPBK" */
/* A block's records: small enough to lose little in a crash, large enough to write seldom. */
#define SPOOL_TRACE_BLOCK_PAYLOAD 65536u
#define SPOOL_TRACE_CONFIG_MAX 16384u /* the recorded pool's config text, NUL excluded */
#define SPOOL_TRACE_SITE_MAX 1023u    /* longest site text kept */

/* At offset 0; the recorded pool's config text (config_bytes, no NUL) follows it. */
typedef struct spool_trace_header {
  char magic[8];
  uint32_t version;
  uint32_t header_bytes; /* sizeof this struct: readers skip what a later version adds */
  uint32_t record_bytes; /* sizeof(spool_trace_record) */
  uint32_t bom;          /* SPOOL_TRACE_BOM as written: tells the byte order */
  int32_t device;
  uint32_t config_bytes;
  uint64_t start_unix_ns;   /* wall clock when the trace began; record times count from it */
  uint64_t device_total;    /* cudaMemGetInfo's total of the pool's device; 0 when unknown */
  uint64_t pid;
  uint64_t pool_id;         /* the pool's number in its process */
} spool_trace_header;

/* Before each block's payload. */
typedef struct spool_trace_block {
  uint32_t magic;         /* SPOOL_TRACE_BLOCK_MAGIC */
  uint32_t payload_bytes; /* at most SPOOL_TRACE_BLOCK_PAYLOAD */
  uint32_t records;       /* records in the payload, site records included */
  uint32_t checksum;      /* FNV-1a (32 bits) of the payload */
  uint64_t thread;        /* the recording thread's number in its process, from 1 */
  uint64_t first_seq;     /* seq of the block's first event record */
} spool_trace_block;

typedef enum spool_trace_kind {
  SPOOL_TRACE_ALLOC = 1,         /* ptr, size asked, stream; aux: batch member count or 0 */
  SPOOL_TRACE_FREE = 2,          /* ptr, stream it was freed on (size: 0, the reader knows) */
  SPOOL_TRACE_RECORD_STREAM = 3, /* ptr, stream: the other stream recorded on it */
  SPOOL_TRACE_SCOPE_BEGIN = 4,   /* ptr: the scope, stream, aux: its number */
  SPOOL_TRACE_SCOPE_END = 5,     /* ptr: the scope, stream, aux: its number */
  SPOOL_TRACE_TRIM = 6,          /* size: keep_bytes */
  SPOOL_TRACE_STREAM_RELEASE = 7, /* stream: released (a stream synchronize) */
  SPOOL_TRACE_FLUSH = 8,         /* spool_trace_flush */
  SPOOL_TRACE_SITE = 9,          /* defines site id `site` for its block: aux text bytes follow,
                                    padded to 8; size: line; flags: SPOOL_TRACE_TAG for a tag */
  SPOOL_TRACE_END = 10,          /* pool destroy: size: peak bytes in use, aux: buffers live */
  SPOOL_TRACE_CHUNK_ALLOC = 11,  /* the heap took a chunk from the pool: ptr, size */
  SPOOL_TRACE_CHUNK_FREE = 12,   /* the heap gave a chunk back (idle, trim, release): ptr, size,
                                    stream; at destroy the rest go without records */
  SPOOL_TRACE_KINDS = 13
} spool_trace_kind;

enum {
  SPOOL_TRACE_CAPTURING = 1, /* the stream was being captured into a graph */
  SPOOL_TRACE_AFTER = 2,     /* a free through spool_free_after (ptr waits for an event) */
  SPOOL_TRACE_TAG = 4        /* site record: the text is a tag, not a file */
};

/* One event, 56 bytes. */
typedef struct spool_trace_record {
  uint8_t kind;    /* spool_trace_kind */
  uint8_t status;  /* the spool_status the call returned */
  uint8_t flags;
  uint8_t zero;
  uint32_t site;   /* site id within the block, 0: none */
  uint64_t seq;    /* order of the events of the trace, from 1, across threads */
  uint64_t time_ns; /* since start_unix_ns (CLOCK_MONOTONIC) */
  uint64_t ptr;
  uint64_t size;
  uint64_t stream; /* the cudaStream_t's value */
  uint32_t aux;
  uint32_t zero2;
} spool_trace_record;

_Static_assert(sizeof(spool_trace_header) == 64, "trace header layout");
_Static_assert(sizeof(spool_trace_block) == 32, "trace block layout");
_Static_assert(sizeof(spool_trace_record) == 56, "trace record layout");

static inline uint32_t spool_trace_fnv1a(const unsigned char *p, uint64_t n) {
  uint32_t h = 2166136261u;
  for (uint64_t i = 0; i < n; i++) h = (h ^ p[i]) * 16777619u;
  return h;
}

#endif /* SPOOL_TRACE_FORMAT_H */

/* Status codes, their names and strings, and this thread's last error message. */
#include "internal.h"

#include <stdio.h>
#include <string.h>

/* One message per thread, so that concurrent failures never overwrite each other's words. */
static _Thread_local char last_error[SPOOL__MESSAGE];

#define SPOOL__NAME_CASE(name, str) case SPOOL_##name: return "SPOOL_" #name;
#define SPOOL__STRING_CASE(name, str) case SPOOL_##name: return str;

const char *spool_status_name(spool_status s) {
  static _Thread_local char unknown[32];
  switch (s) {
    SPOOL_STATUS_MAP(SPOOL__NAME_CASE)
    case SPOOL_STATUS_COUNT: break;
  }
  snprintf(unknown, sizeof unknown, "SPOOL_STATUS_%d", (int)s);
  return unknown;
}

const char *spool_status_string(spool_status s) {
  switch (s) {
    SPOOL_STATUS_MAP(SPOOL__STRING_CASE)
    case SPOOL_STATUS_COUNT: break;
  }
  return "unknown status";
}

const char *spool_last_error(void) { return last_error; }

static void set_message(const char *fmt, va_list ap) {
  vsnprintf(last_error, sizeof last_error, fmt, ap);
}

spool_status spool__fail(spool_status s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  set_message(fmt, ap);
  va_end(ap);
  return s;
}

spool_status spool__status_of_cuda(cudaError_t err) {
  switch (err) {
    case cudaSuccess: return SPOOL_OK;
    case cudaErrorMemoryAllocation: return SPOOL_ERR_OOM;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInvalidDevice: return SPOOL_ERR_NO_DEVICE;
    case cudaErrorNotSupported: return SPOOL_ERR_UNSUPPORTED;
    default: return SPOOL_ERR_CUDA;
  }
}

void spool__clear_cuda_error(void) {
  /* The value is the error spool has just reported in its own words; only the clearing matters.
   * Sticky errors stay: CUDA keeps returning them whatever is cleared. */
  (void)cudaGetLastError();
}

spool_status spool__fail_cuda(cudaError_t err, const char *api, const char *fmt, ...) {
  char context[640];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(context, sizeof context, fmt, ap);
  va_end(ap);
  snprintf(last_error, sizeof last_error, "%s: %s failed: %s (%s)", context, api,
           cudaGetErrorName(err), cudaGetErrorString(err));
  spool__clear_cuda_error();
  return spool__status_of_cuda(err);
}

spool_status spool__append(spool_status s, const char *fmt, ...) {
  size_t used = strlen(last_error);
  if (used + 1 >= sizeof last_error) return s;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_error + used, sizeof last_error - used, fmt, ap);
  va_end(ap);
  return s;
}

spool_status spool__prefix(spool_status s, const char *context) {
  size_t head = strlen(context) + 2, size = sizeof last_error;
  if (head >= size) return s;
  /* Shift the message right (dropping what no longer fits), then write the context in front. */
  size_t keep = strlen(last_error); /* always terminated: vsnprintf wrote it */
  if (keep > size - 1 - head) keep = size - 1 - head;
  memmove(last_error + head, last_error, keep);
  last_error[head + keep] = '\0';
  memcpy(last_error, context, head - 2);
  memcpy(last_error + head - 2, ": ", 2);
  return s;
}

void spool__save_error(char out[SPOOL__MESSAGE]) { memcpy(out, last_error, sizeof last_error); }

void spool__restore_error(const char saved[SPOOL__MESSAGE]) {
  memcpy(last_error, saved, sizeof last_error);
}

spool_status spool__also_failed(spool_status s, cudaError_t err, const char *what) {
  spool__append(s, "; %s also failed: %s", what, cudaGetErrorName(err));
  spool__clear_cuda_error();
  return s;
}

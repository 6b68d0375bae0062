/*
 * cudak_probe.h - is a GPU usable? The one rule every part follows: any error
 * from cudaGetDeviceCount (no driver, no device, a broken install) or a count
 * of 0 means "no GPU", and the CPU path (or a skipped test) follows.
 */
#ifndef DDP_CUDA_KERNELS_CUDAK_PROBE_H
#define DDP_CUDA_KERNELS_CUDAK_PROBE_H

#include <stddef.h>

/* Returns the number of usable CUDA devices (> 0), or 0 when none is usable;
 * in that case, if `why` is not NULL, a short reason is written there (e.g.
 * "cudaGetDeviceCount: CUDA driver version is insufficient ..."). */
int cudak_probe_devices(char *why, size_t why_len);

/* Exit code for a test that needs a GPU and has none: meson's "skipped". */
#define CUDAK_EXIT_SKIP 77

#endif

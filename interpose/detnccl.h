/* detnccl: the public C API of the shim (libdetnccl.so), for jobs that want to help the tracer.
 *
 * Everything here is optional: a job that calls none of it is traced all the same. The functions are exported by
 * the preloaded shim; from Python, use interpose/python/detnccl_step.py, which calls them through ctypes when the
 * shim is loaded and does nothing otherwise. From C or C++, look them up with dlsym(RTLD_DEFAULT, ...) so that the
 * program also runs without the shim.
 */
#ifndef DETNCCL_INTERPOSE_DETNCCL_H
#define DETNCCL_INTERPOSE_DETNCCL_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Marks the job's training step: every following call record carries it, and DETNCCL_STEPS selects by it.
 * Thread-safe; cheap (one atomic store). */
void detnccl_set_step(uint64_t step);

/* Marks the step as the job's optimizer counts it: the number of optimizer steps taken so far. Called by detnccl's
 * PyTorch hook (share/detnccl/python/autostep, loaded by `detnccl run`), not meant for job code. Records carry it
 * with step_source "optimizer". Explicit marks win: once the job has called detnccl_set_step, and whenever
 * DETNCCL_STEP_BOUNDARY names the step's call, this is ignored. It stops the shim's own numbering of iterations
 * from the call pattern. Thread-safe; cheap. */
void detnccl_set_optimizer_step(uint64_t step);

/* Asks the kernel to write this process's log to disk now (records already survive a crash of the process; this
 * narrows what a crash of the machine can lose). Returns at once. */
void detnccl_flush(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* DETNCCL_INTERPOSE_DETNCCL_H */

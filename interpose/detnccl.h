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

/* Asks the kernel to write this process's log to disk now (records already survive a crash of the process; this
 * narrows what a crash of the machine can lose). Returns at once. */
void detnccl_flush(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* DETNCCL_INTERPOSE_DETNCCL_H */

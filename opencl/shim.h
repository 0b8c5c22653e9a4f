// C helpers for package opencl. Each helper folds several OpenCL calls into
// one so that a Go call crosses the cgo boundary once: the hot path (Launch)
// costs one cgo call however many arguments a kernel has.
#ifndef TLITE_OPENCL_SHIM_H
#define TLITE_OPENCL_SHIM_H

#include "loader.h"

// Vendor priority tokens, spelled out because not every header set has them
// (values from the cl_qcom_priority_hint and cl_khr_priority_hints specs).
#define TL_CONTEXT_PRIORITY_HINT_QCOM 0x40C9
#define TL_PRIORITY_HINT_HIGH_QCOM 0x40CA
#define TL_PRIORITY_HINT_NORMAL_QCOM 0x40CB
#define TL_PRIORITY_HINT_LOW_QCOM 0x40CC
#define TL_QUEUE_PRIORITY_KHR 0x1096
#define TL_QUEUE_PRIORITY_HIGH_KHR (1 << 0)
#define TL_QUEUE_PRIORITY_LOW_KHR (1 << 2)

// tl_arg is one kernel argument. val holds the value's bytes from offset 0
// (written by Go through a pointer of the argument's type, so it is
// endian-independent); local != 0 means size bytes of __local memory.
typedef struct {
	cl_ulong val;
	size_t size;
	int local;
} tl_arg;

// tl_str returns a malloc'd NUL-terminated device (which=0) or platform
// (which=1) info string, whatever its length.
char *tl_str(int which, void *obj, cl_uint param, cl_int *err);

// tl_context creates a one-device context; qcom_hint != 0 adds
// CL_CONTEXT_PRIORITY_HINT_QCOM with that value.
cl_context tl_context(cl_platform_id p, cl_device_id d, cl_uint qcom_hint, cl_int *err);

// tl_queue creates an in-order queue. use_props selects
// clCreateCommandQueueWithProperties (OpenCL >= 2.0); khr_prio != 0 adds
// CL_QUEUE_PRIORITY_KHR.
cl_command_queue tl_queue(cl_context c, cl_device_id d, int use_props, int profile, cl_uint khr_prio, cl_int *err);

cl_mem tl_sub(cl_mem parent, size_t off, size_t size, cl_int *err);

// tl_launch sets every argument of k and enqueues it. On an argument error
// *bad is the failing index; otherwise *bad is -1.
cl_int tl_launch(cl_command_queue q, cl_kernel k, cl_uint nargs, const tl_arg *args,
                 cl_uint dim, const size_t *global, const size_t *local, cl_event *ev, int *bad);

// tl_build_log returns the malloc'd build log of p on d.
char *tl_build_log(cl_program p, cl_device_id d);

// tl_binary returns the malloc'd binary of a one-device program.
unsigned char *tl_binary(cl_program p, size_t *size, cl_int *err);

cl_program tl_from_binary(cl_context c, cl_device_id d, const unsigned char *bin, size_t size, cl_int *err);

// tl_event_times fills status, start and end for n events and releases those
// that completed (status <= CL_COMPLETE), so callers drop them afterwards.
void tl_event_times(cl_event *ev, int n, cl_int *status, cl_ulong *start, cl_ulong *end);

#endif

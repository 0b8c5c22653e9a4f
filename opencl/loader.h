// The OpenCL entry points tlite uses, loaded with dlopen rather than linked,
// so that a tlite binary starts where no OpenCL library is installed (and
// can fall back to its pure-Go backend), and so that phone builds need no
// link-time libOpenCL (Android keeps it in /vendor, outside the NDK).
//
// Each function clFoo is reached as tl_clFoo, which calls through the
// pointer tl_load filled in. Distinct names keep these wrappers from
// interposing on a libOpenCL that something else in the process links.
#ifndef TLITE_OPENCL_LOADER_H
#define TLITE_OPENCL_LOADER_H

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 300
#endif
#define CL_USE_DEPRECATED_OPENCL_1_2_APIS
#include <CL/cl.h>
#include <CL/cl_ext.h>
#include <stddef.h>

typedef void (CL_CALLBACK *tl_ctx_notify)(const char *, const void *, size_t, void *);
typedef void (CL_CALLBACK *tl_build_notify)(cl_program, void *);

// X(return type, name, parameters, arguments) for every required function.
#define TL_CL_FUNCS(X) \
	X(cl_int, clGetPlatformIDs, (cl_uint n, cl_platform_id *p, cl_uint *np), (n, p, np)) \
	X(cl_int, clGetPlatformInfo, (cl_platform_id p, cl_platform_info i, size_t n, void *v, size_t *r), (p, i, n, v, r)) \
	X(cl_int, clGetDeviceIDs, (cl_platform_id p, cl_device_type t, cl_uint n, cl_device_id *d, cl_uint *nd), (p, t, n, d, nd)) \
	X(cl_int, clGetDeviceInfo, (cl_device_id d, cl_device_info i, size_t n, void *v, size_t *r), (d, i, n, v, r)) \
	X(cl_context, clCreateContext, (const cl_context_properties *p, cl_uint n, const cl_device_id *d, tl_ctx_notify f, void *u, cl_int *e), (p, n, d, f, u, e)) \
	X(cl_int, clReleaseContext, (cl_context c), (c)) \
	X(cl_command_queue, clCreateCommandQueue, (cl_context c, cl_device_id d, cl_command_queue_properties p, cl_int *e), (c, d, p, e)) \
	X(cl_int, clReleaseCommandQueue, (cl_command_queue q), (q)) \
	X(cl_mem, clCreateBuffer, (cl_context c, cl_mem_flags f, size_t n, void *h, cl_int *e), (c, f, n, h, e)) \
	X(cl_mem, clCreateSubBuffer, (cl_mem m, cl_mem_flags f, cl_buffer_create_type t, const void *i, cl_int *e), (m, f, t, i, e)) \
	X(cl_int, clRetainMemObject, (cl_mem m), (m)) \
	X(cl_int, clReleaseMemObject, (cl_mem m), (m)) \
	X(cl_int, clEnqueueWriteBuffer, (cl_command_queue q, cl_mem m, cl_bool b, size_t o, size_t n, const void *p, cl_uint ne, const cl_event *w, cl_event *ev), (q, m, b, o, n, p, ne, w, ev)) \
	X(cl_int, clEnqueueReadBuffer, (cl_command_queue q, cl_mem m, cl_bool b, size_t o, size_t n, void *p, cl_uint ne, const cl_event *w, cl_event *ev), (q, m, b, o, n, p, ne, w, ev)) \
	X(cl_int, clEnqueueCopyBuffer, (cl_command_queue q, cl_mem s, cl_mem d, size_t so, size_t dof, size_t n, cl_uint ne, const cl_event *w, cl_event *ev), (q, s, d, so, dof, n, ne, w, ev)) \
	X(cl_int, clEnqueueFillBuffer, (cl_command_queue q, cl_mem m, const void *p, size_t ps, size_t o, size_t n, cl_uint ne, const cl_event *w, cl_event *ev), (q, m, p, ps, o, n, ne, w, ev)) \
	X(cl_program, clCreateProgramWithSource, (cl_context c, cl_uint n, const char **s, const size_t *l, cl_int *e), (c, n, s, l, e)) \
	X(cl_program, clCreateProgramWithBinary, (cl_context c, cl_uint n, const cl_device_id *d, const size_t *l, const unsigned char **b, cl_int *st, cl_int *e), (c, n, d, l, b, st, e)) \
	X(cl_int, clBuildProgram, (cl_program p, cl_uint n, const cl_device_id *d, const char *o, tl_build_notify f, void *u), (p, n, d, o, f, u)) \
	X(cl_int, clGetProgramBuildInfo, (cl_program p, cl_device_id d, cl_program_build_info i, size_t n, void *v, size_t *r), (p, d, i, n, v, r)) \
	X(cl_int, clGetProgramInfo, (cl_program p, cl_program_info i, size_t n, void *v, size_t *r), (p, i, n, v, r)) \
	X(cl_int, clReleaseProgram, (cl_program p), (p)) \
	X(cl_kernel, clCreateKernel, (cl_program p, const char *name, cl_int *e), (p, name, e)) \
	X(cl_int, clGetKernelInfo, (cl_kernel k, cl_kernel_info i, size_t n, void *v, size_t *r), (k, i, n, v, r)) \
	X(cl_int, clReleaseKernel, (cl_kernel k), (k)) \
	X(cl_int, clSetKernelArg, (cl_kernel k, cl_uint i, size_t n, const void *v), (k, i, n, v)) \
	X(cl_int, clEnqueueNDRangeKernel, (cl_command_queue q, cl_kernel k, cl_uint dim, const size_t *o, const size_t *g, const size_t *l, cl_uint ne, const cl_event *w, cl_event *ev), (q, k, dim, o, g, l, ne, w, ev)) \
	X(cl_int, clFlush, (cl_command_queue q), (q)) \
	X(cl_int, clFinish, (cl_command_queue q), (q)) \
	X(cl_int, clGetEventInfo, (cl_event ev, cl_event_info i, size_t n, void *v, size_t *r), (ev, i, n, v, r)) \
	X(cl_int, clGetEventProfilingInfo, (cl_event ev, cl_profiling_info i, size_t n, void *v, size_t *r), (ev, i, n, v, r)) \
	X(cl_int, clReleaseEvent, (cl_event ev), (ev))

#define TL_DECLARE(ret, name, params, args) ret tl_##name params;
TL_CL_FUNCS(TL_DECLARE)
#undef TL_DECLARE

// tl_clCreateCommandQueueWithProperties is optional (OpenCL 2.0): without it
// the wrapper fails with CL_INVALID_OPERATION.
cl_command_queue tl_clCreateCommandQueueWithProperties(cl_context c, cl_device_id d, const cl_queue_properties *p, cl_int *e);
int tl_has_queue_with_properties(void);

// tl_load opens the OpenCL library at path and resolves every function.
// It returns 0, or -1 with a message in err. With publish == 0 it only
// checks that path would do, and closes it again; once a library is
// published, publishing calls return 0 at once.
int tl_load(const char *path, int publish, char *err, size_t errlen);

#endif

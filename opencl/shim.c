#include "shim.h"
#include <stdlib.h>

char *tl_str(int which, void *obj, cl_uint param, cl_int *err) {
	size_t n = 0;
	*err = which == 0 ? tl_clGetDeviceInfo((cl_device_id)obj, param, 0, NULL, &n)
	                  : tl_clGetPlatformInfo((cl_platform_id)obj, param, 0, NULL, &n);
	if (*err != CL_SUCCESS) return NULL;
	char *s = calloc(n + 1, 1);
	if (s == NULL) {
		*err = CL_OUT_OF_HOST_MEMORY;
		return NULL;
	}
	*err = which == 0 ? tl_clGetDeviceInfo((cl_device_id)obj, param, n, s, NULL)
	                  : tl_clGetPlatformInfo((cl_platform_id)obj, param, n, s, NULL);
	if (*err != CL_SUCCESS) {
		free(s);
		return NULL;
	}
	return s;
}

cl_context tl_context(cl_platform_id p, cl_device_id d, cl_uint qcom_hint, cl_int *err) {
	cl_context_properties props[5] = {CL_CONTEXT_PLATFORM, (cl_context_properties)p, 0, 0, 0};
	if (qcom_hint != 0) {
		props[2] = TL_CONTEXT_PRIORITY_HINT_QCOM;
		props[3] = (cl_context_properties)qcom_hint;
	}
	return tl_clCreateContext(props, 1, &d, NULL, NULL, err);
}

cl_command_queue tl_queue(cl_context c, cl_device_id d, int use_props, int profile, cl_uint khr_prio, cl_int *err) {
	if (!use_props) {
		return tl_clCreateCommandQueue(c, d, profile ? CL_QUEUE_PROFILING_ENABLE : 0, err);
	}
	cl_queue_properties props[5] = {0};
	int i = 0;
	if (profile) {
		props[i++] = CL_QUEUE_PROPERTIES;
		props[i++] = CL_QUEUE_PROFILING_ENABLE;
	}
	if (khr_prio != 0) {
		props[i++] = TL_QUEUE_PRIORITY_KHR;
		props[i++] = khr_prio;
	}
	return tl_clCreateCommandQueueWithProperties(c, d, props, err);
}

cl_mem tl_sub(cl_mem parent, size_t off, size_t size, cl_int *err) {
	cl_buffer_region r = {off, size};
	return tl_clCreateSubBuffer(parent, 0, CL_BUFFER_CREATE_TYPE_REGION, &r, err);
}

cl_int tl_launch(cl_command_queue q, cl_kernel k, cl_uint nargs, const tl_arg *args,
                 cl_uint dim, const size_t *global, const size_t *local, cl_event *ev, int *bad) {
	*bad = -1;
	for (cl_uint i = 0; i < nargs; i++) {
		cl_int e = tl_clSetKernelArg(k, i, args[i].size, args[i].local ? NULL : (const void *)&args[i].val);
		if (e != CL_SUCCESS) {
			*bad = (int)i;
			return e;
		}
	}
	return tl_clEnqueueNDRangeKernel(q, k, dim, NULL, global, local, 0, NULL, ev);
}

char *tl_build_log(cl_program p, cl_device_id d) {
	size_t n = 0;
	if (tl_clGetProgramBuildInfo(p, d, CL_PROGRAM_BUILD_LOG, 0, NULL, &n) != CL_SUCCESS) return NULL;
	char *s = calloc(n + 1, 1);
	if (s == NULL) return NULL;
	if (tl_clGetProgramBuildInfo(p, d, CL_PROGRAM_BUILD_LOG, n, s, NULL) != CL_SUCCESS) {
		free(s);
		return NULL;
	}
	return s;
}

unsigned char *tl_binary(cl_program p, size_t *size, cl_int *err) {
	*size = 0;
	*err = tl_clGetProgramInfo(p, CL_PROGRAM_BINARY_SIZES, sizeof(size_t), size, NULL);
	if (*err != CL_SUCCESS) return NULL;
	if (*size == 0) {
		*err = CL_INVALID_PROGRAM_EXECUTABLE;
		return NULL;
	}
	unsigned char *bin = malloc(*size);
	if (bin == NULL) {
		*err = CL_OUT_OF_HOST_MEMORY;
		return NULL;
	}
	*err = tl_clGetProgramInfo(p, CL_PROGRAM_BINARIES, sizeof(bin), &bin, NULL);
	if (*err != CL_SUCCESS) {
		free(bin);
		return NULL;
	}
	return bin;
}

cl_program tl_from_binary(cl_context c, cl_device_id d, const unsigned char *bin, size_t size, cl_int *err) {
	cl_int status = CL_SUCCESS;
	cl_program p = tl_clCreateProgramWithBinary(c, 1, &d, &size, &bin, &status, err);
	if (*err == CL_SUCCESS && status != CL_SUCCESS) {
		tl_clReleaseProgram(p);
		*err = status;
		return NULL;
	}
	return p;
}

void tl_event_times(cl_event *ev, int n, cl_int *status, cl_ulong *start, cl_ulong *end) {
	for (int i = 0; i < n; i++) {
		start[i] = end[i] = 0;
		cl_int e = tl_clGetEventInfo(ev[i], CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof(cl_int), &status[i], NULL);
		if (e != CL_SUCCESS) status[i] = e;
		if (status[i] > CL_COMPLETE) continue;
		if (status[i] == CL_COMPLETE) {
			tl_clGetEventProfilingInfo(ev[i], CL_PROFILING_COMMAND_START, sizeof(cl_ulong), &start[i], NULL);
			tl_clGetEventProfilingInfo(ev[i], CL_PROFILING_COMMAND_END, sizeof(cl_ulong), &end[i], NULL);
		}
		tl_clReleaseEvent(ev[i]);
	}
}

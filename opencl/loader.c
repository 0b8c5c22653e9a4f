#include "loader.h"
#include <dlfcn.h>
#include <stdio.h>

#define TL_POINTER(ret, name, params, args) static ret (CL_API_CALL *p_##name) params;
TL_CL_FUNCS(TL_POINTER)
#undef TL_POINTER

#define TL_WRAP(ret, name, params, args) ret tl_##name params { return p_##name args; }
TL_CL_FUNCS(TL_WRAP)
#undef TL_WRAP

static cl_command_queue (CL_API_CALL *p_clCreateCommandQueueWithProperties)(cl_context, cl_device_id, const cl_queue_properties *, cl_int *);

cl_command_queue tl_clCreateCommandQueueWithProperties(cl_context c, cl_device_id d, const cl_queue_properties *p, cl_int *e) {
	if (p_clCreateCommandQueueWithProperties == NULL) {
		*e = CL_INVALID_OPERATION;
		return NULL;
	}
	return p_clCreateCommandQueueWithProperties(c, d, p, e);
}

int tl_has_queue_with_properties(void) { return p_clCreateCommandQueueWithProperties != NULL; }

static void *lib;

int tl_load(const char *path, int publish, char *err, size_t errlen) {
	if (publish && lib != NULL) return 0;
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) {
		const char *e = dlerror();
		snprintf(err, errlen, "%s", e ? e : "dlopen failed");
		return -1;
	}
	// Resolve everything before publishing any pointer, so that a library
	// missing one function is not half-used.
#define TL_RESOLVE(ret, name, params, args) \
	void *s_##name = dlsym(h, #name); \
	if (s_##name == NULL) { \
		snprintf(err, errlen, "%s: no symbol %s", path, #name); \
		dlclose(h); \
		return -1; \
	}
	TL_CL_FUNCS(TL_RESOLVE)
#undef TL_RESOLVE
	if (!publish) {
		dlclose(h);
		return 0;
	}
#define TL_SET(ret, name, params, args) *(void **)&p_##name = s_##name;
	TL_CL_FUNCS(TL_SET)
#undef TL_SET
	*(void **)&p_clCreateCommandQueueWithProperties = dlsym(h, "clCreateCommandQueueWithProperties");
	lib = h;
	return 0;
}

package opencl

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"unsafe"

	"github.com/ebitengine/purego"
)

// The OpenCL library is opened with dlopen at run time through purego, not
// linked and not reached through cgo: a tlite binary starts where no OpenCL
// is installed (and can fall back to its pure-Go backend), phone builds need
// no link-time libOpenCL (Android keeps it in /vendor, outside the NDK), and
// CGO_ENABLED=0 builds (cross-compiled ones included) need no C toolchain.
// Every call goes through clCall below; the C types map to Go as
//
//	cl_int int32, cl_uint/cl_bool uint32, cl_ulong and bitfields uint64,
//	size_t and every handle (cl_mem, cl_kernel, ...) uintptr.
//
// Passing a uint64 in one argument slot needs a 64-bit ABI; load refuses
// 32-bit builds.

// handle is an OpenCL object (cl_platform_id, cl_context, cl_mem, ...).
type handle = uintptr

// OpenCL constants tlite uses, from the Khronos headers (cl.h).
const (
	clSuccess              = 0
	clDeviceNotFound       = -1
	clOutOfHostMemory      = -6
	clInvalidProgramExec   = -45
	clInvalidOperation     = -59
	clPlatformNotFoundKHR  = -1001
	clTrue                 = 1
	clComplete             = 0
	clPlatformName         = 0x0902
	clDeviceType           = 0x1000
	clDeviceMaxComputeUnit = 0x1002
	clDeviceMaxWIDims      = 0x1003
	clDeviceMaxWGSize      = 0x1004
	clDeviceMaxWISizes     = 0x1005
	clDeviceMaxAlloc       = 0x1010
	clDeviceImageSupport   = 0x1016
	clDeviceBaseAddrAlign  = 0x1019
	clDeviceGlobalMem      = 0x101F
	clDeviceLocalMem       = 0x1023
	clDeviceName           = 0x102B
	clDeviceVendor         = 0x102C
	clDriverVersion        = 0x102D
	clDeviceVersion        = 0x102F
	clDeviceExtensions     = 0x1030
	clDeviceHostUnified    = 0x1035
	clDeviceNativeFloat    = 0x103A
	clDeviceOpenCLC        = 0x103D
	clDeviceImagePitch     = 0x104A
	clDeviceMaxSubGroups   = 0x105C
	clDeviceCAllVersions   = 0x1066
	clContextPlatform      = 0x1084
	clQueueProperties      = 0x1093
	clQueueProfiling       = 1 << 1
	clProgramBinarySizes   = 0x1165
	clProgramBinaries      = 0x1166
	clProgramBuildLog      = 0x1183
	clKernelNumArgs        = 0x1191
	clEventExecStatus      = 0x11D3
	clBufferRegion         = 0x1220
	clProfilingStart       = 0x1282
	clProfilingEnd         = 0x1283

	clDeviceTypeCPU   uint64 = 1 << 1
	clDeviceTypeGPU   uint64 = 1 << 2
	clDeviceTypeAccel uint64 = 1 << 3
	clDeviceTypeAll   uint64 = 0xFFFFFFFF

	clMemReadWrite    uint64 = 1 << 0
	clMemReadOnly     uint64 = 1 << 2
	clMemUseHostPtr   uint64 = 1 << 3
	clMemAllocHostPtr uint64 = 1 << 4
	// clMapWriteInvalidate is CL_MAP_WRITE_INVALIDATE_REGION (OpenCL 1.2):
	// the mapping's old contents are not needed, so nothing is read back.
	clMapWriteInvalidate uint64 = 1 << 2
	clQueuePriorityK            = 0x1096 // CL_QUEUE_PRIORITY_KHR (cl_khr_priority_hints)
	clQueuePrioHighK            = 1 << 0
	clQueuePrioLowK             = 1 << 2
	clCtxPrioHintQCOM           = 0x40C9 // CL_CONTEXT_PRIORITY_HINT_QCOM (cl_qcom_priority_hint)
	clPrioHighQCOM              = 0x40CA
	clPrioLowQCOM               = 0x40CC
	// cl_qcom_perf_hint (Qualcomm's public extension text): the context
	// property CL_CONTEXT_PERF_HINT_QCOM and its cl_perf_hint values.
	clCtxPerfHintQCOM    = 0x40C2
	clPerfHintHighQCOM   = 0x40C3
	clPerfHintNormalQCOM = 0x40C4
	clPerfHintLowQCOM    = 0x40C5

	// clGetKernelWorkGroupInfo queries.
	clKernelWorkGroupSize  = 0x11B0
	clKernelCompileWGSize  = 0x11B1
	clKernelPrivateMemSize = 0x11B4
)

// fns holds the entry points, filled by load before any device exists.
var fns struct {
	GetPlatformIDs, GetPlatformInfo, GetDeviceIDs, GetDeviceInfo                   uintptr
	CreateContext, ReleaseContext, CreateCommandQueue, ReleaseCommandQueue         uintptr
	CreateBuffer, CreateSubBuffer, RetainMemObject, ReleaseMemObject               uintptr
	EnqueueWriteBuffer, EnqueueReadBuffer, EnqueueCopyBuffer, EnqueueFillBuffer    uintptr
	EnqueueMapBuffer, EnqueueUnmapMemObject                                        uintptr
	CreateProgramWithSource, CreateProgramWithBinary, BuildProgram                 uintptr
	GetProgramBuildInfo, GetProgramInfo, ReleaseProgram, RetainProgram             uintptr
	CreateKernel, GetKernelInfo, ReleaseKernel, SetKernelArg, EnqueueNDRangeKernel uintptr
	GetKernelWorkGroupInfo                                                         uintptr
	Flush, Finish, GetEventInfo, GetEventProfilingInfo, ReleaseEvent               uintptr
	// CreateCommandQueueWithProperties is OpenCL 2.0; 0 when the library
	// lacks it.
	CreateCommandQueueWithProperties uintptr
	// GetExtensionFunctionAddressForPlatform is OpenCL 1.2 (the way to an
	// extension's entry points, cmdbuf.go); 0 when the library lacks it.
	GetExtensionFunctionAddressForPlatform uintptr
	// CreateImage is OpenCL 1.2 (image.go); 0 when the library lacks it.
	CreateImage uintptr
}

// required lists every entry point a library must have, by its C name.
func required() []struct {
	name string
	p    *uintptr
} {
	f := &fns
	return []struct {
		name string
		p    *uintptr
	}{
		{"clGetPlatformIDs", &f.GetPlatformIDs}, {"clGetPlatformInfo", &f.GetPlatformInfo},
		{"clGetDeviceIDs", &f.GetDeviceIDs}, {"clGetDeviceInfo", &f.GetDeviceInfo},
		{"clCreateContext", &f.CreateContext}, {"clReleaseContext", &f.ReleaseContext},
		{"clCreateCommandQueue", &f.CreateCommandQueue}, {"clReleaseCommandQueue", &f.ReleaseCommandQueue},
		{"clCreateBuffer", &f.CreateBuffer}, {"clCreateSubBuffer", &f.CreateSubBuffer},
		{"clRetainMemObject", &f.RetainMemObject}, {"clReleaseMemObject", &f.ReleaseMemObject},
		{"clEnqueueWriteBuffer", &f.EnqueueWriteBuffer}, {"clEnqueueReadBuffer", &f.EnqueueReadBuffer},
		{"clEnqueueCopyBuffer", &f.EnqueueCopyBuffer}, {"clEnqueueFillBuffer", &f.EnqueueFillBuffer},
		{"clEnqueueMapBuffer", &f.EnqueueMapBuffer}, {"clEnqueueUnmapMemObject", &f.EnqueueUnmapMemObject},
		{"clCreateProgramWithSource", &f.CreateProgramWithSource}, {"clCreateProgramWithBinary", &f.CreateProgramWithBinary},
		{"clBuildProgram", &f.BuildProgram}, {"clGetProgramBuildInfo", &f.GetProgramBuildInfo},
		{"clGetProgramInfo", &f.GetProgramInfo}, {"clReleaseProgram", &f.ReleaseProgram},
		{"clRetainProgram", &f.RetainProgram},
		{"clCreateKernel", &f.CreateKernel}, {"clGetKernelInfo", &f.GetKernelInfo},
		{"clReleaseKernel", &f.ReleaseKernel}, {"clSetKernelArg", &f.SetKernelArg},
		{"clGetKernelWorkGroupInfo", &f.GetKernelWorkGroupInfo},
		{"clEnqueueNDRangeKernel", &f.EnqueueNDRangeKernel}, {"clFlush", &f.Flush},
		{"clFinish", &f.Finish}, {"clGetEventInfo", &f.GetEventInfo},
		{"clGetEventProfilingInfo", &f.GetEventProfilingInfo}, {"clReleaseEvent", &f.ReleaseEvent},
	}
}

// clCall calls the C function fn and returns its cl_int result.
// uintptrescapes keeps every object an argument points to on the heap and
// alive until the call returns (rule 4 of unsafe.Pointer), as it does for
// purego.SyscallN itself.
//
//go:uintptrescapes
func clCall(fn uintptr, args ...uintptr) int32 {
	r, _, _ := purego.SyscallN(fn, args...)
	return int32(uint32(r))
}

// clCreate calls a C function that returns a handle.
//
//go:uintptrescapes
func clCreate(fn uintptr, args ...uintptr) handle {
	r, _, _ := purego.SyscallN(fn, args...)
	return r
}

// callArgs calls fn with the arguments in a, which must be a slice on the
// heap whose pointers point to heap memory kept alive by the caller. Unlike
// clCall it allocates nothing, which is what the launch path needs.
func callArgs(fn uintptr, a []uintptr) int32 {
	r, _, _ := purego.SyscallN(fn, a...)
	return int32(uint32(r))
}

// cstr is s as a NUL-terminated C string in Go memory.
func cstr(s string) *byte {
	b := make([]byte, len(s)+1)
	copy(b, s)
	return &b[0]
}

// goString is the Go string of the NUL-terminated bytes in b.
func goString(b []byte) string {
	if i := strings.IndexByte(string(b), 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// libraries are the places an OpenCL library is looked for, in order:
// $TLITE_OPENCL_LIB alone when set; the ICD loader on desktop systems; on
// Android the loader by name (the linker's search path, LD_LIBRARY_PATH
// included), then the vendor drivers where phones keep them.
func libraries() []string {
	if p := os.Getenv("TLITE_OPENCL_LIB"); p != "" {
		return []string{p}
	}
	return defaultLibraries(runtime.GOOS, unsafe.Sizeof(uintptr(0)) == 8)
}

func defaultLibraries(goos string, is64 bool) []string {
	switch goos {
	case "darwin":
		return []string{"/System/Library/Frameworks/OpenCL.framework/OpenCL"}
	case "android":
		lib := "lib"
		if is64 {
			lib = "lib64"
		}
		c := []string{"libOpenCL.so"}
		// libOpenCL.so is the ICD loader or the driver itself (Qualcomm,
		// most Mali phones); Pixels ship libOpenCL-pixel.so; Adreno's
		// driver proper is libOpenCL_adreno.so; some Mali builds expose
		// OpenCL only through the GLES driver libGLES_mali.so, in egl/ or
		// beside the others.
		for _, dir := range []string{"/vendor/" + lib, "/system/vendor/" + lib, "/system/" + lib} {
			c = append(c, dir+"/libOpenCL.so", dir+"/libOpenCL-pixel.so", dir+"/libOpenCL_adreno.so",
				dir+"/egl/libGLES_mali.so", dir+"/libGLES_mali.so")
		}
		return c
	}
	return []string{"libOpenCL.so.1", "libOpenCL.so"}
}

// openLib dlopens path and resolves every required entry point. With
// publish false it only checks that path would do, and closes it again.
func openLib(path string, publish bool) error {
	h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		return fmt.Errorf("%s: %v", path, err)
	}
	syms := required()
	addrs := make([]uintptr, len(syms))
	// Resolve everything before publishing any pointer, so that a library
	// missing one function is not half-used.
	for i, s := range syms {
		a, err := purego.Dlsym(h, s.name)
		if err != nil || a == 0 {
			purego.Dlclose(h)
			return fmt.Errorf("%s: no symbol %s", path, s.name)
		}
		addrs[i] = a
	}
	if !publish {
		purego.Dlclose(h)
		return nil
	}
	for i, s := range syms {
		*s.p = addrs[i]
	}
	fns.CreateCommandQueueWithProperties, _ = purego.Dlsym(h, "clCreateCommandQueueWithProperties")
	fns.GetExtensionFunctionAddressForPlatform, _ = purego.Dlsym(h, "clGetExtensionFunctionAddressForPlatform")
	fns.CreateImage, _ = purego.Dlsym(h, "clCreateImage")
	return nil
}

// loadFrom loads the first of paths that is an OpenCL library. With publish
// false it only checks them. The error names every path and why it failed.
func loadFrom(paths []string, publish bool) error {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		return fmt.Errorf("opencl: this is a 32-bit build, whose C calling convention the OpenCL layer does not implement; build for a 64-bit target (arm64, amd64) or use --device go")
	}
	var tried []string
	for _, p := range paths {
		err := openLib(p, publish)
		if err == nil {
			return nil
		}
		tried = append(tried, err.Error())
	}
	return fmt.Errorf("opencl: no OpenCL library could be loaded; tried:\n  %s\n%s, or set TLITE_OPENCL_LIB to the driver's library", strings.Join(tried, "\n  "), fixHint)
}

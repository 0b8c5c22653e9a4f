package engine

import (
	"errors"
	"fmt"
)

// DeviceInfo names where a session runs.
type DeviceInfo struct {
	// Backend is "opencl" or "go" (the pure-Go CPU device).
	Backend string
	// Name is the OpenCL device's name, or "pure-Go CPU".
	Name string
	// Index is the OpenCL "platform:device" index ("" for the go backend).
	Index string
	// Type is the OpenCL device type ("GPU", "CPU", ...), or "CPU".
	Type string
}

// String prints "opencl 0:0 GPU Mali-G710" or "go pure-Go CPU".
func (d DeviceInfo) String() string {
	if d.Backend == "go" {
		return "go (pure-Go CPU)"
	}
	return fmt.Sprintf("opencl %s %s %s", d.Index, d.Type, d.Name)
}

// Device describes the backend and device the session runs on.
func (s *Session) Device() DeviceInfo {
	if s.cl != nil {
		inf := s.cl.Info()
		return DeviceInfo{Backend: "opencl", Name: inf.Name, Index: inf.Index, Type: inf.Type}
	}
	return DeviceInfo{Backend: "go", Name: "pure-Go CPU", Type: "CPU"}
}

// BuildStats counts the OpenCL programs the session's device has built
// from source and loaded from the on-disk binary cache so far. Kernels are
// built when first launched, so the first Run of a session (or of a new
// shape class) is where these grow. Both are 0 on the pure-Go backend.
func (s *Session) BuildStats() (built, cached int64) {
	if s.cl != nil {
		st := s.cl.Stats()
		return st.Builds, st.CacheHits
	}
	return 0, 0
}

// NoDeviceError is returned by Open when no OpenCL device could be opened;
// Options.Device "go" selects the pure-Go backend, which needs none.
type NoDeviceError struct{ Err error }

// Error says what failed and names the pure-Go fallback.
func (e *NoDeviceError) Error() string {
	return fmt.Sprintf("engine: %v (or open the session with Device \"go\" for the pure-Go CPU device)", e.Err)
}

// Unwrap returns the OpenCL error.
func (e *NoDeviceError) Unwrap() error { return e.Err }

// IsNoDevice reports whether err says that no OpenCL device was available.
func IsNoDevice(err error) bool {
	var nd *NoDeviceError
	return errors.As(err, &nd)
}

// DeviceMemory is what a session holds in device memory, by kind.
type DeviceMemory struct {
	// Constants is every buffer uploaded at Open: weights, folded
	// constants and the in-place KV cache's buffers (KVCache of them).
	Constants int64
	// KVCache is the in-place KV cache's share of Constants
	// (KVInfo.Bytes; 0 without Options.KVCache).
	KVCache int64
	// Activations is the memory plan's slots, allocated at Open for the
	// maxima (Plan().Allocated()).
	Activations int64
	// Adapters is the LoRA adapter sets ElasticBinding.AddLoRA uploaded,
	// at the session's storage size (2 bytes a value under FP16, else 4),
	// and AdapterScratch the one scratch buffer their side branches
	// share. Neither is in Constants.
	Adapters, AdapterScratch int64
	// Live is what the OpenCL device counts as allocated and not yet
	// released (its LiveBytes), when the session opened the device
	// itself; -1 on the pure-Go backend or a device shared through
	// Options.Kernels, where the count is not the session's alone.
	Live int64
}

// DeviceMemory returns the session's device memory (see DeviceMemory).
func (s *Session) DeviceMemory() DeviceMemory {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := DeviceMemory{Constants: s.constB, Live: -1}
	if s.plan != nil {
		m.Activations = s.plan.Allocated()
	}
	if info, ok := s.KVInfo(); ok {
		m.KVCache = info.Bytes()
	}
	for _, b := range s.loraBufs {
		m.Adapters += int64(b.size)
	}
	if s.loraTmp != nil {
		m.AdapterScratch = int64(s.loraTmp.size)
	}
	if s.cl != nil && s.ownCL {
		m.Live = s.cl.Stats().LiveBytes
	}
	return m
}

//go:build !linux

package graph

// dropPages does nothing outside Linux: the pages stay resident until the
// model is closed (or, where files are read instead of mapped, they are
// ordinary memory).
func dropPages([]byte) error { return nil }

package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestConformanceWithoutDevice: with no OpenCL device to run on, the
// command fails (a non-zero exit) instead of printing a table of refusals.
func TestConformanceWithoutDevice(t *testing.T) {
	var out bytes.Buffer
	old := stdout
	stdout = &out
	defer func() { stdout = old }()
	err := runConformance([]string{"--device", "no-such-opencl-device-xyz", "--summary"})
	if err == nil || !strings.Contains(err.Error(), "needs an OpenCL device") {
		t.Fatalf("err = %v; want the missing device named", err)
	}
	if out.Len() != 0 {
		t.Errorf("printed %q before failing", out.String())
	}
}

// TestConformanceNamesCorpus: the summary says which corpus ran and how
// many cases it has.
func TestConformanceNamesCorpus(t *testing.T) {
	var out bytes.Buffer
	old := stdout
	stdout = &out
	defer func() { stdout = old }()
	if err := runConformance([]string{"--summary"}); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	if !strings.Contains(s, "onnx-go") || !strings.Contains(s, "opsets 9 and 10") || !strings.Contains(s, "348 cases") || !strings.Contains(s, "host-only") {
		t.Errorf("summary %q does not name the corpus, its size and the host-only count", s)
	}
}

package conformance

import (
	"os"
	"testing"

	"github.com/tlite/tlite/engine"
	"github.com/tlite/tlite/kernels"
	"github.com/tlite/tlite/opencl"
)

// TestConformance runs the whole corpus on the OpenCL backend, logs the
// per-operator table and the summary line, and requires every case of an
// operator the engine claims to support to pass or to be refused at Open
// as an unsupported use (an attribute, a rank, an element type) — never to
// produce a wrong result or fail at run time.
func TestConformance(t *testing.T) {
	if os.Getenv("POCL_WORK_GROUP_SPECIALIZATION") == "" {
		os.Setenv("POCL_WORK_GROUP_SPECIALIZATION", "0")
	}
	dev, err := opencl.Open(opencl.Options{})
	if err != nil {
		t.Fatalf("conformance needs an OpenCL device (install pocl-opencl-icd): %v", err)
	}
	defer dev.Close()
	r := Run(engine.Options{Kernels: kernels.New(dev)})
	t.Log("\n" + r.Table())
	t.Log(r.Summary())
	if len(r.Cases) < 100 {
		t.Fatalf("only %d corpus cases registered", len(r.Cases))
	}
	for _, s := range r.ByOp() {
		if s.Claimed && s.Failed > 0 {
			t.Errorf("%s: %d of %d cases fail: %s", s.Op, s.Failed, s.Cases, s.FirstFailure)
		}
	}
	var passed int
	for _, c := range r.Cases {
		if c.Status == Passed {
			passed++
		}
	}
	if passed == 0 {
		t.Error("no case passed")
	}
}

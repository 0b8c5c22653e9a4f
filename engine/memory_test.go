package engine

import (
	"path/filepath"
	"testing"

	"github.com/tlite/tlite/memplan"
	"github.com/tlite/tlite/symshape"
)

// TestMemoryPlan checks that buffer reuse pays off (peak below the sum of
// all intermediate tensors) and that Run allocates no device memory.
func TestMemoryPlan(t *testing.T) {
	for _, model := range []string{"llama", "clip_vision", "clip_text"} {
		t.Run(model, func(t *testing.T) {
			s, err := Open(filepath.Join(modelsDir, model, "model.onnx"), Options{Kernels: testLib, Max: testMax})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			for _, rc := range loadCases(t, model) {
				b := symshape.Binding{}
				for k, v := range rc.symbols {
					b[k] = v
				}
				peak, err := s.Plan().Peak(b)
				if err != nil {
					t.Fatal(err)
				}
				un, err := s.Plan().Unshared(b)
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("case %s at %v: peak %s, unshared %s, allocated %s for the maxima %v, %d slots",
					rc.name, b, memplan.Bytes(peak), memplan.Bytes(un), memplan.Bytes(s.Plan().Allocated()), s.Maxima(), len(s.Plan().Slots))
				if peak >= un {
					t.Errorf("case %s: peak %d is not below the unshared total %d", rc.name, peak, un)
				}
				before := testLib.Device().Stats()
				if _, err := s.Run(rc.inputs); err != nil {
					t.Fatal(err)
				}
				after := testLib.Device().Stats()
				if after.Allocs != before.Allocs {
					t.Errorf("case %s: Run allocated %d device buffers", rc.name, after.Allocs-before.Allocs)
				}
				if after.Launches == before.Launches {
					t.Errorf("case %s: Run launched nothing", rc.name)
				}
			}
		})
	}
}

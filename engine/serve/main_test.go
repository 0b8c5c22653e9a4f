package serve

import (
	"sync"
	"testing"

	"github.com/tlite/tlite/engine"
	"github.com/tlite/tlite/engine/generate"
	"github.com/tlite/tlite/engine/kv"
	"github.com/tlite/tlite/engine/tokenizer"
)

const defaultModel = "../../testdata/default/model.onnx"

var (
	modelOnce sync.Once
	modelSt   *kv.State
	modelTok  *tokenizer.Tokenizer
	modelErr  error
)

// testModel opens the default model once for the package's tests, on the
// OpenCL device when there is one (PoCL prefills a 100-token context
// about 20 times faster than the pure-Go device here) and else on the
// pure-Go device. Tests share it, so each service a test makes must be
// closed before the next starts.
func testModel(t testing.TB) (*kv.State, *tokenizer.Tokenizer) {
	t.Helper()
	st, tok, err := openModel()
	if err != nil {
		t.Fatal(err)
	}
	return st, tok
}

// openModel is testModel for code without a testing.TB.
func openModel() (*kv.State, *tokenizer.Tokenizer, error) {
	modelOnce.Do(func() {
		d, err := generate.Open(defaultModel, engine.Options{}, 128, generate.Config{LastOnly: true})
		if engine.IsNoDevice(err) {
			d, err = generate.Open(defaultModel, engine.Options{Device: "go"}, 128, generate.Config{LastOnly: true})
		}
		if err != nil {
			modelErr = err
			return
		}
		modelSt = d.Stepper.(*kv.Stepper).State()
		modelTok, modelErr = tokenizer.Load("../../testdata/default/tokenizer.json")
	})
	return modelSt, modelTok, modelErr
}

// newTestService starts a service on the shared model with a fresh state
// directory (or dir when not empty).
func newTestService(t *testing.T, dir string, cfg Config) *Service {
	t.Helper()
	st, tok := testModel(t)
	if dir == "" {
		dir = t.TempDir()
	}
	cfg.StateDir = dir
	cfg.Model = "default"
	s, err := New(st, tok, nil, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

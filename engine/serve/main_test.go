package serve

import (
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/tlite/tlite/engine"
	"github.com/tlite/tlite/engine/generate"
	"github.com/tlite/tlite/engine/kv"
	"github.com/tlite/tlite/engine/llms"
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
		// With attention statistics: the LLMS store ranks chunks by them.
		cfg := generate.Config{LastOnly: true, AttentionStats: true}
		d, err := generate.Open(defaultModel, engine.Options{}, 128, cfg)
		if engine.IsNoDevice(err) {
			d, err = generate.Open(defaultModel, engine.Options{Device: "go"}, 128, cfg)
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
// directory (or dir when not empty) and the LMK store.
func newTestService(t *testing.T, dir string, cfg Config) *Service {
	t.Helper()
	return newTestServiceStore(t, dir, cfg, "lmk")
}

// testStores are the stores the API tests run against: the service's own
// LMK and engine/llms's Manager in mode llms under a budget of a few
// chunks, so that switching swaps and recomputes.
var testStores = []string{"lmk", "llms"}

// testBudget is the llms store's budget in the tests: a few 16-token
// chunks of the default model, less than one context's.
const testBudget = 24 << 10

// testCost is a fixed planner model for the tests (no profiling at
// NewManager: faster, and the plans do not depend on the machine's load).
var testCost = llms.CostModel{ReA: 2e-3, ReB: 1e-3, IOC: 1e-9, IOE: 1e-4}

// exactStores are the stores whose restored KV is exactly what was
// computed: tests that compare a call with one-shot generation run on them.
var exactStores = []string{"lmk", "llms-lossless"}

// newStore returns the named store over st, its state in dir ("lmk": nil,
// the service's default; a "-lossless" suffix stores chunks uncompressed).
func newStore(t testing.TB, name string, st *kv.State, dir string, lossless bool) ContextStore {
	t.Helper()
	if name == "lmk" {
		return nil
	}
	if n, ok := strings.CutSuffix(name, "-lossless"); ok {
		name, lossless = n, true
	}
	m, err := llms.NewManager(st, filepath.Join(dir, "kv"), llms.Config{Mode: llms.Mode(name), BudgetBytes: testBudget, Lossless: lossless, Cost: &testCost})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return NewLLMSStore(m)
}

// newTestServiceStore is newTestService with the named store (testStores),
// its state beside the contexts (dir/kv).
func newTestServiceStore(t *testing.T, dir string, cfg Config, store string) *Service {
	t.Helper()
	st, tok := testModel(t)
	if dir == "" {
		dir = t.TempDir()
	}
	cfg.StateDir = dir
	cfg.Model = "default"
	s, err := New(st, tok, newStore(t, store, st, dir, false), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

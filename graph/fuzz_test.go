package graph

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/owulveryck/onnx-go/backend/testbackend"
)

// FuzzParse feeds arbitrary bytes to Parse. External data resolve in a folder
// holding small weight files, so the external-data paths are reachable too.
// Accepted models must validate and survive every read path; nothing may
// panic. Seeds: the onnx-go corpus, testdata/*.onnx, and the hand-built models.
func FuzzParse(f *testing.F) {
	for _, mk := range testbackend.GetAllRegisteredTests() {
		f.Add(mk().ModelB)
	}
	for _, pattern := range []string{"testdata/*.onnx", "../testdata/*.onnx", "../testdata/*/*.onnx"} {
		paths, _ := filepath.Glob(pattern)
		for _, p := range paths {
			if data, err := os.ReadFile(p); err == nil && len(data) < 1<<20 {
				f.Add(data)
			}
		}
	}
	f.Add([]byte(featureModel()))
	f.Add([]byte(extModel("weights.bin", "16", "16")))
	f.Add([]byte(nestedModel(3)))
	f.Add([]byte(simpleModel()))
	f.Add(oneExt("weights.bin", "112", "16"))
	dir := f.TempDir()
	writeExtFiles(f, dir)
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := Parse(data, dir)
		if err != nil {
			return
		}
		defer m.Close()
		exercise(t, m)
	})
}

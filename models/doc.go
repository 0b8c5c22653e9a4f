// Package models holds tlite's model export recipes and the checks on the
// test models they produce.
//
// The recipes are Python (models/export/, run with Debian's torch 1.13):
// each builds a small random-weight PyTorch module, exports it to ONNX at
// opset 17 with named dynamic axes, and writes PyTorch-computed reference
// inputs and outputs as .npy files under testdata/models/<name>/ref/. See
// models/README.md for what each recipe demonstrates and how to export a
// model of your own for tlite.
//
// The Go side of this package is only its tests, which keep the committed
// test data consistent: every manifest names files that exist, every .npy
// header parses, and every shape agrees with the manifest and with the
// graph signature recorded at export time.
package models

package main

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"

	"github.com/tlite/tlite/engine/atomicfile"
	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/tlite"
)

// paramsKey is the model metadata entry in which quantize records the
// element count of the original weights: packed 4-bit weights count bytes,
// not parameters.
const paramsKey = "tlite.params"

// paramCount counts the elements of the model's initializers.
func paramCount(m *graph.Model) int64 {
	if v, ok := m.Metadata[paramsKey]; ok {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && n > 0 {
			return n // quantized before: the original count
		}
	}
	// A packed 4-bit weight holds K*N parameters in fewer bytes; its
	// MatMulQ readers carry K and N.
	packed := map[*graph.Value]int64{}
	for _, nd := range m.Graph.Nodes {
		if nd.Domain == tlite.Domain && nd.OpType == tlite.MatMulQ && len(nd.Inputs) > 1 && nd.Inputs[1] != nil {
			packed[nd.Inputs[1]] = nd.AttrInt("K", 0) * nd.AttrInt("N", 0)
		}
	}
	var n int64
	for _, v := range m.Graph.Initializers {
		if v.Const == nil {
			continue
		}
		if p, ok := packed[v]; ok && p > 0 {
			n += p
		} else {
			n += v.Const.NumElements()
		}
	}
	return n
}

// samePath reports whether a and b name the same file: the same resolved
// path, or the same file on disk when both exist.
func samePath(a, b string) bool {
	ra, rb := resolved(a), resolved(b)
	if ra == rb {
		return true
	}
	fa, errA := os.Stat(a)
	fb, errB := os.Stat(b)
	return errA == nil && errB == nil && os.SameFile(fa, fb)
}

// resolved is path made absolute with symlinks resolved as far as the
// path exists.
func resolved(path string) string {
	abs, err := filepath.Abs(path)
	if err != nil {
		return path
	}
	if r, err := filepath.EvalSymlinks(abs); err == nil {
		return r
	}
	if r, err := filepath.EvalSymlinks(filepath.Dir(abs)); err == nil {
		return filepath.Join(r, filepath.Base(abs))
	}
	return abs
}

// checkQuantizeOutput refuses an output that would replace a file the
// input reads (the model or its external data) or that is a directory.
func checkQuantizeOutput(in, out string, inputData []string) error {
	if fi, err := os.Stat(out); err == nil && fi.IsDir() {
		return fmt.Errorf("output %s is a directory: give a file name such as %s", out, filepath.Join(out, "model.onnx"))
	}
	writes := []string{out, filepath.Join(filepath.Dir(out), filepath.Base(out)+".data")}
	reads := append([]string{in}, inputData...)
	for _, w := range writes {
		for _, r := range reads {
			if samePath(w, r) {
				return fmt.Errorf("writing %s would replace %s, which the input model reads: choose another output name", w, r)
			}
		}
	}
	return nil
}

// afterWrite, when set (by tests), runs between writing the files and
// moving them into place.
var afterWrite func()

// writeAtomically writes m to out (and its data file) through a hidden
// folder beside out, then renames the files into place: an error or an
// interrupt leaves neither a partial output nor an orphan data file.
// inline reports that no data file was needed.
func writeAtomically(m *graph.Model, out string, opts graph.WriteOptions) (inline bool, err error) {
	dir := filepath.Dir(out)
	tmp, err := os.MkdirTemp(dir, ".tl-quantize-")
	if err != nil {
		return false, err
	}
	// On SIGINT the folder goes before the process does.
	sig := make(chan os.Signal, 1)
	done := make(chan struct{})
	signal.Notify(sig, os.Interrupt)
	go func() {
		select {
		case <-sig:
			os.RemoveAll(tmp)
			fmt.Fprintln(os.Stderr, "tl quantize: interrupted; nothing written")
			os.Exit(130)
		case <-done:
		}
	}()
	defer func() {
		signal.Stop(sig)
		close(done)
		os.RemoveAll(tmp)
	}()
	tmpOut := filepath.Join(tmp, filepath.Base(out))
	if err := graph.Write(m, tmpOut, opts); err != nil {
		return false, err
	}
	if afterWrite != nil {
		afterWrite()
	}
	tmpData := filepath.Join(tmp, opts.DataFile)
	_, statErr := os.Stat(tmpData)
	inline = statErr != nil
	finalData := filepath.Join(dir, opts.DataFile)
	if !inline {
		if err := os.Rename(tmpData, finalData); err != nil {
			return false, err
		}
	} else if _, err := os.Stat(finalData); err == nil {
		// A data file left by an earlier output of the same name would
		// now belong to nothing.
		os.Remove(finalData)
	}
	if err := os.Rename(tmpOut, out); err != nil {
		if !inline {
			os.Remove(finalData)
		}
		return false, err
	}
	return inline, nil
}

// copyBeside copies the named files found next to in into out's folder
// (a tokenizer and a config travel with the model), skipping any that are
// already there as the same file.
func copyBeside(in, out string, names ...string) ([]string, error) {
	var copied []string
	for _, n := range names {
		src := filepath.Join(filepath.Dir(in), n)
		dst := filepath.Join(filepath.Dir(out), n)
		if _, err := os.Stat(src); err != nil || samePath(src, dst) {
			continue
		}
		if err := copyFile(src, dst); err != nil {
			return copied, fmt.Errorf("copying %s beside the output: %w", n, err)
		}
		copied = append(copied, n)
	}
	return copied, nil
}

func copyFile(src, dst string) error {
	r, err := os.Open(src)
	if err != nil {
		return err
	}
	defer r.Close()
	st, err := r.Stat()
	if err != nil {
		return err
	}
	w, err := atomicfile.Create(dst, st.Mode().Perm())
	if err != nil {
		return err
	}
	defer w.Abort()
	if _, err := io.Copy(w, r); err != nil {
		return fmt.Errorf("copying %s to %s: %w", src, dst, err)
	}
	return w.Commit()
}

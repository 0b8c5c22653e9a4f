package atomicfile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// leftovers lists the folder's temporary files.
func leftovers(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var tmp []string
	for _, e := range ents {
		if strings.Contains(e.Name(), ".tmp-") {
			tmp = append(tmp, e.Name())
		}
	}
	return tmp
}

func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "out.json")
	for _, body := range []string{"first\n", "second, longer than the first\n", ""} {
		if err := WriteFile(p, []byte(body), 0o640); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(p)
		if err != nil || string(got) != body {
			t.Fatalf("read back %q, %v; want %q", got, err, body)
		}
		st, err := os.Stat(p)
		if err != nil || st.Mode().Perm() != 0o640 {
			t.Fatalf("mode %v, %v; want 0640", st.Mode().Perm(), err)
		}
	}
	if tmp := leftovers(t, dir); len(tmp) != 0 {
		t.Fatalf("temporary files left: %v", tmp)
	}
}

func TestAbortKeepsOld(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "keep")
	if err := os.WriteFile(p, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := Create(p, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("half of the new"); err != nil {
		t.Fatal(err)
	}
	f.Abort()
	f.Abort() // a second Abort (as from a defer) is harmless
	if got, _ := os.ReadFile(p); string(got) != "old" {
		t.Fatalf("after Abort the destination reads %q, want the old bytes", got)
	}
	if tmp := leftovers(t, dir); len(tmp) != 0 {
		t.Fatalf("temporary files left: %v", tmp)
	}
	if err := f.Commit(); err == nil {
		t.Fatal("Commit after Abort succeeded")
	}
}

func TestCommitFailureKeepsOld(t *testing.T) {
	dir := t.TempDir()
	// The destination is a non-empty folder: the rename must fail, and
	// neither the folder nor a temporary file may be changed or left.
	p := filepath.Join(dir, "busy")
	if err := os.MkdirAll(filepath.Join(p, "inside"), 0o755); err != nil {
		t.Fatal(err)
	}
	err := WriteFile(p, []byte("x"), 0o644)
	if err == nil || !strings.Contains(err.Error(), p) {
		t.Fatalf("WriteFile over a folder: %v; want an error naming %s", err, p)
	}
	if st, serr := os.Stat(filepath.Join(p, "inside")); serr != nil || !st.IsDir() {
		t.Fatalf("the folder was changed: %v", serr)
	}
	if tmp := leftovers(t, dir); len(tmp) != 0 {
		t.Fatalf("temporary files left: %v", tmp)
	}
}

func TestCreateMissingFolder(t *testing.T) {
	p := filepath.Join(t.TempDir(), "no", "such", "file")
	_, err := Create(p, 0o644)
	if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), p) {
		t.Fatalf("Create in a missing folder: %v; want ErrNotExist naming the path", err)
	}
}

func TestSyncDir(t *testing.T) {
	if err := SyncDir(t.TempDir()); err != nil {
		t.Fatalf("SyncDir of a folder: %v", err)
	}
	p := filepath.Join(t.TempDir(), "gone")
	if err := SyncDir(p); !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), p) {
		t.Fatalf("SyncDir of a missing folder: %v; want ErrNotExist naming it", err)
	}
}

// Package atomicfile writes files so that a reader, a crash or a failed
// write never sees half of one: the bytes go to a temporary file in the
// destination's folder, which is synced and then renamed over the
// destination. On any error the temporary file is removed and the old
// destination, if there was one, is left as it was.
package atomicfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// File is a file being written in place of a destination path. Write to it
// as to an *os.File, then Commit to publish it or Abort to drop it.
type File struct {
	*os.File
	path string
	perm fs.FileMode
	done bool
}

// Create starts a file that Commit will put at path with permissions perm.
// The temporary file is in path's folder, so the rename cannot cross file
// systems, and its name starts with a dot and path's base name, so a
// leftover from a killed process is recognisable.
func Create(path string, perm fs.FileMode) (*File, error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return nil, fmt.Errorf("atomicfile: writing %s: %w", path, err)
	}
	return &File{File: f, path: path, perm: perm}, nil
}

// Commit syncs and closes the file, sets its permissions and renames it
// over the destination, then syncs the folder so the rename itself is
// durable. After a failed Commit the destination is unchanged and the
// temporary file is gone. Commit after Commit or Abort is an error.
func (f *File) Commit() error {
	if f.done {
		return fmt.Errorf("atomicfile: %s already committed or aborted", f.path)
	}
	f.done = true
	tmp := f.Name()
	err := f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp, f.perm)
	}
	if err == nil {
		err = os.Rename(tmp, f.path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("atomicfile: writing %s: %w", f.path, err)
	}
	if err := SyncDir(filepath.Dir(f.path)); err != nil {
		return fmt.Errorf("writing %s: %w", f.path, err)
	}
	return nil
}

// Abort closes and removes the temporary file, leaving the destination as
// it was. It does nothing after Commit, so `defer f.Abort()` is safe.
func (f *File) Abort() {
	if f.done {
		return
	}
	f.done = true
	f.Close()
	os.Remove(f.Name())
}

// WriteFile writes data to path atomically with permissions perm.
func WriteFile(path string, data []byte, perm fs.FileMode) error {
	f, err := Create(path, perm)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Abort()
		return fmt.Errorf("atomicfile: writing %s: %w", path, err)
	}
	return f.Commit()
}

// SyncDir makes a rename or removal in dir durable. Some file systems
// cannot sync a folder (EINVAL); the change is then as durable as they
// make it.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("atomicfile: syncing folder: %w", err)
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil && !errors.Is(err, syscall.EINVAL) {
		return fmt.Errorf("atomicfile: syncing folder: %w", err)
	}
	return nil
}

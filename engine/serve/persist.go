package serve

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/tlite/tlite/engine/atomicfile"
)

// record is a context's memory-resident fragment as stored on disk: its
// identity, its system prompt and every token it has seen. The KV cache
// (the swappable fragment) is the store's business and is not here.
type record struct {
	ID     string `json:"id"`
	App    string `json:"app"`
	System string `json:"system"`
	// History is every token of the context, in order, never dropped.
	History []int `json:"history"`
	// Sinks and Start describe the sliding window the model sees:
	// History[:Sinks] followed by History[Start:] (Start >= Sinks).
	Sinks int `json:"sinks"`
	Start int `json:"start"`
	// Pending trailing tokens of the window have no KV yet (the last
	// token a call generated, the system prompt of a new context): the
	// next call forwards them before its prompt.
	Pending int       `json:"pending"`
	Calls   int       `json:"calls"`
	Created time.Time `json:"created"`
	LastUse time.Time `json:"last_use"`
}

// window is the token list the model sees.
func (r *record) window() []int {
	if r.Start <= r.Sinks {
		return r.History
	}
	w := make([]int, 0, r.Sinks+len(r.History)-r.Start)
	return append(append(w, r.History[:r.Sinks]...), r.History[r.Start:]...)
}

// windowLen is len(r.window()) without building it.
func (r *record) windowLen() int {
	if r.Start <= r.Sinks {
		return len(r.History)
	}
	return r.Sinks + len(r.History) - r.Start
}

// committed is the part of the window whose KV a store holds.
func (r *record) committed() []int {
	w := r.window()
	return w[:len(w)-r.Pending]
}

// check reports a record that cannot be right.
func (r *record) check() error {
	switch {
	case !validID(r.ID):
		return fmt.Errorf("id %q is not a context id", r.ID)
	case r.Sinks < 0 || r.Start < 0 || r.Pending < 0:
		return fmt.Errorf("negative window (sinks %d, start %d, pending %d)", r.Sinks, r.Start, r.Pending)
	case r.Start > 0 && (r.Start < r.Sinks || r.Start > len(r.History)):
		return fmt.Errorf("window start %d outside sinks %d .. history %d", r.Start, r.Sinks, len(r.History))
	case r.Pending > r.windowLen():
		return fmt.Errorf("%d pending tokens in a window of %d", r.Pending, r.windowLen())
	}
	for i, t := range r.History {
		if t < 0 {
			return fmt.Errorf("token %d is %d", i, t)
		}
	}
	return nil
}

var idPattern = regexp.MustCompile(`^[0-9a-f]{16}$`)

// validID reports whether id has the form new ids have (which also keeps
// ids out of file paths' way).
func validID(id string) bool { return idPattern.MatchString(id) }

// envelope is the file format: the record's JSON and its SHA-256, so that
// a torn or altered file is recognised.
type envelope struct {
	Version int             `json:"version"`
	SHA256  string          `json:"sha256"`
	Record  json.RawMessage `json:"record"`
}

const fileVersion = 1

// disk is the service's state directory: DIR/contexts/<id>.json, one file
// per acknowledged context, and DIR/quarantine/ for files that did not
// read back. Other entries of DIR (a store's swap files) are left alone.
type disk struct {
	dir string
}

func (d disk) ctxDir() string          { return filepath.Join(d.dir, "contexts") }
func (d disk) path(id string) string   { return filepath.Join(d.ctxDir(), id+".json") }
func (d disk) quarantineDir() string   { return filepath.Join(d.dir, "quarantine") }
func newDisk(dir string) (disk, error) { d := disk{dir}; return d, os.MkdirAll(d.ctxDir(), 0o755) }

// saveHook is called at the stages of a save ("written": the temporary
// file is complete and synced; "renamed": it replaced the old file). The
// crash tests kill the process there; it does nothing otherwise.
var saveHook = func(stage string) {}

// save writes r atomically: a temporary file in the same directory,
// written and synced, renamed over the old one, and the directory
// synced, so that a crash leaves either the old file or the new one.
func (d disk) save(r *record) error {
	body, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("serve: encoding context %s: %w", r.ID, err)
	}
	sum := sha256.Sum256(body)
	data, err := json.Marshal(envelope{Version: fileVersion, SHA256: hex.EncodeToString(sum[:]), Record: body})
	if err != nil {
		return fmt.Errorf("serve: encoding context %s: %w", r.ID, err)
	}
	final := d.path(r.ID)
	f, err := os.CreateTemp(d.ctxDir(), r.ID+".json.tmp*")
	if err != nil {
		return fmt.Errorf("serve: saving context %s: %w", r.ID, err)
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		saveHook("written")
		err = os.Rename(tmp, final)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("serve: saving context %s: %w", r.ID, err)
	}
	saveHook("renamed")
	return atomicfile.SyncDir(d.ctxDir())
}

// remove deletes id's file durably.
func (d disk) remove(id string) error {
	if err := os.Remove(d.path(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("serve: deleting context %s: %w", id, err)
	}
	return atomicfile.SyncDir(d.ctxDir())
}

// decode reads one file's bytes back into a record.
func decode(data []byte, name string) (*record, error) {
	var env envelope
	if err := json.Unmarshal(data, &env); err != nil {
		return nil, fmt.Errorf("not a context file: %w", err)
	}
	if env.Version != fileVersion {
		return nil, fmt.Errorf("version %d, want %d", env.Version, fileVersion)
	}
	sum := sha256.Sum256(env.Record)
	if hex.EncodeToString(sum[:]) != env.SHA256 {
		return nil, fmt.Errorf("checksum mismatch (the file is damaged)")
	}
	var r record
	if err := json.Unmarshal(env.Record, &r); err != nil {
		return nil, fmt.Errorf("record: %w", err)
	}
	if err := r.check(); err != nil {
		return nil, err
	}
	if r.ID+".json" != name {
		return nil, fmt.Errorf("holds context %s, not %s", r.ID, strings.TrimSuffix(name, ".json"))
	}
	return &r, nil
}

// Quarantined is a context file that did not read back at start.
type Quarantined struct {
	File    string `json:"file"`
	MovedTo string `json:"moved_to"`
	Reason  string `json:"reason"`
}

// quarantine moves the file at p into the quarantine directory.
func (d disk) quarantine(p, reason string) Quarantined {
	q := Quarantined{File: p, Reason: reason}
	if err := os.MkdirAll(d.quarantineDir(), 0o755); err != nil {
		q.Reason += "; not moved: " + err.Error()
		return q
	}
	dst := filepath.Join(d.quarantineDir(), fmt.Sprintf("%s.%d", filepath.Base(p), time.Now().UnixNano()))
	if err := os.Rename(p, dst); err != nil {
		q.Reason += "; not moved: " + err.Error()
		return q
	}
	q.MovedTo = dst
	return q
}

// load reads every context file. A file that does not read back is moved
// to the quarantine directory and reported, not fatal; temporary files a
// crash left are removed.
func (d disk) load() ([]*record, []Quarantined, error) {
	ents, err := os.ReadDir(d.ctxDir())
	if err != nil {
		return nil, nil, fmt.Errorf("serve: reading %s: %w", d.ctxDir(), err)
	}
	var recs []*record
	var bad []Quarantined
	for _, e := range ents {
		name := e.Name()
		p := filepath.Join(d.ctxDir(), name)
		if strings.Contains(name, ".json.tmp") {
			os.Remove(p) // a save a crash interrupted: the old file (if any) stands
			continue
		}
		var r *record
		data, err := os.ReadFile(p)
		if err == nil {
			if !strings.HasSuffix(name, ".json") || !e.Type().IsRegular() {
				err = fmt.Errorf("not a context file name")
			} else {
				r, err = decode(data, name)
			}
		}
		if err != nil {
			bad = append(bad, d.quarantine(p, err.Error()))
			continue
		}
		recs = append(recs, r)
	}
	return recs, bad, nil
}

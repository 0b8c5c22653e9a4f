package serve

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/tlite/tlite/engine"
	"github.com/tlite/tlite/engine/generate"
	"github.com/tlite/tlite/engine/kv"
	"github.com/tlite/tlite/engine/tokenizer"
)

// TestMain runs crashChild instead of the tests when the crash test
// re-executes the test binary.
func TestMain(m *testing.M) {
	if os.Getenv("SERVE_CRASH_CHILD") != "" {
		crashChild()
		return
	}
	os.Exit(m.Run())
}

// crashChild runs a workload on the state directory $SERVE_CRASH_DIR and
// exits with status 137 (as if killed) at the stage $SERVE_CRASH_CHILD of
// the save number $SERVE_CRASH_AT. On stdout: "begin ID" before each call
// and "ack ID N" when an operation on ID was acknowledged with N history
// tokens.
func crashChild() {
	stage, dir := os.Getenv("SERVE_CRASH_CHILD"), os.Getenv("SERVE_CRASH_DIR")
	at, _ := strconv.Atoi(os.Getenv("SERVE_CRASH_AT"))
	saves := 0
	saveHook = func(s string) {
		if s != stage {
			return
		}
		saves++
		if saves == at {
			os.Exit(137)
		}
	}
	// The pure-Go device starts faster than OpenCL, and the calls here
	// are a few tokens.
	d, err := generate.Open(defaultModel, engine.Options{Device: "go"}, 128, generate.Config{LastOnly: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	tok, err := tokenizer.Load("../../testdata/default/tokenizer.json")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	s, err := New(d.Stepper.(*kv.Stepper).State(), tok, nil, Config{StateDir: dir})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	var ids []string
	for i := range 2 {
		id, err := s.NewContext("a", fmt.Sprintf("Context %d.", i))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		h, _ := s.History(id)
		fmt.Printf("ack %s %d\n", id, len(h))
		ids = append(ids, id)
	}
	for i := 0; ; i++ {
		id := ids[i%2]
		fmt.Printf("begin %s\n", id)
		if _, err := s.Call(context.Background(), id, " more", CallOptions{MaxTokens: 3}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		h, _ := s.History(id)
		fmt.Printf("ack %s %d\n", id, len(h))
	}
}

// TestCrashDuringSave: the process dies at each stage of a context file's
// save. Before the rename the context reads back as last acknowledged; after
// it, with the unacknowledged call; never damaged, and no temporary file
// is left once the service has started again.
func TestCrashDuringSave(t *testing.T) {
	if testing.Short() {
		t.Skip("re-executes the test binary")
	}
	for _, c := range []struct {
		stage string
		at    int
	}{{"written", 3}, {"renamed", 4}} {
		t.Run(fmt.Sprintf("%s-%d", c.stage, c.at), func(t *testing.T) {
			dir := t.TempDir()
			cmd := exec.Command(os.Args[0])
			cmd.Env = append(os.Environ(), "SERVE_CRASH_CHILD="+c.stage, "SERVE_CRASH_DIR="+dir, fmt.Sprintf("SERVE_CRASH_AT=%d", c.at))
			var stderr strings.Builder
			cmd.Stderr = &stderr
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			acked := map[string]int{}
			inflight := ""
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				f := strings.Fields(sc.Text())
				switch {
				case len(f) == 2 && f[0] == "begin":
					inflight = f[1]
				case len(f) == 3 && f[0] == "ack":
					acked[f[1]], _ = strconv.Atoi(f[2])
					inflight = ""
				}
			}
			err = cmd.Wait()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 137 {
				t.Fatalf("the child ended with %v, not the crash (stderr: %s)", err, stderr.String())
			}
			if inflight == "" || len(acked) != 2 {
				t.Fatalf("crashed with %d contexts acknowledged and no call in flight", len(acked))
			}
			s := newTestService(t, dir, Config{})
			if q := s.Quarantined(); len(q) != 0 {
				t.Fatalf("quarantined %+v", q)
			}
			ents, _ := os.ReadDir(s.disk.ctxDir())
			for _, e := range ents {
				if strings.Contains(e.Name(), ".tmp") {
					t.Errorf("left behind: %s", e.Name())
				}
			}
			for id, n := range acked {
				h, err := s.History(id)
				if err != nil {
					t.Fatalf("acknowledged context %s: %v", id, err)
				}
				want := "as acknowledged"
				ok := len(h) == n
				if id == inflight && c.stage == "renamed" {
					want, ok = "with the call in flight", len(h) > n
				}
				if !ok {
					t.Errorf("context %s: %d tokens, acknowledged %d; want it %s", id, len(h), n, want)
				}
				if _, err := s.Call(context.Background(), id, " again", CallOptions{MaxTokens: 2}); err != nil {
					t.Errorf("call on %s after the crash: %v", id, err)
				}
			}
		})
	}
}

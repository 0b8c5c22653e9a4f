package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tlite/tlite/engine/llms"
	"github.com/tlite/tlite/engine/serve/api"
	"github.com/tlite/tlite/engine/serve/client"
)

// TestMain lets the test binary act as tl (TL_TEST_AS_TL=1), so that a test
// can run tl serve as a separate process and kill it.
func TestMain(m *testing.M) {
	if os.Getenv("TL_TEST_AS_TL") == "1" {
		os.Exit(dispatch(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// daemon is a tl serve process started by a test.
type daemon struct {
	cmd  *exec.Cmd
	addr string
	log  *strings.Builder
}

// startDaemon runs tl serve on a free loopback port with the default model
// on the pure-Go device and waits until it listens.
// Unless stateDir holds one, it is given a fixed planner cost model
// (a profile costs seconds on the loaded pure-Go device; it is tested where
// engine/llms is).
// extra are more flags (--store, --kv-budget); --socket PATH among them
// replaces --addr 127.0.0.1:0.
func startDaemon(t *testing.T, stateDir string, extra ...string) *daemon {
	t.Helper()
	if !slices.Contains(extra, "--socket") {
		extra = append(extra, "--addr", "127.0.0.1:0")
	}
	if err := os.MkdirAll(filepath.Join(stateDir, "kv"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(stateDir, "kv", costFile)); err != nil {
		if err := saveCost(filepath.Join(stateDir, "kv"), llms.CostModel{ReA: 2e-3, ReB: 1e-3, IOC: 1e-9, IOE: 1e-4}); err != nil {
			t.Fatal(err)
		}
	}
	args := append([]string{"serve", "--model", filepath.Join(defaultModelDir, "model.onnx"), "--device", "go",
		"--state-dir", stateDir, "--app-contexts", "0"}, extra...)
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "TL_TEST_AS_TL=1")
	errPipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d := &daemon{cmd: cmd, log: &strings.Builder{}}
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(errPipe)
		for sc.Scan() {
			line := sc.Text()
			d.log.WriteString(line + "\n")
			if _, rest, ok := strings.Cut(line, "listening on "); ok {
				found <- strings.Fields(rest)[0]
			}
		}
		close(found)
	}()
	select {
	case a, ok := <-found:
		if !ok {
			cmd.Wait()
			t.Fatalf("tl serve exited without listening")
		}
		d.addr = a
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		t.Fatal("tl serve did not listen within 20 s")
	}
	return d
}

func (d *daemon) kill() {
	d.cmd.Process.Kill() // SIGKILL
	d.cmd.Wait()
}

// TestServeSurvivesKill9: a scripted workload of contexts and calls runs
// against tl serve, which is killed with SIGKILL at random moments and
// restarted. After every restart each acknowledged context is there with
// its whole acknowledged token history (plus, at most, the one call that
// was in flight on it), no file was quarantined, and its next call works;
// with the store that keeps only the device cache and with engine/llms's
// (a budget of a few chunks: contexts swap and recompute).
func TestServeSurvivesKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("starts tl serve several times")
	}
	for _, store := range [][]string{{"--store", "device"}, {"--store", "llms", "--kv-budget", "24KiB"}} {
		t.Run(store[1], func(t *testing.T) { testKill9(t, store) })
	}
}

func testKill9(t *testing.T, store []string) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewSource(seed))
	dir := t.TempDir()
	// acked: the histories the daemon acknowledged. inflight: the
	// contexts with an operation whose reply never came (a call: the
	// history may have grown by it; a delete: the context may be gone).
	acked := map[string][]int{}
	inflight := map[string]string{}
	unknownCreate := 0
	minLen := map[string]int{}
	ctx := context.Background()
	kills := 0
	const rounds = 4
	for round := 0; round <= rounds; round++ {
		d := startDaemon(t, dir, store...)
		c, err := client.New(d.addr)
		if err != nil {
			t.Fatal(err)
		}
		// Check everything acknowledged so far.
		st, err := c.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if q, _ := st["quarantined"].([]any); len(q) != 0 {
			t.Fatalf("round %d: quarantined after kill -9: %v\n%s", round, q, d.log)
		}
		ids, err := c.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var extra []string
		for _, id := range ids {
			if _, ok := acked[id]; !ok {
				extra = append(extra, id)
			}
		}
		if len(extra) > unknownCreate {
			t.Errorf("round %d: %d contexts nobody was told about; %d creations were in flight", round, len(extra), unknownCreate)
		}
		// A creation the kill cut off may have been committed: such a
		// context is adopted with whatever history it has, so that it is
		// checked from now on and not counted again as unknown.
		for _, id := range extra {
			info, err := c.History(ctx, id)
			if err != nil {
				t.Fatalf("round %d: listed context %s: %v", round, id, err)
			}
			acked[id] = info.History
		}
		for id, h := range acked {
			info, err := c.History(ctx, id)
			if client.IsNotFound(err) && inflight[id] == "delete" {
				delete(acked, id)
				continue
			}
			if err != nil {
				t.Fatalf("round %d: acknowledged context %s: %v", round, id, err)
			}
			got := info.History
			if len(got) < minLen[id] {
				t.Fatalf("round %d: context %s has %d tokens; a call acknowledged %d", round, id, len(got), minLen[id])
			}
			switch {
			case slices.Equal(got, h):
			case inflight[id] == "call" && len(got) > len(h) && slices.Equal(got[:len(h)], h):
				acked[id] = got // the call in flight was committed before the kill
			default:
				t.Fatalf("round %d: context %s has %d tokens, acknowledged %d (in flight: %q)", round, id, len(got), len(h), inflight[id])
			}
			// Its next call works.
			rep, err := c.Call(ctx, id, api.Call{Prompt: " again", MaxTokens: ptr(2)})
			if err != nil {
				t.Fatalf("round %d: call on %s after restart: %v", round, id, err)
			}
			if info, err = c.History(ctx, id); err != nil || len(info.History) != rep.ContextTokens || !slices.Equal(info.History[:len(acked[id])], acked[id]) {
				t.Fatalf("round %d: context %s after a call: %d tokens (%v), reply says %d", round, id, len(info.History), err, rep.ContextTokens)
			}
			acked[id] = info.History
		}
		inflight, unknownCreate, minLen = map[string]string{}, 0, map[string]int{}
		if round == rounds {
			if kills < 3 {
				t.Errorf("only %d kills landed during the workload", kills)
			}
			d.cmd.Process.Signal(os.Interrupt)
			if err := d.cmd.Wait(); err != nil {
				t.Errorf("tl serve on SIGINT: %v\n%s", err, d.log)
			}
			break
		}
		// The workload, with a kill at a random moment.
		killAt := time.Duration(100+rng.Intn(600)) * time.Millisecond
		killed := make(chan struct{})
		go func() {
			time.Sleep(killAt)
			d.kill()
			close(killed)
		}()
		for op := 0; ; op++ {
			var id string
			var kind string
			ids := make([]string, 0, len(acked))
			for k := range acked {
				ids = append(ids, k)
			}
			slices.Sort(ids)
			switch r := rng.Intn(10); {
			case len(ids) < 3 || r < 2:
				kind = "create"
				nid, err := c.NewContext(ctx, fmt.Sprintf("Context %d.", op))
				if err == nil {
					acked[nid] = nil
					info, err := c.History(ctx, nid)
					if err == nil {
						acked[nid] = info.History
						continue
					}
					id, kind = nid, "history"
				}
			case r < 3 && len(ids) > 3:
				id, kind = ids[rng.Intn(len(ids))], "delete"
				if err := c.Delete(ctx, id); err == nil {
					delete(acked, id)
					continue
				}
			default:
				id, kind = ids[rng.Intn(len(ids))], "call"
				rep, err := c.Call(ctx, id, api.Call{Prompt: " tell me more", MaxTokens: ptr(1 + rng.Intn(6))})
				if err == nil {
					info, err := c.History(ctx, id)
					if err == nil && len(info.History) == rep.ContextTokens {
						acked[id] = info.History
						continue
					}
					// The call was acknowledged; its history could not be
					// read back before the kill: it must have at least
					// the reply's length.
					kind, minLen[id] = "call", rep.ContextTokens
				}
			}
			// The operation failed: the daemon died under it.
			select {
			case <-killed:
			case <-time.After(5 * time.Second):
				t.Fatalf("round %d: %s on %s failed with the daemon alive\n%s", round, kind, id, d.log)
			}
			switch kind {
			case "create":
				unknownCreate++
			case "history":
				inflight[id] = "call" // created, history not read: any history will do
			default:
				inflight[id] = kind
			}
			kills++
			break
		}
	}
	if len(acked) == 0 {
		t.Error("the workload acknowledged no context")
	}
	// Nothing half-written is left behind.
	ents, _ := os.ReadDir(filepath.Join(dir, "contexts"))
	for _, e := range ents {
		if strings.Contains(e.Name(), ".tmp") {
			t.Errorf("a temporary file is left: %s", e.Name())
		}
	}
	t.Logf("%d kills, %d contexts at the end", kills, len(acked))
}

func ptr[T any](v T) *T { return &v }

// TestChatOverSocket: tl chat talks to tl serve on a unix socket: it
// creates a context, streams a reply per line, prints /info, and a second
// session continues the context with --ctx.
func TestChatOverSocket(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "tl.sock")
	d := startDaemon(t, filepath.Join(dir, "state"), "--socket", sock)
	defer d.kill()
	if d.addr != "unix://"+sock {
		t.Fatalf("listening on %q, want unix://%s", d.addr, sock)
	}
	oldIn := stdin
	defer func() { stdin = oldIn }()
	stdin = strings.NewReader("Hello there\n/info\n/quit\nnot read\n")
	out, stats, err := capture(t, runChat, "--server", d.addr, "--system", "Be brief.", "-n", "4")
	if err != nil {
		t.Fatalf("tl chat: %v\n%s", err, stats)
	}
	_, rest, ok := strings.Cut(stats, "context ")
	if !ok {
		t.Fatalf("tl chat did not print the new context's id: %q", stats)
	}
	id := strings.Fields(rest)[0]
	if !strings.Contains(out, `"calls": 1`) || !strings.Contains(out, `"id": "`+id+`"`) {
		t.Errorf("/info printed %q: want the context with one call", out)
	}
	if !strings.Contains(stats, "switch") || !strings.Contains(stats, "tokens") {
		t.Errorf("no timings after the reply: %q", stats)
	}
	stdin = strings.NewReader("Again\n")
	if _, stats, err := capture(t, runChat, "--server", d.addr, "--ctx", id, "-n", "2"); err != nil {
		t.Fatalf("tl chat --ctx: %v\n%s", err, stats)
	}
	c, _ := client.New(d.addr)
	if info, err := c.Info(context.Background(), id); err != nil || info.Calls != 2 {
		t.Errorf("after two sessions: %+v, %v", info, err)
	}
	stdin = strings.NewReader("x\n")
	if _, _, err := capture(t, runChat, "--server", d.addr, "--ctx", "0123456789abcdef"); err == nil || !strings.Contains(err.Error(), "unknown context") {
		t.Errorf("tl chat --ctx of an unknown context: %v", err)
	}
}

// TestParseSize: the --kv-budget forms.
func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"1024": 1024, "512K": 512 << 10, "64MiB": 64 << 20, "1G": 1 << 30, "2GB": 2 << 30, "1.5m": 3 << 19, "10B": 10} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "x", "-1M", "1Q", "1e30G"} {
		if _, err := parseSize(bad); err == nil {
			t.Errorf("parseSize(%q) accepted", bad)
		}
	}
}

// TestCostFile: the cost model reads back as written; a damaged file is
// refused (the daemon profiles again) and a missing one is no error.
func TestCostFile(t *testing.T) {
	dir := t.TempDir()
	if c, err := loadCost(dir); c != nil || err != nil {
		t.Fatalf("no file: %v, %v", c, err)
	}
	want := llms.CostModel{ReA: 0.05, ReB: 0.2, IOC: 1e-9, IOE: 1.4e-4}
	if err := saveCost(dir, want); err != nil {
		t.Fatal(err)
	}
	if c, err := loadCost(dir); err != nil || c == nil || *c != want {
		t.Fatalf("read back %v, %v; want %v", c, err, want)
	}
	for _, bad := range []string{`{"re_a": -1}`, `{"re_a": 1e9}`, `[`} {
		os.WriteFile(filepath.Join(dir, costFile), []byte(bad), 0o644)
		if c, err := loadCost(dir); c != nil || err == nil {
			t.Errorf("%s: %v, %v; want an error", bad, c, err)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("%d files in the directory; want only %s", len(ents), costFile)
	}
}

func TestParseBudget(t *testing.T) {
	for _, c := range []struct {
		in    string
		ctx   float64
		bytes int64
	}{{"2ctx", 2, 0}, {"0.5 CTX", 0.5, 0}, {"64MiB", 0, 64 << 20}, {"0", 0, 0}} {
		ctx, bytes, err := parseBudget(c.in)
		if err != nil || ctx != c.ctx || bytes != c.bytes {
			t.Errorf("parseBudget(%q) = %g, %d, %v; want %g, %d", c.in, ctx, bytes, err, c.ctx, c.bytes)
		}
	}
	for _, bad := range []string{"ctx", "-1ctx", "xctx", "1Q"} {
		if _, _, err := parseBudget(bad); err == nil {
			t.Errorf("parseBudget(%q) accepted", bad)
		}
	}
}

// TestServeStoresAgree: the same greedy calls on two contexts in turn,
// with (engine/llms) a kill -9 and restart in the middle, against tl serve with the
// device-only store (every switch recomputes from the tokens), with
// engine/llms lossless (every reply must be the same) and with engine/llms
// compressing (INT8/4/2 by density: replies may differ; how many agree is
// logged, and the context's chunks by level and tier and the store's
// swap traffic must show through the API).
func TestServeStoresAgree(t *testing.T) {
	if testing.Short() {
		t.Skip("starts tl serve several times")
	}
	ctx := context.Background()
	script := func(store ...string) ([]string, map[string]any, map[string]any) {
		dir := t.TempDir()
		d := startDaemon(t, dir, store...)
		c, err := client.New(d.addr)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, sys := range []string{"Fortune:", "Proverb:"} {
			id, err := c.NewContext(ctx, sys)
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		var out []string
		call := func(i int, p string) {
			rep, err := c.Call(ctx, ids[i], api.Call{Prompt: p, MaxTokens: ptr(8)})
			if err != nil {
				t.Fatalf("%v: %v\n%s", store, err, d.log)
			}
			out = append(out, rep.Text)
		}
		call(0, " The cat sat on the")
		call(1, " A wise man")
		call(0, " and then")
		if store[1] != "device" { // it keeps nothing a restart could lose
			d.kill()
			d = startDaemon(t, dir, store...)
			if c, err = client.New(d.addr); err != nil {
				t.Fatal(err)
			}
		}
		call(1, " said that")
		call(0, " Once more")
		call(1, " and so")
		info, err := c.Info(ctx, ids[0])
		if err != nil {
			t.Fatal(err)
		}
		st, err := c.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		d.cmd.Process.Signal(os.Interrupt)
		d.cmd.Wait()
		si, _ := json.Marshal(info.Store)
		var sm map[string]any
		json.Unmarshal(si, &sm)
		ss, _ := st["store"].(map[string]any)
		return out, sm, ss
	}
	ref, _, _ := script("--store", "device")
	exact, _, _ := script("--store", "llms", "--kv-lossless", "--kv-budget", "24KiB")
	if !slices.Equal(exact, ref) {
		t.Errorf("lossless llms replies %q\ndevice store replies %q", exact, ref)
	}
	lossy, info, stats := script("--store", "llms", "--kv-budget", "24KiB")
	same := 0
	for i := range ref {
		if lossy[i] == ref[i] {
			same++
		}
	}
	t.Logf("llms (compressed): %d of %d greedy replies equal the device store's", same, len(ref))
	if same == 0 {
		t.Errorf("no compressed llms reply equals the device store's: %q vs %q", lossy, ref)
	}
	if _, ok := info["chunks_by_level"].(map[string]any); !ok || info["chunks_by_tier"] == nil {
		t.Errorf("context info's store %v: want chunks by level and by tier", info)
	}
	if stats["mode"] != "llms" || stats["io_write_bytes"] == 0.0 {
		t.Errorf("stats' store %v: want mode llms and swap writes", stats)
	}
}

// TestServeRefusals: tl serve's command-line mistakes are named before
// anything is loaded.
func TestServeRefusals(t *testing.T) {
	model := filepath.Join(defaultModelDir, "model.onnx")
	dir := t.TempDir()
	cases := []struct {
		args []string
		want string
	}{
		{[]string{model}, "--state-dir"},
		{[]string{model, "--state-dir", dir, "--addr", "127.0.0.1:0", "--socket", filepath.Join(dir, "s")}, "not both"},
		{[]string{model, "--state-dir", dir, "--kv-budget", "lots"}, "--kv-budget"},
		{[]string{model, "--state-dir", dir, "--sinks", "0"}, "sink"},
		{[]string{model, "--state-dir", dir, "--stats-every", "0"}, "--stats-every"},
		{[]string{model, "--state-dir", dir, "--store", "lru"}, "--store"},
		{[]string{model, "--state-dir", dir, "--kv-budget", "0ctx"}, "--kv-budget"},
		{[]string{model, "--state-dir", dir, "--kv", "explicit"}, "in-place"},
		{[]string{model, "--state-dir", dir, "--tolerance", "sharp"}, "--tolerance"},
		{[]string{model, "--state-dir", dir, "--store", "swap", "--tolerance", "peak"}, "--tolerance peak"},
		{[]string{model, "--state-dir", dir, "--store", "llms_notol", "--tolerance", "peak"}, "--tolerance peak"},
		{[]string{model, "--state-dir", dir, "--kv-lossless", "--tolerance", "peak"}, "--kv-lossless"},
	}
	for _, c := range cases {
		_, _, err := capture(t, runServe, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("tl serve %q: %v, want an error naming %q", c.args, err, c.want)
		}
	}
	if _, _, err := capture(t, runChat, "--server", "ftp://x"); err == nil {
		t.Error("tl chat --server ftp://x accepted")
	}
}

// TestServeTolerance: -h documents --tolerance, and a daemon started with
// --tolerance peak reports its store placing chunks by the peak.
func TestServeTolerance(t *testing.T) {
	_, help, err := capture(t, runServe, "-h")
	if !errors.Is(err, flag.ErrHelp) || !strings.Contains(help, "[--tolerance density|peak]") || !strings.Contains(help, "-tolerance string") {
		t.Errorf("tl serve -h: %v\n%s", err, help)
	}
	d := startDaemon(t, t.TempDir(), "--store", "llms", "--tolerance", "peak")
	defer d.kill()
	c, err := client.New(d.addr)
	if err != nil {
		t.Fatal(err)
	}
	st, err := c.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if store, _ := st["store"].(map[string]any); store["tolerance"] != "peak" {
		t.Errorf("stats' store %v: want tolerance peak", store)
	}
}

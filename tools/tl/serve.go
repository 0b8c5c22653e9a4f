package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tlite/tlite/engine/atomicfile"
	"github.com/tlite/tlite/engine/generate"
	"github.com/tlite/tlite/engine/kv"
	"github.com/tlite/tlite/engine/llms"
	"github.com/tlite/tlite/engine/serve"
	"github.com/tlite/tlite/engine/serve/api"
	"github.com/tlite/tlite/engine/serve/client"
)

// stdin is what tl chat reads; tests replace it.
var stdin io.Reader = os.Stdin

func init() {
	register(command{"serve", "run a decoder as a service: persistent contexts over HTTP/JSON", runServe})
	register(command{"chat", "talk to a tl serve daemon, one line per call", runChat})
}

// parseSize reads a byte size: 1048576, 512K, 64MiB, 1G, 2GB (K, M, G
// and T are powers of 1024, with or without "iB" or "B").
func parseSize(s string) (int64, error) {
	u := strings.ToUpper(strings.TrimSpace(s))
	mult := int64(1)
units:
	for _, unit := range []struct {
		s string
		m int64
	}{{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"T", 1 << 40}} {
		for _, form := range []string{unit.s + "IB", unit.s + "B", unit.s} {
			if strings.HasSuffix(u, form) {
				u, mult = strings.TrimSuffix(u, form), unit.m
				break units
			}
		}
	}
	if mult == 1 {
		u = strings.TrimSuffix(u, "B")
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(u), 64)
	if err != nil || v < 0 || v*float64(mult) > 1<<62 {
		return 0, fmt.Errorf("size %q: want a number of bytes with an optional K, M, G or T (powers of 1024), e.g. 512MiB", s)
	}
	return int64(v * float64(mult)), nil
}

// parseBudget reads --kv-budget: a byte size (parseSize) or a count of
// full-length INT8 contexts, "2ctx" (returned as ctx, resolved once the
// model is open).
func parseBudget(s string) (ctx float64, bytes int64, err error) {
	t := strings.TrimSpace(strings.ToLower(s))
	if n, ok := strings.CutSuffix(t, "ctx"); ok {
		v, err := strconv.ParseFloat(strings.TrimSpace(n), 64)
		if err != nil || v <= 0 || v > 1<<20 {
			return 0, 0, fmt.Errorf("%q: want a positive count of contexts, e.g. 2ctx", s)
		}
		return v, 0, nil
	}
	bytes, err = parseSize(s)
	return 0, bytes, err
}

// costFile holds the planner's cost model fitted by the first start
// (engine/llms profiles recompute and flash reads at NewManager, seconds
// on a slow device); later starts on the same state directory reuse it.
// Delete it to profile again.
const costFile = "cost-model.json"

// loadCost reads dir's cost model: nil, nil when there is none; an error
// (and nil) when it does not read back as four finite non-negative
// coefficients.
func loadCost(dir string) (*llms.CostModel, error) {
	p := filepath.Join(dir, costFile)
	b, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var c llms.CostModel
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	for _, v := range []float64{c.ReA, c.ReB, c.IOC, c.IOE} {
		if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) || v > 1e3 {
			return nil, fmt.Errorf("%s: coefficient %g is not a time in seconds", p, v)
		}
	}
	return &c, nil
}

// saveCost writes c to dir atomically (temporary file, sync, rename).
func saveCost(dir string, c llms.CostModel) error {
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(filepath.Join(dir, costFile), append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("saving the cost model: %w", err)
	}
	return nil
}

// seqMax is the most tokens one forward may take: the plan's maximum of
// input_ids' sequence symbol (the context when it is not a symbol).
func seqMax(st *kv.State) int {
	maxima := st.Session().Maxima()
	for _, p := range st.Session().Inputs() {
		if p.Name != "input_ids" || len(p.Shape) != 2 {
			continue
		}
		if v, ok := p.Shape[1].Const(); ok {
			return int(v)
		}
		if name, ok := p.Shape[1].SymName(); ok && maxima[name] > 0 {
			return int(min(maxima[name], int64(st.MaxContext())))
		}
	}
	return st.MaxContext()
}

func runServe(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	lf := addLLMFlags(fs)
	addr := fs.String("addr", "127.0.0.1:8080", "TCP address to listen on (port 0: any free port, printed at start)")
	socket := fs.String("socket", "", "listen on this unix socket instead of --addr")
	stateDir := fs.String("state-dir", "", "directory where the contexts live (created if missing; survives restarts)")
	budget := fs.String("kv-budget", "256MiB", `memory budget for contexts' KV outside the model's cache: a size (512MiB) or a count of full-length INT8 contexts ("2ctx"); the "device" store keeps none and only reports it`)
	appCtx := fs.Int("app-contexts", 64, "K: the most contexts one app (X-App-Id header) may hold (0: no limit)")
	sinks := fs.Int("sinks", 4, "tokens at the start of a context the sliding window always keeps (attention sinks)")
	maxBody := fs.Int64("max-body", serve.DefaultMaxBody, "largest request body in bytes (larger: 413)")
	store := fs.String("store", "llms", `context store: "llms" (engine/llms: chunked, compressed by attention, swapped ahead of time, restored by swap and recompute), one of its baselines "lmk" (kill under pressure, recompute), "swap", "vllm_s", "vllm_sq" or ablations "llms_nolife", "llms_notol", "llms_nopipe", all under --kv-budget with their state in STATE-DIR/kv; or "device" (keeps only the context in the model's cache; recomputes on every switch)`)
	statsEvery := fs.Int("stats-every", 8, "gather attention statistics for one decode step in N (prefills always; 1: every step; engine/llms stores that rank chunks)")
	lossless := fs.Bool("kv-lossless", false, "store chunks uncompressed (the exactness check; engine/llms stores)")
	tolerance := fs.String("tolerance", "density", `which statistic places a context's chunks on the 8/4/2-bit levels (the stores that rank chunks: llms, llms_nolife, llms_nopipe): "density" (the paper's: the mean attention a chunk's tokens received) or "peak" (ours: the same number of chunks at each level, so the same bytes, but given to the chunks whose tokens some row attended most sharply, e.g. a fact a later question looks up; engine/llms doc)`)
	fs.SetOutput(statsOut)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), `usage: tl serve --model m.onnx [--addr 127.0.0.1:8080 | --socket PATH] --state-dir DIR [--store llms|lmk|swap|vllm_s|vllm_sq|device] [--kv-budget 256MiB|2ctx] [--tolerance density|peak] [--ctx N] [--app-contexts K] [--sinks 4] [--stats-every 8] [--device d]`)
		fmt.Fprintln(fs.Output(), "Serves the API of package engine/serve (go doc ./engine/serve Service.Handler) until SIGINT or SIGTERM.")
		fs.PrintDefaults()
	}
	flags, pos := splitArgs(args, llmValued("addr", "socket", "state-dir", "kv-budget", "app-contexts", "sinks", "max-body", "store", "stats-every", "tolerance"))
	if err := fs.Parse(flags); err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	model, err := lf.modelPath(pos)
	if err != nil {
		fs.Usage()
		return err
	}
	if *stateDir == "" {
		return fmt.Errorf("give the directory the contexts live in with --state-dir")
	}
	if set["addr"] && *socket != "" {
		return fmt.Errorf("give --addr or --socket, not both")
	}
	budgetCtx, bytes, err := parseBudget(*budget)
	if err != nil {
		return fmt.Errorf("--kv-budget: %w", err)
	}
	if *statsEvery < 1 {
		return fmt.Errorf("--stats-every %d: want 1 or more", *statsEvery)
	}
	if *appCtx < 0 || *sinks < 1 || *maxBody < 1 {
		return fmt.Errorf("--app-contexts %d, --sinks %d, --max-body %d: want K >= 0, at least one sink and a positive body limit", *appCtx, *sinks, *maxBody)
	}
	mode := llms.Mode(*store)
	switch mode {
	case "device", llms.ModeLLMS, llms.ModeLMK, llms.ModeSwap, llms.ModeVLLMS, llms.ModeVLLMSQ, llms.ModeNoLifecycle, llms.ModeNoTolerance, llms.ModeNoPipeline:
	default:
		return fmt.Errorf("--store %q: want llms, lmk, swap, vllm_s, vllm_sq, llms_nolife, llms_notol, llms_nopipe or device", *store)
	}
	tol, err := llms.ParseTolerance(*tolerance)
	if err != nil {
		return fmt.Errorf("--tolerance: %w", err)
	}
	// Only the stores that rank chunks by attention place them by a
	// tolerance; a peak asked of another would be silently ignored.
	rankingStore := mode == llms.ModeLLMS || mode == llms.ModeNoLifecycle || mode == llms.ModeNoPipeline
	if tol != llms.ToleranceDensity && (!rankingStore || *lossless) {
		return fmt.Errorf("--tolerance %s: only the stores that rank chunks use it (llms, llms_nolife, llms_nopipe, without --kv-lossless), not --store %s%s",
			tol, mode, map[bool]string{true: " --kv-lossless"}[*lossless])
	}
	if *lf.kv != "inplace" {
		return fmt.Errorf("--kv %s: tl serve needs the in-place KV cache", *lf.kv)
	}
	t0 := time.Now()
	// LLMS ranks chunks by the attention they receive: the session
	// computes the statistics (one more kernel per attention).
	ranks := !*lossless && rankingStore
	st, tok, err := lf.open(model, generate.Config{LastOnly: true, AttentionStats: ranks})
	if err != nil {
		return err
	}
	defer st.Close()
	d, ok := st.(*generate.Decoder)
	var state *kv.State
	if ok {
		if p, ok := d.Stepper.(*kv.Stepper); ok {
			state = p.State()
		}
	}
	if state == nil {
		return fmt.Errorf("%s runs without the in-place KV cache, which tl serve needs", model)
	}
	if err := warmUp(st); err != nil {
		return err
	}
	var cs serve.ContextStore
	if mode != "device" {
		if budgetCtx > 0 {
			unit, err := llms.ContextBytesINT8(state, 16)
			if err != nil {
				return err
			}
			bytes = int64(budgetCtx * float64(unit))
		}
		kvDir := filepath.Join(*stateDir, "kv")
		cost, err := loadCost(kvDir)
		if err != nil {
			fmt.Fprintf(statsOut, "tl serve: %v; profiling again\n", err)
		}
		m, err := llms.NewManager(state, kvDir, llms.Config{Mode: mode, BudgetBytes: bytes, Lossless: *lossless, MaxStep: seqMax(state), Cost: cost, StatsEvery: *statsEvery, Tolerance: tol})
		if err != nil {
			return err
		}
		defer m.Close()
		if cost == nil {
			if err := saveCost(kvDir, m.Cost()); err != nil {
				return err
			}
		}
		for name, why := range m.Stats().Corrupt {
			fmt.Fprintf(statsOut, "tl serve: store: skipped %s (%s); its context is rebuilt from its tokens\n", name, why)
		}
		cs = serve.NewLLMSStore(m)
	}
	svc, err := serve.New(state, tok, cs, serve.Config{StateDir: *stateDir, Model: model, Sinks: *sinks, AppContexts: *appCtx, BudgetBytes: bytes})
	if err != nil {
		return err
	}
	for _, q := range svc.Quarantined() {
		fmt.Fprintf(statsOut, "tl serve: quarantined %s (%s): moved to %s\n", q.File, q.Reason, q.MovedTo)
	}
	var l net.Listener
	where := ""
	if *socket != "" {
		if fi, err := os.Stat(*socket); err == nil && fi.Mode()&os.ModeSocket != 0 {
			if c, err := net.Dial("unix", *socket); err == nil {
				c.Close()
				return fmt.Errorf("--socket %s: another server is listening on it", *socket)
			}
			os.Remove(*socket) // left by a server that died
		}
		l, err = net.Listen("unix", *socket)
		where = "unix://" + *socket
	} else {
		l, err = net.Listen("tcp", *addr)
		if err == nil {
			where = "http://" + l.Addr().String()
		}
	}
	if err != nil {
		svc.Close()
		return err
	}
	srv := &http.Server{Handler: svc.Handler(*maxBody), ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(l) }()
	fmt.Fprintf(statsOut, "tl serve: listening on %s (model %s, context %d tokens from %s, %d contexts in %s, store %s, KV budget %d bytes, loaded in %.0f ms)\n",
		where, model, state.MaxContext(), lf.ctxFrom, len(svc.IDs()), *stateDir, mode, bytes, ms(time.Since(t0)))
	select {
	case err = <-errc:
	case <-ctx.Done():
		fmt.Fprintln(statsOut, "tl serve: shutting down")
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = srv.Shutdown(sctx)
		cancel()
	}
	svc.Close()
	if *socket != "" {
		os.Remove(*socket)
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

func runChat(args []string) error {
	fs := flag.NewFlagSet("chat", flag.ContinueOnError)
	server := fs.String("server", "http://127.0.0.1:8080", "the tl serve daemon: http://host:port or unix:///path")
	id := fs.String("ctx", "", "continue this context (default: create one and print its id)")
	system := fs.String("system", "", "system prompt of a new context")
	app := fs.String("app", "", "app the context belongs to (X-App-Id)")
	n := fs.Int("n", 64, "tokens to generate at most per line")
	temp := fs.Float64("temperature", 0, "sampling temperature (0: greedy)")
	topP := fs.Float64("top-p", 0, "nucleus sampling threshold (0 or 1: off)")
	template := fs.Bool("template", true, `send each line as "User: <line>\nAssistant:" (the chat template of tl serve's chat completions), stopping at "\nUser:"; false sends lines as they are`)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: tl chat [--server URL] [--ctx ID | --system TEXT] [-n 64] [--temperature 0] [--template=false]")
		fmt.Fprintln(fs.Output(), "Reads lines from stdin; each is one call on the context, its reply streamed to stdout. /stats and /info print the server's figures; /quit or end of input leaves.")
		fs.PrintDefaults()
	}
	flags, pos := splitArgs(args, map[string]bool{"server": true, "ctx": true, "system": true, "app": true, "n": true, "temperature": true, "top-p": true})
	if err := fs.Parse(flags); err != nil {
		return err
	}
	if len(pos) > 0 {
		fs.Usage()
		return fmt.Errorf("unexpected arguments %q", pos)
	}
	if *n < 1 {
		return fmt.Errorf("-n %d: want at least 1", *n)
	}
	c, err := client.New(*server)
	if err != nil {
		return err
	}
	c.App = *app
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if *id == "" {
		if *id, err = c.NewContext(ctx, *system); err != nil {
			return err
		}
		fmt.Fprintf(statsOut, "context %s (continue it with --ctx %s)\n", *id, *id)
	} else if _, err := c.Info(ctx, *id); err != nil {
		return err
	}
	in := bufio.NewScanner(stdin)
	in.Buffer(make([]byte, 64<<10), 1<<20)
	for {
		fmt.Fprint(statsOut, "> ")
		if !in.Scan() {
			fmt.Fprintln(statsOut)
			return in.Err()
		}
		line := in.Text()
		switch strings.TrimSpace(line) {
		case "":
			continue
		case "/quit", "/exit":
			return nil
		case "/stats", "/info":
			var v any
			if strings.TrimSpace(line) == "/stats" {
				v, err = c.Stats(ctx)
			} else {
				v, err = c.Info(ctx, *id)
			}
			if err != nil {
				return err
			}
			writeJSON(stdout, v)
			continue
		}
		req := api.Call{Prompt: line, MaxTokens: n}
		if *template {
			req.Prompt = "User: " + line + "\nAssistant:"
			req.Stop = []string{"\nUser:"}
		}
		if *temp > 0 {
			req.Temperature, req.TopP = temp, topP
		}
		rep, err := c.Stream(ctx, *id, req, func(s string) error {
			_, err := io.WriteString(stdout, s)
			return err
		})
		fmt.Fprintln(stdout)
		if err != nil {
			return err
		}
		fmt.Fprintf(statsOut, "[%d tokens, %s; switch %.1f ms, prefill %.1f ms, decode %.1f ms; context %d tokens]\n",
			rep.Tokens, rep.FinishReason, rep.Timings.SwitchMs, rep.Timings.PrefillMs, rep.Timings.DecodeMs, rep.ContextTokens)
	}
}

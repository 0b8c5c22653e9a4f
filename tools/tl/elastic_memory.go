package main

import (
	"flag"
	"fmt"
	"math/rand"
	"strings"

	"github.com/tlite/tlite/engine"
	"github.com/tlite/tlite/engine/generate"
)

// memoryRow is one resident session of tl elastic memory.
type memoryRow struct {
	Name string `json:"name"`
	// Weights are the model's constants (weights and folded constants)
	// without the KV cache: in place (read from the file mapping) and
	// copied into device buffers.
	WeightsInPlace int64 `json:"weights_in_place_bytes"`
	WeightsCopied  int64 `json:"weights_copied_bytes"`
	KVCache        int64 `json:"kv_cache_bytes"`
	Activations    int64 `json:"activation_bytes"`
	// Adapters are the LoRA sets the engine uploaded, AdapterScratch the
	// buffer their side branches share (engine.DeviceMemory).
	Adapters       int64 `json:"adapter_bytes"`
	AdapterScratch int64 `json:"adapter_scratch_bytes"`
	// Live is what the OpenCL device counts as allocated for the session
	// (-1 on the pure-Go backend).
	Live int64 `json:"device_live_bytes"`
}

type memoryResult struct {
	// Device is the backend the sessions ran on ("opencl" or "go").
	Device       string      `json:"device"`
	Context      int         `json:"context"`
	Prompt       int         `json:"prompt"`
	Sessions     []memoryRow `json:"sessions"`
	TotalDevice  int64       `json:"total_device_bytes"`
	PeakRSSMiB   float64     `json:"peak_rss_mib"`
	FinalRSSMiB  float64     `json:"final_rss_mib"`
	ModelLevels  []int       `json:"elastic_levels_run,omitempty"`
	AdapterFiles int         `json:"adapter_sets,omitempty"`
}

// elasticMemory opens, in one process, either an elastic model with its
// adapters and a TLM, or a list of separate models, runs each once, and
// reports the device bytes the engine holds for each and the process's
// peak RSS: the evaluation's "one elastic copy vs several resident models".
func elasticMemory(args []string) error {
	fs := flag.NewFlagSet("elastic memory", flag.ContinueOnError)
	fs.SetOutput(stderr)
	lf := addLLMFlags(fs)
	models := fs.String("models", "", "comma list of separate (non-elastic) models to keep resident together, instead of --model")
	tlmDir := fs.String("tlm", "", "TLM folder (model.onnx + tlm.json) to keep resident beside the elastic model")
	prompt := fs.Int("prompt", 64, "prompt tokens each model runs once (so its activations are touched)")
	asJSON := fs.Bool("json", false, "write the result as JSON")
	flags, pos := splitArgs(args, llmValued("models", "tlm", "prompt"))
	if err := fs.Parse(flags); err != nil {
		return err
	}
	if len(pos) > 0 {
		return fmt.Errorf("unexpected argument %q (give --model or --models)", pos[0])
	}
	if (*lf.model == "") == (*models == "") {
		return fmt.Errorf("give --model ELASTIC (with --lora, --tlm) or --models M1,M2,...")
	}
	if *models != "" && (*tlmDir != "" || *lf.lora != "") {
		return fmt.Errorf("--tlm and --lora go with an elastic --model, not with --models")
	}
	if *prompt < 1 {
		return fmt.Errorf("--prompt %d: want at least 1", *prompt)
	}
	rng := rand.New(rand.NewSource(1))
	res := memoryResult{Prompt: *prompt}
	run := func(st llmStepper) error {
		toks := make([]int, *prompt)
		pos := make([]int, *prompt)
		for i := range toks {
			toks[i], pos[i] = rng.Intn(st.Vocab()), i
		}
		if *prompt+1 > st.MaxContext() {
			return fmt.Errorf("--prompt %d does not fit the context of %d", *prompt, st.MaxContext())
		}
		if err := st.Reset(); err != nil {
			return err
		}
		if _, err := st.Step(toks, pos); err != nil {
			return err
		}
		_, err := st.Step([]int{toks[0]}, []int{*prompt})
		return err
	}
	row := func(name string, s *engine.Session) memoryRow {
		dm, ws := s.DeviceMemory(), s.WeightStats()
		return memoryRow{Name: name, WeightsInPlace: ws.InPlace, WeightsCopied: dm.Constants - dm.KVCache - ws.InPlace, KVCache: dm.KVCache,
			Activations: dm.Activations, Adapters: dm.Adapters, AdapterScratch: dm.AdapterScratch, Live: dm.Live}
	}
	var closers []func() error
	defer func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}()
	if *lf.model != "" {
		model := modelFile(*lf.model)
		st, err := lf.openStepper(model, *prompt, generate.Config{LastOnly: true})
		if err != nil {
			return err
		}
		closers = append(closers, st.Close)
		res.Context, res.Device = st.MaxContext(), deviceOf(st.Session()).Backend
		lora := ""
		if *lf.lora != "" {
			lora = loraDir(model, *lf.lora)
		}
		em, err := bindElastic(st, model, lora)
		if err != nil {
			return err
		}
		res.AdapterFiles = em.LoRASets()
		// Every level runs once: the adapters and widths all get used.
		for _, lv := range em.Spec.Levels {
			if err := em.SetLevel(lv.Level); err != nil {
				return err
			}
			if err := run(st); err != nil {
				return fmt.Errorf("%s level %d: %w", model, lv.Level, err)
			}
			res.ModelLevels = append(res.ModelLevels, lv.Level)
		}
		res.Sessions = append(res.Sessions, row(model, st.Session()))
		if *tlmDir != "" {
			t, err := lf.openTLM(*tlmDir)
			if err != nil {
				return err
			}
			closers = append(closers, t.Close)
			ids := make([]int, min(*prompt, t.Meta.MaxPositions-3))
			for i := range ids {
				ids[i] = rng.Intn(st.Vocab())
			}
			if _, err := t.Run(ids, 0.5, 0.5); err != nil {
				return fmt.Errorf("TLM: %w", err)
			}
			res.Sessions = append(res.Sessions, row(*tlmDir+" (TLM)", t.Session()))
		}
	} else {
		for _, m := range strings.Split(*models, ",") {
			if m == "" {
				return fmt.Errorf("--models %q: an empty name", *models)
			}
			m = modelFile(m)
			st, err := lf.openStepper(m, *prompt, generate.Config{LastOnly: true})
			if err != nil {
				return err
			}
			closers = append(closers, st.Close)
			res.Context, res.Device = st.MaxContext(), deviceOf(st.Session()).Backend
			if err := run(st); err != nil {
				return fmt.Errorf("%s: %w", m, err)
			}
			res.Sessions = append(res.Sessions, row(m, st.Session()))
		}
	}
	for _, r := range res.Sessions {
		res.TotalDevice += r.WeightsInPlace + r.WeightsCopied + r.KVCache + r.Activations + r.Adapters + r.AdapterScratch
	}
	res.PeakRSSMiB = peakRSSMiB()
	res.FinalRSSMiB = rssMiB()
	if *asJSON {
		return writeJSON(stdout, res)
	}
	mib := func(b int64) string {
		if b < 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f", float64(b)/(1<<20))
	}
	t := newTable("session", "weights in place MiB", "weights copied MiB", "KV cache MiB", "activations MiB", "adapters MiB", "device live MiB").alignRight(1, 2, 3, 4, 5, 6)
	for _, r := range res.Sessions {
		t.add(r.Name, mib(r.WeightsInPlace), mib(r.WeightsCopied), mib(r.KVCache), mib(r.Activations), mib(r.Adapters+r.AdapterScratch), mib(r.Live))
	}
	t.write(stdout)
	fmt.Fprintf(stdout, "total %.2f MiB held by the engine (%d sessions, context %d, backend %s); process peak RSS %.1f MiB, RSS at the end %.1f MiB\n",
		float64(res.TotalDevice)/(1<<20), len(res.Sessions), res.Context, res.Device, res.PeakRSSMiB, res.FinalRSSMiB)
	return nil
}

// rssMiB is the process's current resident set (VmRSS), 0 where /proc has
// none.
func rssMiB() float64 {
	mib, _ := procStatusMiB("VmRSS")
	return mib
}

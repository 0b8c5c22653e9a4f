package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/tlite/tlite/engine"
	"github.com/tlite/tlite/engine/atomicfile"
	"github.com/tlite/tlite/engine/elastic"
	"github.com/tlite/tlite/engine/elastic/slo"
	"github.com/tlite/tlite/engine/elastic/tlm"
	"github.com/tlite/tlite/engine/generate"
)

// modelDir is the folder of a model file (or the folder itself).
func modelDir(model string) string {
	if st, err := os.Stat(model); err == nil && st.IsDir() {
		return model
	}
	return filepath.Dir(model)
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func parseInts(flagName, s string, lo, hi int) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || v < lo || v > hi {
			return nil, fmt.Errorf("%s %q: want integers %d..%d, comma-separated", flagName, s, lo, hi)
		}
		out = append(out, v)
	}
	return out, nil
}

// timedPrefill resets the sequence and prefills ids; it returns the time
// to the last row of logits.
func timedPrefill(st generate.Stepper, ids []int) (time.Duration, []float32, error) {
	if err := st.Reset(); err != nil {
		return 0, nil, err
	}
	pos := make([]int, len(ids))
	for i := range pos {
		pos[i] = i
	}
	t0 := time.Now()
	logits, err := st.Step(ids, pos)
	return time.Since(t0), logits, err
}

// timedDecode runs n greedy decode steps after a prefill of length past and
// returns the mean step time.
func timedDecode(st generate.Stepper, last []float32, past, n int) (time.Duration, error) {
	if n <= 0 {
		return 0, nil
	}
	v := st.Vocab()
	row := last[len(last)-v:]
	t0 := time.Now()
	for i := 0; i < n; i++ {
		next := argmaxF32(row)
		out, err := st.Step([]int{next}, []int{past + i})
		if err != nil {
			return 0, err
		}
		row = out[len(out)-v:]
	}
	return time.Since(t0) / time.Duration(n), nil
}

func deviceName(s *engine.Session) string {
	d := deviceOf(s)
	return strings.TrimSpace(d.Backend + " " + d.Name)
}

// elasticProfile measures profile.json: TTFT by prompt length and level,
// TPOT by level, the TLM's time by length and the switch time.
func elasticProfile(args []string) error {
	fs := flag.NewFlagSet("elastic profile", flag.ContinueOnError)
	lf := addLLMFlags(fs)
	tlmDir := fs.String("tlm", "", "TLM folder (model.onnx + tlm.json) to time as well")
	lengths := fs.String("lengths", "16,32,64,128,192", "prompt lengths to time the prefill at")
	levels := fs.String("levels", "20,40,60,80,100", "levels to profile")
	reps := fs.Int("r", 3, "repetitions (medians are reported)")
	steps := fs.Int("decode", 8, "decode steps per TPOT measurement")
	out := fs.String("out", "", "where to write the profile (default: profile.json beside the model)")
	flags, pos := splitArgs(args, llmValued("tlm", "lengths", "levels", "r", "decode", "out"))
	if err := fs.Parse(flags); err != nil {
		return err
	}
	model, err := lf.modelPath(pos)
	if err != nil {
		return err
	}
	ls, err := parseInts("--lengths", *lengths, 1, 1<<20)
	if err != nil {
		return err
	}
	lvs, err := parseInts("--levels", *levels, 1, 100)
	if err != nil {
		return err
	}
	if *reps < 1 || *steps < 1 {
		return fmt.Errorf("-r %d, --decode %d: want at least 1", *reps, *steps)
	}
	st, err := lf.openStepper(model, 0, generate.Config{LastOnly: true})
	if err != nil {
		return err
	}
	defer st.Close()
	if m := ls[len(ls)-1] + *steps; m > st.MaxContext() {
		return fmt.Errorf("--lengths up to %d plus %d decode steps exceed the context of %d (give --ctx)", ls[len(ls)-1], *steps, st.MaxContext())
	}
	em, err := bindElastic(st, model, "")
	if err != nil {
		return err
	}
	if err := warmUp(st); err != nil {
		return err
	}
	rng := rand.New(rand.NewSource(1))
	prompt := make([]int, ls[len(ls)-1])
	for i := range prompt {
		prompt[i] = rng.Intn(st.Vocab())
	}
	ttft := map[int][][]float64{}
	tpot := map[int][]float64{}
	var sw []float64
	for r := 0; r < *reps; r++ {
		// Levels interleaved within a repetition, so a load change on the
		// machine hits every level alike.
		for _, lv := range lvs {
			t0 := time.Now()
			if err := em.SetLevel(lv); err != nil {
				return err
			}
			sw = append(sw, ms(time.Since(t0)))
			if ttft[lv] == nil {
				ttft[lv] = make([][]float64, len(ls))
			}
			var last []float32
			for i, n := range ls {
				d, lg, err := timedPrefill(st, prompt[:n])
				if err != nil {
					return err
				}
				ttft[lv][i] = append(ttft[lv][i], ms(d))
				last = lg
			}
			d, err := timedDecode(st, last, ls[len(ls)-1], *steps)
			if err != nil {
				return err
			}
			tpot[lv] = append(tpot[lv], ms(d))
		}
	}
	p := slo.Profile{Format: slo.Format, Device: deviceName(st.Session()), Load: loadAverage(), PromptLengths: ls,
		TTFTMs: map[string][]float64{}, TPOTMs: map[string]float64{}, SwitchMs: median(sw), Repeats: *reps}
	for _, lv := range lvs {
		k := strconv.Itoa(lv)
		for i := range ls {
			p.TTFTMs[k] = append(p.TTFTMs[k], median(ttft[lv][i]))
		}
		p.TPOTMs[k] = median(tpot[lv])
		fmt.Fprintf(stdout, "level %3d%%: TTFT %v ms at lengths %v, TPOT %.1f ms\n", lv, roundAll(p.TTFTMs[k]), ls, p.TPOTMs[k])
	}
	if *tlmDir != "" {
		t, err := lf.openTLM(*tlmDir)
		if err != nil {
			return err
		}
		defer t.Close()
		for _, n := range ls {
			if n+1 > t.Meta.MaxPositions {
				break
			}
			ids := append([]int{0}, prompt[:n]...)
			var v []float64
			for r := 0; r < *reps+1; r++ {
				res, err := t.Run(ids, 1, 1)
				if err != nil {
					return err
				}
				if r > 0 { // the first run builds the kernels
					v = append(v, ms(res.Time))
				}
			}
			p.TLMLengths = append(p.TLMLengths, n)
			p.TLMMs = append(p.TLMMs, median(v))
		}
		fmt.Fprintf(stdout, "TLM: %v ms at lengths %v\n", roundAll(p.TLMMs), p.TLMLengths)
	}
	fmt.Fprintf(stdout, "switch: median %.4f ms over %d switches; load average %.1f\n", p.SwitchMs, len(sw), p.Load)
	if err := p.Check(); err != nil {
		return fmt.Errorf("tl elastic profile: %w", err)
	}
	path := *out
	if path == "" {
		path = filepath.Join(modelDir(model), slo.FileName)
	}
	return writeJSONFile(path, p)
}

func roundAll(v []float64) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = math.Round(x*10) / 10
	}
	return out
}

// loadAverage is the 1-minute load average (0 where it cannot be read).
func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// writeJSONFile writes v to path atomically (a temporary file renamed).
func writeJSONFile(path string, v any) error {
	b, err := json.MarshalIndent(v, "", " ")
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(statsOut, "wrote %s\n", path)
	return nil
}

// sloRun is one request served under an SLO: the TLM, the decision, the
// switch and the compressed prompt.
type sloRun struct {
	Decision  slo.Decision
	Strategy  string
	FellBack  bool
	HeadModel int
	HeadPrmpt int
	TLMMs     float64
	SwitchMs  float64
	Prompt    []int
}

// sloServer holds what deciding for a request needs.
type sloServer struct {
	em   *elastic.Model
	t    *tlm.TLM
	prof *slo.Profile
	rng  *rand.Rand
	// grid is the decision's model and prompt levels (the TLM's classes).
	grid []int
}

// decide runs the TLM on ids, picks a decision by strategy (tlm: the
// decision head with the runtime check; greedy; random; or a fixed one),
// switches level and compresses the prompt by the score head.
func (s *sloServer) decide(ids []int, tail int, o slo.SLO, strategy string, fixed *slo.Decision) (sloRun, error) {
	res, err := s.t.Run(ids, o.TTFT, o.TPOT)
	if err != nil {
		return sloRun{}, err
	}
	r := sloRun{Strategy: strategy, TLMMs: ms(res.Time), HeadModel: res.Model, HeadPrmpt: res.Prompt}
	req := slo.Request{N: len(ids), Tail: tail, SLO: o}
	switch strategy {
	case "tlm":
		r.Decision, r.FellBack, err = s.prof.Pick(req, res.Model, res.Prompt, s.grid, s.grid, s.rng)
	case "greedy", "random":
		var feas []slo.Decision
		if feas, err = s.prof.Feasible(req, s.grid, s.grid); err != nil {
			return sloRun{}, err
		}
		var ok bool
		if strategy == "greedy" {
			r.Decision, ok = slo.Greedy(feas)
		} else {
			r.Decision, ok = slo.Random(feas, s.rng)
		}
		if !ok {
			r.FellBack = true
			r.Decision, err = s.prof.Predict(req, s.grid[0], s.grid[0])
		}
	case "fixed":
		r.Decision = *fixed
	default:
		return sloRun{}, fmt.Errorf("strategy %q", strategy)
	}
	if err != nil {
		return sloRun{}, err
	}
	t0 := time.Now()
	if err := s.em.SetLevel(r.Decision.Model); err != nil {
		return sloRun{}, err
	}
	r.SwitchMs = ms(time.Since(t0))
	if r.Prompt, err = slo.Compress(ids, tail, res.Scores, r.Decision.Prompt); err != nil {
		return sloRun{}, err
	}
	return r, nil
}

// sloFlags are generate's --slo-* flags.
// openTLM opens the dual-head TLM in dir on the device and precision of
// the command's session flags.
func (lf *llmFlags) openTLM(dir string) (*tlm.TLM, error) {
	opts, err := lf.sf.options()
	if err != nil {
		return nil, err
	}
	return tlm.Open(dir, opts)
}

type sloFlags struct {
	ttft, tpot *float64
	tlmDir     *string
	profile    *string
	tail       *int
}

func addSLOFlags(fs *flag.FlagSet) *sloFlags {
	return &sloFlags{
		ttft:    fs.Float64("slo-ttft", 0, "elastic model: time-to-first-token objective as a fraction of the full model's (e.g. 0.4); with --slo-tpot the TLM picks the level and the prompt compression"),
		tpot:    fs.Float64("slo-tpot", 0, "elastic model: time-per-output-token objective as a fraction of the full model's (e.g. 0.7)"),
		tlmDir:  fs.String("tlm", "", "TLM folder for --slo-* (default: tlm/ beside the model)"),
		profile: fs.String("slo-profile", "", "latency profile for --slo-* (default: profile.json beside the model; tl elastic profile measures it)"),
		tail:    fs.Int("slo-keep-tail", 4, "prompt tokens at the end that compression never drops"),
	}
}

func (f *sloFlags) set() bool { return *f.ttft != 0 || *f.tpot != 0 }

// open checks the flags and opens the TLM and the profile.
func (f *sloFlags) open(st llmStepper, model string, opts engine.Options) (*sloServer, error) {
	if *f.ttft == 0 || *f.tpot == 0 {
		return nil, errors.New("give both --slo-ttft and --slo-tpot")
	}
	if err := (slo.SLO{TTFT: *f.ttft, TPOT: *f.tpot}).Check(); err != nil {
		return nil, err
	}
	if *f.tail < 0 {
		return nil, fmt.Errorf("--slo-keep-tail %d: want 0 or more", *f.tail)
	}
	dir := *f.tlmDir
	if dir == "" {
		dir = filepath.Join(modelDir(model), "tlm")
	}
	pp := *f.profile
	if pp == "" {
		pp = modelDir(model)
	}
	prof, err := slo.Load(pp)
	if err != nil {
		return nil, err
	}
	em, err := bindElastic(st, model, "")
	if err != nil {
		return nil, err
	}
	t, err := tlm.Open(dir, opts)
	if err != nil {
		return nil, err
	}
	// A first run builds the TLM's kernels, so that the TTFT breakdown
	// does not count compilation.
	if _, err := t.Run([]int{0, 1, 2}, 1, 1); err != nil {
		t.Close()
		return nil, err
	}
	for _, lv := range t.Meta.Grid {
		if _, err := prof.TTFT(1, lv); err != nil {
			t.Close()
			return nil, fmt.Errorf("the TLM's level %d%%: %w", lv, err)
		}
		if _, err := em.Spec.LevelOf(lv); err != nil {
			t.Close()
			return nil, fmt.Errorf("the TLM's level %d%%: %w", lv, err)
		}
	}
	return &sloServer{em: em, t: t, prof: prof, rng: rand.New(rand.NewSource(1)), grid: t.Meta.Grid}, nil
}

// readJSONL reads one JSON object per line into fn.
func readJSONL(path string, fn func(line []byte) error) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	n := 0
	for sc.Scan() {
		n++
		if len(strings.TrimSpace(sc.Text())) == 0 {
			continue
		}
		if err := fn(sc.Bytes()); err != nil {
			return fmt.Errorf("%s:%d: %w", path, n, err)
		}
	}
	return sc.Err()
}

// sloJSON is what tl generate reports of a request served under an SLO:
// the decision and the TTFT breakdown (TLM, switch, prefill), measured,
// next to the profile's prediction and the budgets.
type sloJSON struct {
	TTFT            float64 `json:"slo_ttft"`
	TPOT            float64 `json:"slo_tpot"`
	HeadModel       int     `json:"head_model_level"`
	HeadPrompt      int     `json:"head_prompt_level"`
	Model           int     `json:"model_level"`
	Prompt          int     `json:"prompt_level"`
	FellBack        bool    `json:"fell_back"`
	PromptTokens    int     `json:"prompt_tokens"`
	KeptTokens      int     `json:"kept_tokens"`
	TLMMs           float64 `json:"tlm_ms"`
	SwitchMs        float64 `json:"switch_ms"`
	PrefillMs       float64 `json:"prefill_ms"`
	TTFTMs          float64 `json:"ttft_ms"`
	TPOTMs          float64 `json:"tpot_ms"`
	PredictedTTFTMs float64 `json:"predicted_ttft_ms"`
	PredictedTPOTMs float64 `json:"predicted_tpot_ms"`
	BudgetTTFTMs    float64 `json:"budget_ttft_ms"`
	BudgetTPOTMs    float64 `json:"budget_tpot_ms"`
}

func (s *sloJSON) print() {
	fb := ""
	if s.FellBack {
		fb = fmt.Sprintf(" (the head picked model %d%%, prompt %d%%, which the profile says misses the SLO: a random feasible pick replaced it)", s.HeadModel, s.HeadPrompt)
	}
	fmt.Fprintf(statsOut, "slo: TTFT %.2f, TPOT %.2f of the full model's: model level %d%%, prompt level %d%% (%d of %d tokens kept)%s\n",
		s.TTFT, s.TPOT, s.Model, s.Prompt, s.KeptTokens, s.PromptTokens, fb)
	fmt.Fprintf(statsOut, "slo: TTFT %.1f ms = TLM %.1f + switch %.3f + prefill and first token %.1f (budget %.1f, predicted %.1f); TPOT %.1f ms (budget %.1f, predicted %.1f)\n",
		s.TTFTMs, s.TLMMs, s.SwitchMs, s.TTFTMs-s.TLMMs-s.SwitchMs, s.BudgetTTFTMs, s.PredictedTTFTMs, s.TPOTMs, s.BudgetTPOTMs, s.PredictedTPOTMs)
}

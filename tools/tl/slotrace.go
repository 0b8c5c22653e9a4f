package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"math/rand"
	"strconv"
	"strings"

	"github.com/tlite/tlite/engine/elastic/slo"
	"github.com/tlite/tlite/engine/generate"
)

// sloClasses are the trace's six SLO classes (spec §3b, Table 3), tightest
// first: class i+1 of Num(i) = N·e^{αi}/Σ e^{αk}.
var sloClasses = []slo.SLO{{TTFT: 0.2, TPOT: 0.5}, {TTFT: 0.2, TPOT: 0.6}, {TTFT: 0.4, TPOT: 0.7},
	{TTFT: 0.6, TPOT: 0.8}, {TTFT: 0.8, TPOT: 0.9}, {TTFT: 1.0, TPOT: 1.0}}

// gridItem is one evaluation item of models/elastic/tlm.py's grid: the
// prompt's ids, its tail, the candidates, the answer and whether the LM
// (PyTorch, the same sub-model and score-head compression) picks the answer
// at each "model,prompt" decision.
type gridItem struct {
	Task       string         `json:"task"`
	IDs        []int          `json:"ids"`
	Tail       int            `json:"tail"`
	Candidates [][]int        `json:"candidates"`
	Answer     int            `json:"answer"`
	Correct    map[string]int `json:"correct"`
}

func (g *gridItem) check(vocab int, grid []int) error {
	if len(g.IDs) < 2 || g.Tail < 0 || g.Tail >= len(g.IDs) {
		return fmt.Errorf("a prompt of %d tokens with a tail of %d", len(g.IDs), g.Tail)
	}
	if len(g.Candidates) < 2 || g.Answer < 0 || g.Answer >= len(g.Candidates) {
		return fmt.Errorf("%d candidates, answer %d", len(g.Candidates), g.Answer)
	}
	for _, c := range append([][]int{g.IDs}, g.Candidates...) {
		if len(c) == 0 {
			return fmt.Errorf("an empty candidate")
		}
		for _, id := range c {
			if id < 0 || id >= vocab {
				return fmt.Errorf("token %d outside the vocabulary of %d", id, vocab)
			}
		}
	}
	for _, m := range grid {
		for _, p := range grid {
			if _, ok := g.Correct[fmt.Sprintf("%d,%d", m, p)]; !ok {
				return fmt.Errorf("no grid entry %d,%d (run tlm.py grid)", m, p)
			}
		}
	}
	return nil
}

// classCounts splits n requests over the six classes by e^{αi}, largest
// remainders first, so that they sum to n.
func classCounts(n int, alpha float64) []int {
	w := make([]float64, len(sloClasses))
	var sum float64
	for i := range w {
		w[i] = math.Exp(alpha * float64(i+1))
		sum += w[i]
	}
	counts := make([]int, len(w))
	rem := make([]float64, len(w))
	left := n
	for i := range w {
		x := float64(n) * w[i] / sum
		counts[i] = int(x)
		rem[i] = x - float64(counts[i])
		left -= counts[i]
	}
	for ; left > 0; left-- {
		b := 0
		for i := range rem {
			if rem[i] > rem[b] {
				b = i
			}
		}
		counts[b]++
		rem[b] = -1
	}
	return counts
}

// traceRow is one request served by one strategy.
type traceRow struct {
	Alpha     float64 `json:"alpha"`
	Request   int     `json:"request"`
	Item      int     `json:"item"`
	Task      string  `json:"task"`
	Class     int     `json:"class"`
	SLOTTFT   float64 `json:"slo_ttft"`
	SLOTPOT   float64 `json:"slo_tpot"`
	Strategy  string  `json:"strategy"`
	Model     int     `json:"model_level"`
	Prompt    int     `json:"prompt_level"`
	FellBack  bool    `json:"fell_back"`
	N         int     `json:"prompt_tokens"`
	Kept      int     `json:"kept_tokens"`
	TLMMs     float64 `json:"tlm_ms"`
	SwitchMs  float64 `json:"switch_ms"`
	PrefillMs float64 `json:"prefill_ms"`
	TTFTMs    float64 `json:"ttft_ms"`
	TPOTMs    float64 `json:"tpot_ms"`
	BudgetTT  float64 `json:"budget_ttft_ms"`
	BudgetTP  float64 `json:"budget_tpot_ms"`
	Violated  bool    `json:"violated"`
	Correct   bool    `json:"correct"`
	Engine    *bool   `json:"engine_correct,omitempty"`
}

// traceSummary is one (α, strategy) cell.
type traceSummary struct {
	Alpha        float64 `json:"alpha"`
	Strategy     string  `json:"strategy"`
	Requests     int     `json:"requests"`
	Accuracy     float64 `json:"accuracy"`
	AccuracyRaw  float64 `json:"accuracy_ignoring_slo"`
	Violations   float64 `json:"violation_rate"`
	FellBack     int     `json:"fell_back"`
	MeanTTFTMs   float64 `json:"mean_ttft_ms"`
	MeanTPOTMs   float64 `json:"mean_tpot_ms"`
	MeanTLMMs    float64 `json:"mean_tlm_ms"`
	MeanModel    float64 `json:"mean_model_level"`
	MeanPrompt   float64 `json:"mean_prompt_level"`
	EngineAgrees string  `json:"engine_agreement,omitempty"`
}

// elasticTrace serves a trace of requests with SLOs by each strategy and
// reports accuracy with violated requests counted wrong, from measured
// TTFT and TPOT.
func elasticTrace(args []string) error {
	fs := flag.NewFlagSet("elastic trace", flag.ContinueOnError)
	lf := addLLMFlags(fs)
	tlmDir := fs.String("tlm", "", "TLM folder (default: tlm/ beside the model)")
	gridPath := fs.String("grid", "", "evaluation items with their decision grid (tlm.py grid --split eval)")
	profPath := fs.String("slo-profile", "", "latency profile (default: profile.json beside the model)")
	alphas := fs.String("alpha", "-0.25,0,0.25", "trace skews α (Num(i) ∝ e^{αi}, i = 1 the tightest class)")
	nReq := fs.Int("requests", 30, "requests per trace")
	strategies := fs.String("strategies", "tlm,greedy,random,oracle", "who decides: tlm (decision head + runtime check), greedy (largest feasible model, then prompt), random (random feasible), oracle (lightest feasible decision the grid says is right)")
	decode := fs.Int("decode", 4, "decode steps per request (TPOT is their mean)")
	check := fs.Int("check", 0, "score this many runs' candidates through the engine too and report agreement with the grid")
	seed := fs.Int64("seed", 1, "trace seed")
	out := fs.String("out", "", "write every request and the summary as JSON here")
	flags, pos := splitArgs(args, llmValued("tlm", "grid", "slo-profile", "alpha", "requests", "strategies", "decode", "check", "seed", "out"))
	if err := fs.Parse(flags); err != nil {
		return err
	}
	model, err := lf.modelPath(pos)
	if err != nil {
		return err
	}
	if *gridPath == "" {
		return fmt.Errorf("tl elastic trace: give --grid (tlm.py grid --split eval writes it)")
	}
	var as []float64
	for _, f := range strings.Split(*alphas, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || math.IsNaN(v) || math.Abs(v) > 10 {
			return fmt.Errorf("--alpha %q: want numbers in [-10, 10], comma-separated", *alphas)
		}
		as = append(as, v)
	}
	strats := strings.Split(*strategies, ",")
	for _, s := range strats {
		switch s {
		case "tlm", "greedy", "random", "oracle":
		default:
			return fmt.Errorf("--strategies: %q is not tlm, greedy, random or oracle", s)
		}
	}
	if *nReq < 1 || *decode < 1 || *check < 0 {
		return fmt.Errorf("--requests %d, --decode %d, --check %d: want positive counts", *nReq, *decode, *check)
	}
	st, err := lf.openStepper(model, 0, generate.Config{LastOnly: true})
	if err != nil {
		return err
	}
	defer st.Close()
	sf := &sloFlags{ttft: new(float64), tpot: new(float64), tlmDir: tlmDir, profile: profPath, tail: new(int)}
	*sf.ttft, *sf.tpot = 1, 1
	opts, err := lf.sf.options()
	if err != nil {
		return err
	}
	srv, err := sf.open(st, model, opts)
	if err != nil {
		return err
	}
	defer srv.t.Close()
	var items []gridItem
	err = readJSONL(*gridPath, func(line []byte) error {
		var it gridItem
		if err := json.Unmarshal(line, &it); err != nil {
			return err
		}
		if err := it.check(st.Vocab(), srv.grid); err != nil {
			return err
		}
		if n := len(it.IDs) + *decode + maxLen(it.Candidates); n > st.MaxContext() {
			return fmt.Errorf("a prompt of %d tokens does not fit the context of %d", len(it.IDs), st.MaxContext())
		}
		items = append(items, it)
		return nil
	})
	if err != nil {
		return err
	}
	if len(items) == 0 {
		return fmt.Errorf("%s: no items", *gridPath)
	}
	srv.rng = rand.New(rand.NewSource(*seed))
	if err := warmUp(st); err != nil {
		return err
	}
	var rows []traceRow
	var sums []traceSummary
	checked := 0
	for _, alpha := range as {
		rng := rand.New(rand.NewSource(*seed))
		var classes []int
		for c, n := range classCounts(*nReq, alpha) {
			for k := 0; k < n; k++ {
				classes = append(classes, c)
			}
		}
		rng.Shuffle(len(classes), func(i, j int) { classes[i], classes[j] = classes[j], classes[i] })
		perm := rng.Perm(len(items))
		cells := map[string]*traceSummary{}
		agree := map[string][2]int{}
		for r, c := range classes {
			idx := perm[r%len(perm)]
			it := &items[idx]
			o := sloClasses[c]
			req := slo.Request{N: len(it.IDs), Tail: it.Tail, SLO: o}
			bt, bp, err := srv.prof.Budget(req)
			if err != nil {
				return err
			}
			for _, s := range strats {
				var fixed *slo.Decision
				name, oracleFellBack := s, false
				if s == "oracle" {
					d, fb, err := oracle(srv.prof, req, it, srv.grid)
					if err != nil {
						return err
					}
					fixed, name, oracleFellBack = &d, "fixed", fb
				}
				run, err := srv.decide(it.IDs, it.Tail, o, name, fixed)
				if err != nil {
					return err
				}
				run.FellBack = run.FellBack || oracleFellBack
				pre, last, err := timedPrefill(st, run.Prompt)
				if err != nil {
					return err
				}
				step, err := timedDecode(st, last, len(run.Prompt), *decode)
				if err != nil {
					return err
				}
				row := traceRow{Alpha: alpha, Request: r, Item: idx, Task: it.Task, Class: c + 1, SLOTTFT: o.TTFT, SLOTPOT: o.TPOT,
					Strategy: s, Model: run.Decision.Model, Prompt: run.Decision.Prompt, FellBack: run.FellBack,
					N: len(it.IDs), Kept: len(run.Prompt), TLMMs: run.TLMMs, SwitchMs: run.SwitchMs, PrefillMs: ms(pre),
					TPOTMs: ms(step), BudgetTT: bt, BudgetTP: bp}
				row.TTFTMs = row.TLMMs + row.SwitchMs + row.PrefillMs
				row.Violated = row.TTFTMs > bt || row.TPOTMs > bp
				row.Correct = it.Correct[fmt.Sprintf("%d,%d", row.Model, row.Prompt)] == 1
				if checked < *check {
					checked++
					pick, err := engineChoose(st, run.Prompt, it.Candidates)
					if err != nil {
						return err
					}
					ok := pick == it.Answer
					row.Engine = &ok
					a := agree[s]
					a[1]++
					if ok == row.Correct {
						a[0]++
					}
					agree[s] = a
				}
				rows = append(rows, row)
				cell := cells[s]
				if cell == nil {
					cell = &traceSummary{Alpha: alpha, Strategy: s}
					cells[s] = cell
				}
				cell.add(row)
			}
		}
		for _, s := range strats {
			cell := cells[s]
			cell.finish()
			if a, ok := agree[s]; ok {
				cell.EngineAgrees = fmt.Sprintf("%d/%d", a[0], a[1])
			}
			sums = append(sums, *cell)
		}
	}
	t := newTable("alpha", "strategy", "requests", "accuracy", "acc. ignoring SLO", "violations", "fell back", "TTFT ms", "TPOT ms", "TLM ms", "model", "prompt").alignRight(0, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11)
	for _, c := range sums {
		t.add(fmt.Sprintf("%+.2f", c.Alpha), c.Strategy, strconv.Itoa(c.Requests), fmt.Sprintf("%.3f", c.Accuracy), fmt.Sprintf("%.3f", c.AccuracyRaw),
			fmt.Sprintf("%.3f", c.Violations), strconv.Itoa(c.FellBack), fmt.Sprintf("%.1f", c.MeanTTFTMs), fmt.Sprintf("%.1f", c.MeanTPOTMs),
			fmt.Sprintf("%.1f", c.MeanTLMMs), fmt.Sprintf("%.0f", c.MeanModel), fmt.Sprintf("%.0f", c.MeanPrompt))
	}
	t.write(stdout)
	fmt.Fprintf(stdout, "load average %.1f at the end; SLO budgets from %s\n", loadAverage(), srv.prof.Device)
	if *out != "" {
		return writeJSONFile(*out, map[string]any{"model": model, "grid": *gridPath, "summary": sums, "requests": rows,
			"profile": srv.prof, "notes": []string{
				"requests are served one at a time (no queueing): the Poisson arrival times of the papers do not change a request's own TTFT/TPOT here",
				"correct = the grid's PyTorch answer at the decision (same sub-model, same score-head compression); engine_correct, where present, is the engine's own scoring",
				"a request whose measured TTFT or TPOT exceeds its budget counts as wrong in accuracy"}})
	}
	return nil
}

func maxLen(v [][]int) int {
	m := 0
	for _, x := range v {
		if len(x) > m {
			m = len(x)
		}
	}
	return m
}

func (c *traceSummary) add(r traceRow) {
	c.Requests++
	if r.Correct && !r.Violated {
		c.Accuracy++
	}
	if r.Correct {
		c.AccuracyRaw++
	}
	if r.Violated {
		c.Violations++
	}
	if r.FellBack {
		c.FellBack++
	}
	c.MeanTTFTMs += r.TTFTMs
	c.MeanTPOTMs += r.TPOTMs
	c.MeanTLMMs += r.TLMMs
	c.MeanModel += float64(r.Model)
	c.MeanPrompt += float64(r.Prompt)
}

func (c *traceSummary) finish() {
	n := float64(c.Requests)
	for _, p := range []*float64{&c.Accuracy, &c.AccuracyRaw, &c.Violations, &c.MeanTTFTMs, &c.MeanTPOTMs, &c.MeanTLMMs, &c.MeanModel, &c.MeanPrompt} {
		*p /= n
	}
}

// oracle is the lightest feasible decision the grid says answers right;
// with none right the greedy one; with none feasible the lightest of all
// (fellBack, as for the other strategies).
func oracle(p *slo.Profile, r slo.Request, it *gridItem, grid []int) (d slo.Decision, fellBack bool, err error) {
	feas, err := p.Feasible(r, grid, grid)
	if err != nil {
		return slo.Decision{}, false, err
	}
	for _, d := range feas {
		if it.Correct[fmt.Sprintf("%d,%d", d.Model, d.Prompt)] == 1 {
			return d, false, nil
		}
	}
	if d, ok := slo.Greedy(feas); ok {
		return d, false, nil
	}
	d, err = p.Predict(r, grid[0], grid[0])
	return d, true, err
}

// engineChoose scores each candidate's summed log-likelihood after prompt
// through the engine (at the current level) and returns the best.
func engineChoose(st generate.Stepper, prompt []int, cands [][]int) (int, error) {
	best, bestScore := 0, math.Inf(-1)
	v := st.Vocab()
	for k, c := range cands {
		_, last, err := timedPrefill(st, prompt)
		if err != nil {
			return 0, err
		}
		var s float64
		for j, tok := range c {
			s += generate.LogProb(last[len(last)-v:], tok)
			if j+1 < len(c) {
				if last, err = st.Step([]int{tok}, []int{len(prompt) + j}); err != nil {
					return 0, err
				}
			}
		}
		if s > bestScore {
			best, bestScore = k, s
		}
	}
	return best, nil
}

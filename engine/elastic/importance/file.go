package importance

import (
	"encoding/json"
	"fmt"

	"github.com/tlite/tlite/engine/atomicfile"
)

// Write stores s as JSON at path atomically: a temporary file in the same
// folder renamed over path, so a failed write leaves no partial file.
func Write(path string, s *Scores) error {
	raw, err := json.MarshalIndent(s, "", " ")
	if err != nil {
		return fmt.Errorf("importance: %w", err)
	}
	if err := atomicfile.WriteFile(path, append(raw, '\n'), 0o644); err != nil {
		return fmt.Errorf("importance: %w", err)
	}
	return nil
}

// Windows cuts a token stream into consecutive windows of seq tokens, at
// most max of them (max ≤ 0: as many as fit); a shorter tail is dropped.
func Windows(tokens []int, seq, max int) ([][]int, error) {
	if seq < 2 {
		return nil, fmt.Errorf("importance: window length %d; want ≥ 2", seq)
	}
	n := len(tokens) / seq
	if max > 0 && n > max {
		n = max
	}
	if n == 0 {
		return nil, fmt.Errorf("importance: %d calibration tokens, fewer than one window of %d", len(tokens), seq)
	}
	out := make([][]int, n)
	for i := range out {
		out[i] = tokens[i*seq : (i+1)*seq]
	}
	return out, nil
}

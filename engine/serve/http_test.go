package serve

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/tlite/tlite/engine/serve/api"
)

func newTestServer(t *testing.T, cfg Config) (*Service, *httptest.Server) {
	t.Helper()
	return newTestServerStore(t, cfg, "lmk")
}

// newTestServerStore is newTestServer with the named store (testStores).
func newTestServerStore(t *testing.T, cfg Config, store string) (*Service, *httptest.Server) {
	t.Helper()
	s := newTestServiceStore(t, "", cfg, store)
	srv := httptest.NewServer(s.Handler(4096))
	t.Cleanup(srv.Close)
	return s, srv
}

// do sends a request and returns the status and the body.
func do(t *testing.T, method, url, body string, hdr ...string) (int, []byte, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b, resp.Header
}

func create(t *testing.T, base, system string) string {
	t.Helper()
	code, b, _ := do(t, "POST", base+"/v1/contexts", `{"system": "`+system+`"}`)
	var c api.Created
	if code != 201 || json.Unmarshal(b, &c) != nil || !validID(c.ID) {
		t.Fatalf("create: %d %s", code, b)
	}
	return c.ID
}

// TestAPI: status codes and JSON shapes of every endpoint, and that no
// refused request changes the context it names, with each store.
func TestAPI(t *testing.T) {
	for _, store := range testStores {
		t.Run(store, func(t *testing.T) { testAPI(t, store) })
	}
}

func testAPI(t *testing.T, store string) {
	s, srv := newTestServerStore(t, Config{AppContexts: 3}, store)
	base := srv.URL
	id := create(t, base, "Fortune:")
	ctxURL := base + "/v1/contexts/" + id
	long := strings.Repeat(" word", 200)
	cases := []struct {
		name, method, path, body string
		hdr                      []string
		code                     int
		// keys the JSON reply must have, or the error must contain
		keys []string
		err  string
	}{
		{"call", "POST", ctxURL + "/call", `{"prompt": " The cat", "max_tokens": 4}`, nil, 200, []string{"text", "tokens", "timings", "finish_reason"}, ""},
		{"call sampled", "POST", ctxURL + "/call", `{"prompt": " A", "max_tokens": 3, "temperature": 0.8, "top_p": 0.9, "seed": 7, "stop": ["zz"]}`, nil, 200, []string{"text", "seed"}, ""},
		{"info", "GET", ctxURL, "", nil, 200, []string{"tokens", "window_tokens", "last_use", "store", "calls"}, ""},
		{"info with history", "GET", ctxURL + "?history=true", "", nil, 200, []string{"tokens", "history", "text"}, ""},
		{"info, bad history", "GET", ctxURL + "?history=yes", "", nil, 400, nil, "history"},
		{"stats", "GET", base + "/v1/stats", "", nil, 200, []string{"store", "contexts", "kv_budget_bytes", "counters"}, ""},
		{"list", "GET", base + "/v1/contexts", "", nil, 200, []string{"ids"}, ""},
		{"unknown context", "POST", base + "/v1/contexts/0123456789abcdef/call", `{"prompt": "x"}`, nil, 404, nil, "unknown context"},
		{"not an id", "GET", base + "/v1/contexts/..%2fetc", "", nil, 404, nil, "unknown context"},
		{"bad JSON", "POST", ctxURL + "/call", `{"prompt": `, nil, 400, nil, "bad JSON"},
		{"two values", "POST", ctxURL + "/call", `{"prompt": "a"} {}`, nil, 400, nil, "more than one value"},
		{"unknown field", "POST", ctxURL + "/call", `{"promt": "a"}`, nil, 400, nil, "unknown field"},
		{"wrong type", "POST", ctxURL + "/call", `{"prompt": 3}`, nil, 400, nil, "bad JSON"},
		{"empty body", "POST", ctxURL + "/call", ``, nil, 400, nil, "empty body"},
		{"too long", "POST", ctxURL + "/call", `{"prompt": "` + long + `"}`, nil, 400, nil, "longer than the context limit"},
		{"max_tokens 0", "POST", ctxURL + "/call", `{"prompt": "a", "max_tokens": 0}`, nil, 400, nil, "max_tokens"},
		{"temperature", "POST", ctxURL + "/call", `{"prompt": "a", "temperature": -1}`, nil, 400, nil, "temperature"},
		{"top_p", "POST", ctxURL + "/call", `{"prompt": "a", "top_p": 2}`, nil, 400, nil, "top-p"},
		{"empty stop", "POST", ctxURL + "/call", `{"prompt": "a", "stop": [""]}`, nil, 400, nil, "stop"},
		{"body too large", "POST", ctxURL + "/call", `{"prompt": "` + strings.Repeat("a", 5000) + `"}`, nil, 413, nil, "larger than"},
		{"form body", "POST", ctxURL + "/call", `prompt=a`, []string{"Content-Type", "application/x-www-form-urlencoded"}, 400, nil, "bad JSON"},
		{"method", "GET", ctxURL + "/call", "", nil, 405, nil, "not allowed"},
		{"no endpoint", "GET", base + "/v2/x", "", nil, 404, nil, "no such endpoint"},
		{"chat stateless", "POST", base + "/v1/chat/completions", `{"model": "x", "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}], "max_tokens": 4, "n": 1}`, nil, 200, []string{"id", "object", "choices", "usage"}, ""},
		{"chat, one stop string", "POST", base + "/v1/chat/completions", `{"messages": [{"role": "user", "content": "Hi"}], "max_completion_tokens": 2, "stop": "."}`, nil, 200, []string{"choices"}, ""},
		{"chat n=2", "POST", base + "/v1/chat/completions", `{"messages": [{"role": "user", "content": "Hi"}], "n": 2}`, nil, 400, nil, "one choice"},
		{"stop not strings", "POST", ctxURL + "/call", `{"prompt": "a", "stop": 3}`, nil, 400, nil, "stop"},
		{"models", "GET", base + "/v1/models", "", nil, 200, []string{"object", "data"}, ""},
		{"chat bad role", "POST", base + "/v1/chat/completions", `{"messages": [{"role": "tool", "content": "x"}]}`, nil, 400, nil, "role"},
		{"chat no messages", "POST", base + "/v1/chat/completions", `{"messages": []}`, nil, 400, nil, "no messages"},
		{"chat unknown context", "POST", base + "/v1/chat/completions", `{"messages": [{"role": "user", "content": "x"}]}`, []string{ContextHeader, "0123456789abcdef"}, 404, nil, "unknown context"},
		{"chat bound, no user message", "POST", base + "/v1/chat/completions", `{"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]}`, []string{ContextHeader, id}, 400, nil, "no user message"},
		{"system too long", "POST", base + "/v1/contexts", `{"system": "` + long + `"}`, nil, 400, nil, "system prompt"},
	}
	var file []byte
	var hist []int
	for _, c := range cases {
		if c.code >= 400 && file == nil {
			file, _ = os.ReadFile(s.disk.path(id))
			hist, _ = s.History(id)
		}
		code, b, hdr := do(t, c.method, c.path, c.body, c.hdr...)
		if code != c.code {
			t.Errorf("%s: status %d, want %d (%s)", c.name, code, c.code, b)
			continue
		}
		if ct := hdr.Get("Content-Type"); ct != "application/json" {
			t.Errorf("%s: Content-Type %q", c.name, ct)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Errorf("%s: reply is not a JSON object: %s", c.name, b)
			continue
		}
		for _, k := range c.keys {
			if _, ok := m[k]; !ok {
				t.Errorf("%s: reply %s has no %q", c.name, b, k)
			}
		}
		if c.err != "" {
			if e, _ := m["error"].(string); !strings.Contains(e, c.err) || len(m) != 1 {
				t.Errorf("%s: reply %s, want only an error containing %q", c.name, b, c.err)
			}
		}
	}
	if got, _ := os.ReadFile(s.disk.path(id)); !bytes.Equal(got, file) {
		t.Error("refused requests changed the context's file")
	}
	if got, _ := s.History(id); !slices.Equal(got, hist) {
		t.Error("refused requests changed the context's history")
	}
	if n := len(s.IDs()); n != 1 {
		t.Errorf("%d contexts after the table; the stateless chat must leave none behind", n)
	}
	// The timings of a call.
	code, b, _ := do(t, "POST", ctxURL+"/call", `{"prompt": " more", "max_tokens": 3}`)
	var rep api.Reply
	if code != 200 || json.Unmarshal(b, &rep) != nil || rep.Tokens < 1 || rep.Timings.DecodeMs < 0 || rep.Timings.PrefillMs <= 0 {
		t.Errorf("call: %d %s", code, b)
	}
	// Bound chat extends its context.
	before, _ := s.History(id)
	code, b, _ = do(t, "POST", base+"/v1/chat/completions", `{"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 3}`, ContextHeader, id)
	var cr api.ChatResponse
	if code != 200 || json.Unmarshal(b, &cr) != nil || len(cr.Choices) != 1 || cr.Choices[0].Message == nil || cr.Choices[0].Message.Role != "assistant" || cr.Object != "chat.completion" {
		t.Fatalf("bound chat: %d %s", code, b)
	}
	after, _ := s.History(id)
	if len(after) <= len(before) || !slices.Equal(after[:len(before)], before) {
		t.Errorf("bound chat: history %d -> %d tokens, want it extended", len(before), len(after))
	}
	// The per-app limit K (3): contexts of app "b" do not count.
	create(t, base, "b")
	create(t, base, "c")
	if code, b, _ := do(t, "POST", base+"/v1/contexts", `{}`); code != 409 || !strings.Contains(string(b), "limit") {
		t.Errorf("fourth context with K=3: %d %s", code, b)
	}
	if code, _, _ := do(t, "POST", base+"/v1/contexts", `{}`, AppHeader, "other"); code != 201 {
		t.Errorf("another app's context: %d", code)
	}
	// Delete.
	if code, b, _ := do(t, "DELETE", ctxURL, ""); code != 204 || len(b) != 0 {
		t.Errorf("delete: %d %s", code, b)
	}
	if code, _, _ := do(t, "GET", ctxURL, ""); code != 404 {
		t.Errorf("get after delete: %d", code)
	}
	if code, _, _ := do(t, "DELETE", ctxURL, ""); code != 404 {
		t.Errorf("second delete: %d", code)
	}
}

// sseEvent is one server-sent event.
type sseEvent struct{ event, data string }

func readSSE(t *testing.T, r io.Reader) []sseEvent {
	t.Helper()
	var out []sseEvent
	var cur sseEvent
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur.data == "" {
				t.Errorf("an event with no data: %+v", cur)
			}
			out = append(out, cur)
			cur = sseEvent{}
		case strings.HasPrefix(line, "event: "):
			cur.event = line[len("event: "):]
		case strings.HasPrefix(line, "data: "):
			if cur.data != "" {
				t.Errorf("two data lines in one event")
			}
			cur.data = line[len("data: "):]
		default:
			t.Errorf("a line that is not SSE framing: %q", line)
		}
	}
	if cur != (sseEvent{}) {
		t.Errorf("the stream ended inside an event: %+v", cur)
	}
	return out
}

// TestStreaming: a streamed call sends token events whose text is the
// reply's, then one done event, and generates what the same call without
// streaming does; the chat stream ends with [DONE].
func TestStreaming(t *testing.T) {
	_, srv := newTestServer(t, Config{})
	a, b := create(t, srv.URL, "Fortune:"), create(t, srv.URL, "Fortune:")
	resp, err := http.Post(srv.URL+"/v1/contexts/"+a+"/call", "application/json", strings.NewReader(`{"prompt": " The cat", "max_tokens": 12, "stream": true}`))
	if err != nil {
		t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("Content-Type %q", ct)
	}
	evs := readSSE(t, resp.Body)
	resp.Body.Close()
	if len(evs) < 2 || evs[len(evs)-1].event != "done" {
		t.Fatalf("events %+v: want tokens then done", evs)
	}
	var text strings.Builder
	for _, e := range evs[:len(evs)-1] {
		var p api.Piece
		if e.event != "token" || json.Unmarshal([]byte(e.data), &p) != nil || p.Text == "" {
			t.Errorf("event %+v: want a token event with text", e)
		}
		text.WriteString(p.Text)
	}
	var done api.Reply
	if err := json.Unmarshal([]byte(evs[len(evs)-1].data), &done); err != nil {
		t.Fatal(err)
	}
	if done.Text != text.String() {
		t.Errorf("done says %q, the tokens say %q", done.Text, text.String())
	}
	code, body, _ := do(t, "POST", srv.URL+"/v1/contexts/"+b+"/call", `{"prompt": " The cat", "max_tokens": 12}`)
	var plain api.Reply
	if code != 200 || json.Unmarshal(body, &plain) != nil || plain.Text != done.Text {
		t.Errorf("without streaming: %d %s; streamed %q", code, body, done.Text)
	}

	resp, err = http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 6, "stream": true}`))
	if err != nil {
		t.Fatal(err)
	}
	evs = readSSE(t, resp.Body)
	resp.Body.Close()
	if len(evs) < 2 || evs[len(evs)-1].data != "[DONE]" {
		t.Fatalf("chat events %+v: want chunks then [DONE]", evs)
	}
	var last api.ChatResponse
	if err := json.Unmarshal([]byte(evs[len(evs)-2].data), &last); err != nil || last.Object != "chat.completion.chunk" || len(last.Choices) != 1 || last.Choices[0].FinishReason == nil {
		t.Errorf("last chunk %s: want a chat.completion.chunk with a finish_reason", evs[len(evs)-2].data)
	}
}

// TestDisconnectCommitsNothing: a streaming client that goes away after
// the first token leaves its context as it was.
func TestDisconnectCommitsNothing(t *testing.T) {
	for _, store := range testStores {
		t.Run(store, func(t *testing.T) { testDisconnect(t, store) })
	}
}

func testDisconnect(t *testing.T, store string) {
	s, srv := newTestServerStore(t, Config{}, store)
	id := create(t, srv.URL, "Fortune:")
	hist, _ := s.History(id)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+"/v1/contexts/"+id+"/call", strings.NewReader(`{"prompt": " Once upon a time", "max_tokens": 60, "stream": true, "stop": ["never-appears"]}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "event: token") {
		t.Fatalf("first line %q, %v", line, err)
	}
	cancel()
	resp.Body.Close()
	// The call ends (cancelled) before the next job runs: an info request
	// goes through the same queue.
	info, err := s.Info(id)
	if err != nil {
		t.Fatal(err)
	}
	if info.Calls != 0 || info.Tokens != len(hist) {
		t.Errorf("after the client went away: %d calls, %d tokens; want 0 and %d", info.Calls, info.Tokens, len(hist))
	}
	if c := s.Stats().Counters; c.CancelledCalls != 1 {
		t.Errorf("counters %+v: want one cancelled call", c)
	}
	code, b, _ := do(t, "POST", srv.URL+"/v1/contexts/"+id+"/call", `{"prompt": " Once", "max_tokens": 3}`)
	if code != 200 {
		t.Errorf("next call: %d %s", code, b)
	}
}

// TestConcurrentCalls: parallel calls on different contexts and on one
// context all complete; the shared context's calls were serialised (its
// history is the sum of every call, with none lost or interleaved).
func TestConcurrentCalls(t *testing.T) {
	for _, store := range testStores {
		t.Run(store, func(t *testing.T) { testConcurrent(t, store) })
	}
}

func testConcurrent(t *testing.T, store string) {
	s, srv := newTestServerStore(t, Config{}, store)
	shared := create(t, srv.URL, "S")
	others := []string{create(t, srv.URL, "A"), create(t, srv.URL, "B")}
	start, _ := s.History(shared)
	var wg sync.WaitGroup
	var mu sync.Mutex
	added := 0
	var replies []api.Reply
	call := func(id string, n int) {
		defer wg.Done()
		code, b, _ := do(t, "POST", srv.URL+"/v1/contexts/"+id+"/call", `{"prompt": " go", "max_tokens": 3}`)
		var r api.Reply
		if code != 200 || json.Unmarshal(b, &r) != nil {
			t.Errorf("call on %s: %d %s", id, code, b)
			return
		}
		if id == shared {
			mu.Lock()
			added += n + r.Tokens
			replies = append(replies, r)
			mu.Unlock()
		}
	}
	go1, _ := s.encodePrompt(" go")
	for range 3 {
		wg.Add(1)
		go call(shared, len(go1))
		for _, id := range others {
			wg.Add(1)
			go call(id, len(go1))
		}
	}
	wg.Wait()
	h, _ := s.History(shared)
	if len(h) != len(start)+added {
		t.Errorf("shared context: %d tokens, want %d + %d from the 3 calls", len(h), len(start), added)
	}
	seen := map[int]bool{}
	for _, r := range replies {
		seen[r.ContextTokens] = true
	}
	if len(seen) != 3 {
		t.Errorf("the shared context's calls saw lengths %v: each call should see the one before it", seen)
	}
	for _, id := range others {
		if info, _ := s.Info(id); info.Calls != 3 {
			t.Errorf("context %s: %d calls, want 3", id, info.Calls)
		}
	}
}

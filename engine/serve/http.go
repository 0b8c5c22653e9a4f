package serve

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"strings"
	"time"

	"github.com/tlite/tlite/engine/serve/api"
	"github.com/tlite/tlite/engine/tokenizer"
)

// DefaultMaxBody caps a request body (1 MiB): a larger one gets 413.
const DefaultMaxBody = 1 << 20

// AppHeader names the app a request comes from (the paper's
// bindLLMService(app)); K, Config.AppContexts, counts contexts per app.
// Without it the app is "default".
const AppHeader = "X-App-Id"

// StreamStall is how long one server-sent event may take to write before
// the streaming call is cancelled.
var StreamStall = 10 * time.Second

// ContextHeader binds a chat completion to a context.
const ContextHeader = "X-Context-Id"

// Handler serves the HTTP/JSON API:
//
//	POST   /v1/contexts              {"system"} -> 201 {"id"}             [newLLMCtx]
//	POST   /v1/contexts/{id}/call    {"prompt", "max_tokens", "temperature", "top_p", "seed", "stop", "stream"}
//	                                 -> {"text", "tokens", "timings": {"switch_ms", "prefill_ms", "decode_ms", ...}}
//	                                 ("stream": true: server-sent events "token" {"text"}, then "done" with the
//	                                 reply, or "error" {"error"})                                        [callLLM]
//	DELETE /v1/contexts/{id}         -> 204                               [delLLMCtx]
//	GET    /v1/contexts/{id}         token counts, the store's view of the context, last use; ?history=true adds the token ids
//	GET    /v1/contexts              the ids of the caller's app
//	GET    /v1/stats                 the service's and the store's figures
//	POST   /v1/chat/completions      OpenAI-style; stateless unless the X-Context-Id header names a context
//	GET    /v1/models                OpenAI-style list of the one model
//
// GET /v1/contexts/{id} and /v1/stats ask the store on the model's one
// worker, so they answer after the call running now. Any app may name any
// context by its id (64 random bits); X-App-Id only counts contexts
// against K.
//
// Errors are 4xx (or 5xx for the server's own failures) with {"error":
// "..."}, and a refused request changes nothing. Bodies over maxBody
// bytes (0: DefaultMaxBody) get 413.
//
// Chat template: the models here have none, so messages are rendered as
// "User: <content>\n" and "Assistant: <content>\n" lines followed by
// "Assistant:", with system messages as the context's system prompt
// (stateless) and "\nUser:" added to the stop strings. Bound to a context,
// only the messages after the last assistant message are appended (the
// context holds the earlier turns); its system messages are ignored.
func (s *Service) Handler(maxBody int64) http.Handler {
	if maxBody <= 0 {
		maxBody = DefaultMaxBody
	}
	h := &handler{s: s, maxBody: maxBody}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/contexts", h.create)
	mux.HandleFunc("GET /v1/contexts", h.list)
	mux.HandleFunc("POST /v1/contexts/{id}/call", h.call)
	mux.HandleFunc("DELETE /v1/contexts/{id}", h.del)
	mux.HandleFunc("GET /v1/contexts/{id}", h.info)
	mux.HandleFunc("GET /v1/stats", h.stats)
	mux.HandleFunc("POST /v1/chat/completions", h.chat)
	mux.HandleFunc("GET /v1/models", h.models)
	// The same paths with another method: 405 with a JSON error (the
	// mux's own 405 is plain text).
	for path, allow := range map[string]string{"/v1/contexts": "GET, POST", "/v1/contexts/{id}/call": "POST", "/v1/contexts/{id}": "GET, DELETE",
		"/v1/stats": "GET", "/v1/chat/completions": "POST", "/v1/models": "GET"} {
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", allow)
			writeError(w, http.StatusMethodNotAllowed, fmt.Sprintf("%s %s: method not allowed (allowed: %s)", r.Method, r.URL.Path, allow))
		})
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no such endpoint: %s %s (see GET /v1/stats, POST /v1/contexts)", r.Method, r.URL.Path))
	})
	return mux
}

type handler struct {
	s       *Service
	maxBody int64
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, api.Error{Error: msg})
}

// statusOf maps the service's errors to HTTP status codes.
func statusOf(err error) int {
	switch {
	case errors.Is(err, ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, ErrBadRequest):
		return http.StatusBadRequest
	case errors.Is(err, ErrLimit):
		return http.StatusConflict
	case errors.Is(err, ErrClosed), errors.Is(err, ErrBusy):
		return http.StatusServiceUnavailable
	case errors.Is(err, ErrCancelled):
		return 499 // the client closed the request; nobody reads it
	}
	return http.StatusInternalServerError
}

func fail(w http.ResponseWriter, err error) {
	code := statusOf(err)
	if code == http.StatusInternalServerError {
		log.Printf("serve: %v", err)
	}
	writeError(w, code, err.Error())
}

// decodeBody reads r's JSON body into v: at most maxBody bytes, one JSON
// value, unknown fields refused when strict.
func (h *handler) decodeBody(w http.ResponseWriter, r *http.Request, v any, strict bool) bool {
	// The Content-Type is not checked: the body must be JSON whatever it
	// says (curl -d says form data).
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.maxBody))
	if err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body larger than %d bytes", h.maxBody))
		} else {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("reading the body: %v", err))
		}
		return false
	}
	if len(bytes.TrimSpace(body)) == 0 {
		writeError(w, http.StatusBadRequest, "empty body: want a JSON object")
		return false
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if strict {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(v); err != nil {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("bad JSON: %v", err))
		return false
	}
	if dec.More() {
		writeError(w, http.StatusBadRequest, "bad JSON: more than one value in the body")
		return false
	}
	return true
}

func appOf(r *http.Request) string {
	if a := r.Header.Get(AppHeader); a != "" {
		return a
	}
	return "default"
}

// pathID returns the {id} of the path, answering 404 for one that cannot
// be an id.
func pathID(w http.ResponseWriter, r *http.Request) (string, bool) {
	id := r.PathValue("id")
	if !validID(id) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("%v %q", ErrNotFound, id))
		return "", false
	}
	return id, true
}

func (h *handler) create(w http.ResponseWriter, r *http.Request) {
	var req api.NewContext
	if !h.decodeBody(w, r, &req, true) {
		return
	}
	id, err := h.s.NewContext(appOf(r), req.System)
	if err != nil {
		fail(w, err)
		return
	}
	w.Header().Set("Location", "/v1/contexts/"+id)
	writeJSON(w, http.StatusCreated, api.Created{ID: id})
}

func (h *handler) list(w http.ResponseWriter, r *http.Request) {
	app := appOf(r)
	ids := []string{}
	for _, id := range h.s.IDs() {
		if info, err := h.s.infoNoStore(id); err == nil && info.App == app {
			ids = append(ids, id)
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"app": app, "ids": ids})
}

func (h *handler) info(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	info, err := h.s.Info(id)
	if err != nil {
		fail(w, err)
		return
	}
	switch q := r.URL.Query().Get("history"); q {
	case "", "false", "0":
	case "true", "1":
		if info.History, err = h.s.History(id); err != nil {
			fail(w, err)
			return
		}
		info.Text = h.s.tok.DecodeWith(info.History, tokenizer.DecodeOptions{SkipSpecial: true})
	default:
		fail(w, badRequest("history=%q: want true or false", q))
		return
	}
	writeJSON(w, http.StatusOK, info)
}

func (h *handler) del(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	if err := h.s.Delete(r.Context(), id); err != nil {
		fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (h *handler) models(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": []map[string]any{
		{"id": h.s.cfg.Model, "object": "model", "created": h.s.start.Unix(), "owned_by": "tlite"}}})
}

func (h *handler) stats(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, h.s.Stats())
}

// options turns the API's fields into CallOptions.
func options(maxTokens *int, temp, topP *float64, seed *int64, stop []string) (CallOptions, error) {
	var o CallOptions
	if maxTokens != nil {
		if *maxTokens < 1 {
			return o, badRequest("max_tokens %d: want at least 1", *maxTokens)
		}
		o.MaxTokens = *maxTokens
	}
	if temp != nil {
		o.Temperature = *temp
	}
	if topP != nil {
		o.TopP = *topP
	}
	if seed != nil {
		o.Seed, o.SeedSet = *seed, true
	}
	o.Stop = stop
	return o, nil
}

func timingsOf(rep Reply) api.Timings {
	return api.Timings{QueueMs: ms(rep.Queue), SwitchMs: ms(rep.Switch.Total()), ReclaimMs: ms(rep.Switch.Reclaim), IOMs: ms(rep.Switch.IO),
		RecomputeMs: ms(rep.Switch.Recompute), UploadMs: ms(rep.Switch.Upload), OtherMs: ms(rep.Switch.Other), PrefillMs: ms(rep.Prefill), DecodeMs: ms(rep.Decode), PersistMs: ms(rep.Persist)}
}

func replyOf(rep Reply) api.Reply {
	return api.Reply{Text: rep.Text, Tokens: rep.Tokens, FinishReason: rep.FinishReason, Seed: rep.Seed, ContextTokens: rep.ContextTokens, Timings: timingsOf(rep)}
}

// sse writes server-sent events, sending the headers with the first.
type sse struct {
	w       http.ResponseWriter
	started bool
}

func (e *sse) send(event string, v any) error {
	if !e.started {
		e.w.Header().Set("Content-Type", "text/event-stream")
		e.w.Header().Set("Cache-Control", "no-cache")
		e.w.WriteHeader(http.StatusOK)
		e.started = true
	}
	var b []byte
	if s, ok := v.(string); ok {
		b = []byte(s)
	} else {
		var err error
		if b, err = json.Marshal(v); err != nil {
			return err
		}
	}
	// A client that stops reading must not hold the model: a write that
	// stalls this long fails, which cancels the call (nothing committed).
	rc := http.NewResponseController(e.w)
	rc.SetWriteDeadline(time.Now().Add(StreamStall))
	var buf bytes.Buffer
	if event != "" {
		fmt.Fprintf(&buf, "event: %s\n", event)
	}
	fmt.Fprintf(&buf, "data: %s\n\n", b)
	if _, err := e.w.Write(buf.Bytes()); err != nil {
		return err
	}
	return rc.Flush()
}

func (h *handler) call(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	var req api.Call
	if !h.decodeBody(w, r, &req, true) {
		return
	}
	o, err := options(req.MaxTokens, req.Temperature, req.TopP, req.Seed, req.Stop)
	if err != nil {
		fail(w, err)
		return
	}
	if !req.Stream {
		rep, err := h.s.Call(r.Context(), id, req.Prompt, o)
		if err != nil {
			fail(w, err)
			return
		}
		writeJSON(w, http.StatusOK, replyOf(rep))
		return
	}
	ev := &sse{w: w}
	o.OnText = func(t string) error { return ev.send("token", api.Piece{Text: t}) }
	rep, err := h.s.Call(r.Context(), id, req.Prompt, o)
	switch {
	case err != nil && !ev.started:
		fail(w, err)
	case err != nil:
		ev.send("error", api.Error{Error: err.Error()})
	default:
		ev.send("done", replyOf(rep))
	}
}

// renderChat renders messages with the template described at Handler.
func renderChat(msgs []api.ChatMessage) string {
	var b strings.Builder
	for _, m := range msgs {
		switch m.Role {
		case "user":
			b.WriteString("User: ")
		case "assistant":
			b.WriteString("Assistant: ")
		default:
			continue
		}
		b.WriteString(m.Content)
		b.WriteString("\n")
	}
	b.WriteString("Assistant:")
	return b.String()
}

func finishOf(reason string) string {
	switch reason {
	case "length", "context full":
		return "length"
	}
	return "stop"
}

func (h *handler) chat(w http.ResponseWriter, r *http.Request) {
	var req api.ChatRequest
	if !h.decodeBody(w, r, &req, false) {
		return
	}
	if len(req.Messages) == 0 {
		fail(w, badRequest("no messages"))
		return
	}
	if req.N != nil && *req.N != 1 {
		fail(w, badRequest("n %d: only one choice is served", *req.N))
		return
	}
	if req.MaxTokens == nil {
		req.MaxTokens = req.MaxCompletionTokens
	}
	var system []string
	for i, m := range req.Messages {
		switch m.Role {
		case "system":
			system = append(system, m.Content)
		case "user", "assistant":
		default:
			fail(w, badRequest("message %d has role %q: want system, user or assistant", i, m.Role))
			return
		}
	}
	o, err := options(req.MaxTokens, req.Temperature, req.TopP, req.Seed, append(append([]string(nil), req.Stop...), "\nUser:"))
	if err != nil {
		fail(w, err)
		return
	}
	bound := r.Header.Get(ContextHeader)
	msgs := req.Messages
	if bound != "" {
		if !validID(bound) {
			fail(w, fmt.Errorf("%w %q (header %s)", ErrNotFound, bound, ContextHeader))
			return
		}
		last := -1
		for i, m := range msgs {
			if m.Role == "assistant" {
				last = i
			}
		}
		msgs = msgs[last+1:]
		n := 0
		for _, m := range msgs {
			if m.Role == "user" {
				n++
			}
		}
		if n == 0 {
			fail(w, badRequest("no user message after the last assistant message (bound to context %s, only those are appended)", bound))
			return
		}
	}
	prompt := renderChat(msgs)
	created := time.Now().Unix()
	cid := "chatcmpl-" + newID()
	model := h.s.cfg.Model
	var ev *sse
	first := true
	if req.Stream {
		ev = &sse{w: w}
		o.OnText = func(t string) error {
			if first {
				t = strings.TrimLeft(t, " ")
				if t == "" {
					return nil
				}
				first = false
			}
			return ev.send("", api.ChatResponse{ID: cid, Object: "chat.completion.chunk", Created: created, Model: model,
				Choices: []api.ChatChoice{{Delta: &api.ChatMessage{Role: "assistant", Content: t}}}})
		}
	}
	var rep Reply
	if bound != "" {
		rep, err = h.s.Call(r.Context(), bound, prompt, o)
	} else {
		rep, err = h.s.CallEphemeral(r.Context(), strings.Join(system, "\n"), prompt, o)
	}
	if err != nil {
		if ev != nil && ev.started {
			ev.send("", api.Error{Error: err.Error()})
			return
		}
		fail(w, err)
		return
	}
	fin := finishOf(rep.FinishReason)
	usage := &api.ChatUsage{PromptTokens: rep.PromptTokens, CompletionTokens: rep.Tokens, TotalTokens: rep.PromptTokens + rep.Tokens}
	t := timingsOf(rep)
	if ev != nil {
		ev.send("", api.ChatResponse{ID: cid, Object: "chat.completion.chunk", Created: created, Model: model,
			Choices: []api.ChatChoice{{Delta: &api.ChatMessage{}, FinishReason: &fin}}, Usage: usage, Timings: &t})
		ev.send("", "[DONE]")
		return
	}
	writeJSON(w, http.StatusOK, api.ChatResponse{ID: cid, Object: "chat.completion", Created: created, Model: model,
		Choices: []api.ChatChoice{{Message: &api.ChatMessage{Role: "assistant", Content: strings.TrimLeft(rep.Text, " ")}, FinishReason: &fin}},
		Usage:   usage, Timings: &t})
}

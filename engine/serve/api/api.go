// Package api holds the JSON shapes of tl serve's HTTP interface (package
// engine/serve), shared by the server and its Go client
// (engine/serve/client) so that neither restates them and the client needs
// none of the engine.
package api

import (
	"encoding/json"
	"fmt"
	"time"
)

// StopList is a list of stop strings; in JSON it may also be one string,
// as OpenAI's API allows.
type StopList []string

// UnmarshalJSON reads a string or an array of strings.
func (s *StopList) UnmarshalJSON(b []byte) error {
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*s = StopList{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return fmt.Errorf("stop: want a string or an array of strings")
	}
	*s = many
	return nil
}

// NewContext is the body of POST /v1/contexts.
type NewContext struct {
	// System is the context's system prompt; it becomes the first tokens
	// of the context (after BOS).
	System string `json:"system"`
}

// Created is the reply to POST /v1/contexts (201).
type Created struct {
	ID string `json:"id"`
}

// Call is the body of POST /v1/contexts/{id}/call. Pointers tell a field
// left out from one set to zero.
type Call struct {
	// Prompt is appended to the context as it is (no template, no BOS).
	Prompt string `json:"prompt"`
	// MaxTokens caps the tokens generated (default 64; at least 1).
	MaxTokens *int `json:"max_tokens,omitempty"`
	// Temperature 0 (the default) is greedy decoding.
	Temperature *float64 `json:"temperature,omitempty"`
	// TopP keeps the most likely tokens up to this probability (0 or 1:
	// all).
	TopP *float64 `json:"top_p,omitempty"`
	// Seed makes sampling repeatable (default: a random seed, returned in
	// the reply).
	Seed *int64 `json:"seed,omitempty"`
	// Stop ends generation at the first of these strings (the text is cut
	// before it).
	Stop StopList `json:"stop,omitempty"`
	// Stream sends the text as server-sent events: "token" events with
	// {"text": piece} and a final "done" event with the Reply (or an
	// "error" event with an Error).
	Stream bool `json:"stream,omitempty"`
}

// Timings are a call's parts in milliseconds. SwitchMs is the time to
// install the context in the model's KV cache (the paper's switch
// latency), split into its parts; QueueMs is the wait behind other calls.
type Timings struct {
	QueueMs     float64 `json:"queue_ms"`
	SwitchMs    float64 `json:"switch_ms"`
	ReclaimMs   float64 `json:"reclaim_ms"`
	IOMs        float64 `json:"io_ms"`
	RecomputeMs float64 `json:"recompute_ms"`
	UploadMs    float64 `json:"upload_ms"`
	// OtherMs is the rest of the switch (planning, bookkeeping).
	OtherMs   float64 `json:"other_ms"`
	PrefillMs float64 `json:"prefill_ms"`
	DecodeMs  float64 `json:"decode_ms"`
	PersistMs float64 `json:"persist_ms"`
}

// Reply is the answer to a call.
type Reply struct {
	// Text is the generated text, cut before a stop string.
	Text string `json:"text"`
	// Tokens is the number of tokens generated and kept in the context:
	// after a stop string, the tokens that spelled it are not kept.
	Tokens int `json:"tokens"`
	// FinishReason says why generation ended: "stop token", "stop
	// string", "length" or "context full".
	FinishReason string `json:"finish_reason"`
	// Seed is the sampling seed used (0 for greedy decoding).
	Seed int64 `json:"seed"`
	// ContextTokens is the context's length after the call (its whole
	// history; the window the model sees may be shorter).
	ContextTokens int     `json:"context_tokens"`
	Timings       Timings `json:"timings"`
}

// Piece is the data of a "token" server-sent event.
type Piece struct {
	Text string `json:"text"`
}

// Error is every error reply's body.
type Error struct {
	Error string `json:"error"`
}

// ContextInfo is the reply to GET /v1/contexts/{id}.
type ContextInfo struct {
	ID     string `json:"id"`
	App    string `json:"app"`
	System string `json:"system"`
	// Tokens is the length of the whole history (the memory-resident
	// fragment, never dropped).
	Tokens int `json:"tokens"`
	// WindowTokens is what the model sees: the sink tokens plus the most
	// recent ones (the sliding window beyond the maximum context).
	WindowTokens int `json:"window_tokens"`
	// EvictedTokens left the window (they stay in the history).
	EvictedTokens int `json:"evicted_tokens"`
	// KVTokens of the window have keys and values committed (the rest,
	// normally the last generated token, are forwarded by the next call).
	KVTokens int       `json:"kv_tokens"`
	Calls    int       `json:"calls"`
	Created  time.Time `json:"created"`
	LastUse  time.Time `json:"last_use"`
	// Store is what the context store reports about this context (chunks
	// by level and residency), when it reports anything.
	Store any `json:"store,omitempty"`
	// History is every token id of the context and Text their text
	// (special tokens left out), when asked for with ?history=true.
	History []int  `json:"history,omitempty"`
	Text    string `json:"text,omitempty"`
}

// ChatMessage is one message of an OpenAI-style chat.
type ChatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// ChatRequest is the body of POST /v1/chat/completions (the fields this
// server reads; others are ignored, as OpenAI-style servers do).
type ChatRequest struct {
	Model     string        `json:"model,omitempty"`
	Messages  []ChatMessage `json:"messages"`
	MaxTokens *int          `json:"max_tokens,omitempty"`
	// MaxCompletionTokens is newer clients' name for MaxTokens.
	MaxCompletionTokens *int     `json:"max_completion_tokens,omitempty"`
	Temperature         *float64 `json:"temperature,omitempty"`
	TopP                *float64 `json:"top_p,omitempty"`
	Seed                *int64   `json:"seed,omitempty"`
	Stop                StopList `json:"stop,omitempty"`
	Stream              bool     `json:"stream,omitempty"`
	// N is the number of choices; only 1 is served.
	N *int `json:"n,omitempty"`
}

// ChatChoice is one choice of a chat completion.
type ChatChoice struct {
	Index        int          `json:"index"`
	Message      *ChatMessage `json:"message,omitempty"`
	Delta        *ChatMessage `json:"delta,omitempty"`
	FinishReason *string      `json:"finish_reason"`
}

// ChatUsage counts tokens as OpenAI does.
type ChatUsage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// ChatResponse is a chat completion ("chat.completion") or, streamed, one
// chunk of it ("chat.completion.chunk").
type ChatResponse struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []ChatChoice `json:"choices"`
	Usage   *ChatUsage   `json:"usage,omitempty"`
	// Timings are tlite's own addition.
	Timings *Timings `json:"timings,omitempty"`
}

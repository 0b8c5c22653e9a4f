package client

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tlite/tlite/engine/serve/api"
)

// fake is a stand-in server with the API's shapes (the real one is tested
// in engine/serve and, with this client, in tools/tl).
func fake(t *testing.T) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/contexts", func(w http.ResponseWriter, r *http.Request) {
		var req api.NewContext
		if json.NewDecoder(r.Body).Decode(&req) != nil || r.Header.Get("X-App-Id") != "app1" {
			w.WriteHeader(400)
			return
		}
		w.WriteHeader(201)
		json.NewEncoder(w).Encode(api.Created{ID: "0123456789abcdef"})
	})
	mux.HandleFunc("POST /v1/contexts/{id}/call", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("id") != "0123456789abcdef" {
			w.WriteHeader(404)
			json.NewEncoder(w).Encode(api.Error{Error: "unknown context"})
			return
		}
		var req api.Call
		json.NewDecoder(r.Body).Decode(&req)
		if req.Stream {
			w.Header().Set("Content-Type", "text/event-stream")
			w.Write([]byte("event: token\ndata: {\"text\":\"a\"}\n\nevent: token\ndata: {\"text\":\"b\"}\n\nevent: done\ndata: {\"text\":\"ab\",\"tokens\":2}\n\n"))
			return
		}
		json.NewEncoder(w).Encode(api.Reply{Text: "echo " + req.Prompt, Tokens: 1})
	})
	return mux
}

func TestClient(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "s.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: fake(t)}
	go srv.Serve(l)
	defer srv.Close()
	for _, addr := range []string{"unix://" + sock, sock} {
		c, err := New(addr)
		if err != nil {
			t.Fatal(err)
		}
		c.App = "app1"
		ctx := context.Background()
		id, err := c.NewContext(ctx, "sys")
		if err != nil || id != "0123456789abcdef" {
			t.Fatalf("NewContext: %q, %v", id, err)
		}
		r, err := c.Call(ctx, id, api.Call{Prompt: "hi"})
		if err != nil || r.Text != "echo hi" {
			t.Errorf("Call: %+v, %v", r, err)
		}
		var pieces []string
		r, err = c.Stream(ctx, id, api.Call{Prompt: "hi"}, func(s string) error { pieces = append(pieces, s); return nil })
		if err != nil || r.Text != "ab" || strings.Join(pieces, "|") != "a|b" {
			t.Errorf("Stream: %+v %v, %v", r, pieces, err)
		}
		_, err = c.Call(ctx, "ffffffffffffffff", api.Call{Prompt: "hi"})
		if !IsNotFound(err) || !strings.Contains(err.Error(), "unknown context") {
			t.Errorf("unknown context: %v", err)
		}
	}
	for _, bad := range []string{"ftp://x", "http://", "unix://"} {
		if _, err := New(bad); err == nil {
			t.Errorf("New(%q) accepted", bad)
		}
	}
}

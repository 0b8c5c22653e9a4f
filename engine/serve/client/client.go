// Package client is a Go client of tl serve's HTTP/JSON API (package
// engine/serve): contexts, calls (streamed or not), chat completions and
// statistics, over TCP or a unix socket.
package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/tlite/tlite/engine/serve/api"
)

// Client talks to one server.
type Client struct {
	base string
	hc   *http.Client
	// App is sent as the X-App-Id header (the app the contexts belong
	// to); empty sends none.
	App string
}

// New returns a client of the server at addr: "http://host:port", or
// "unix:///path/to/socket" (also a bare absolute path) for a unix socket.
func New(addr string) (*Client, error) {
	if strings.HasPrefix(addr, "/") {
		addr = "unix://" + addr
	}
	u, err := url.Parse(addr)
	if err != nil {
		return nil, fmt.Errorf("client: server %q: %w", addr, err)
	}
	switch u.Scheme {
	case "http":
		if u.Host == "" {
			return nil, fmt.Errorf("client: server %q has no host", addr)
		}
		return &Client{base: strings.TrimRight(addr, "/"), hc: &http.Client{}}, nil
	case "unix":
		path := u.Path
		if path == "" {
			return nil, fmt.Errorf("client: server %q names no socket", addr)
		}
		tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}}
		return &Client{base: "http://unix", hc: &http.Client{Transport: tr}}, nil
	}
	return nil, fmt.Errorf("client: server %q: want http://host:port or unix:///path", addr)
}

// Error is a reply with an error status.
type Error struct {
	Status  int
	Message string
}

func (e *Error) Error() string {
	return fmt.Sprintf("server: %d %s: %s", e.Status, http.StatusText(e.Status), e.Message)
}

// IsNotFound reports whether err is the server's 404 (an unknown context).
func IsNotFound(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Status == http.StatusNotFound
}

func (c *Client) request(ctx context.Context, method, path string, body any, hdr map[string]string) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.App != "" {
		req.Header.Set("X-App-Id", c.App)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("client: %s %s: %w", method, path, err)
	}
	if resp.StatusCode >= 400 {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		var e api.Error
		if json.Unmarshal(b, &e) != nil || e.Error == "" {
			e.Error = strings.TrimSpace(string(b))
		}
		return nil, &Error{Status: resp.StatusCode, Message: e.Error}
	}
	return resp, nil
}

// do sends a request and decodes the JSON reply into out (nil: none).
func (c *Client) do(ctx context.Context, method, path string, body, out any, hdr map[string]string) error {
	resp, err := c.request(ctx, method, path, body, hdr)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("client: %s %s: reading the reply: %w", method, path, err)
	}
	return nil
}

// NewContext creates a context with a system prompt and returns its id.
func (c *Client) NewContext(ctx context.Context, system string) (string, error) {
	var r api.Created
	if err := c.do(ctx, "POST", "/v1/contexts", api.NewContext{System: system}, &r, nil); err != nil {
		return "", err
	}
	return r.ID, nil
}

// Call appends req.Prompt to context id and returns the reply (req.Stream
// is ignored: see Stream).
func (c *Client) Call(ctx context.Context, id string, req api.Call) (api.Reply, error) {
	req.Stream = false
	var r api.Reply
	err := c.do(ctx, "POST", "/v1/contexts/"+url.PathEscape(id)+"/call", req, &r, nil)
	return r, err
}

// Stream is Call with the text passed to onText as it is generated.
func (c *Client) Stream(ctx context.Context, id string, req api.Call, onText func(string) error) (api.Reply, error) {
	req.Stream = true
	var rep api.Reply
	resp, err := c.request(ctx, "POST", "/v1/contexts/"+url.PathEscape(id)+"/call", req, nil)
	if err != nil {
		return rep, err
	}
	defer resp.Body.Close()
	done := false
	err = readEvents(resp.Body, func(event, data string) error {
		switch event {
		case "token":
			var p api.Piece
			if err := json.Unmarshal([]byte(data), &p); err != nil {
				return fmt.Errorf("client: a token event: %w", err)
			}
			if onText != nil {
				return onText(p.Text)
			}
		case "done":
			done = true
			return json.Unmarshal([]byte(data), &rep)
		case "error":
			var e api.Error
			json.Unmarshal([]byte(data), &e)
			return &Error{Status: http.StatusInternalServerError, Message: e.Error}
		}
		return nil
	})
	if err == nil && !done {
		err = fmt.Errorf("client: the stream ended without a done event")
	}
	return rep, err
}

// readEvents calls fn for each server-sent event of r.
func readEvents(r io.Reader, fn func(event, data string) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var event, data string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if data != "" {
				if err := fn(event, data); err != nil {
					return err
				}
			}
			event, data = "", ""
		case strings.HasPrefix(line, "event: "):
			event = line[len("event: "):]
		case strings.HasPrefix(line, "data: "):
			data = line[len("data: "):]
		}
	}
	return sc.Err()
}

// Delete deletes context id.
func (c *Client) Delete(ctx context.Context, id string) error {
	return c.do(ctx, "DELETE", "/v1/contexts/"+url.PathEscape(id), nil, nil, nil)
}

// Info describes context id.
func (c *Client) Info(ctx context.Context, id string) (api.ContextInfo, error) {
	var r api.ContextInfo
	err := c.do(ctx, "GET", "/v1/contexts/"+url.PathEscape(id), nil, &r, nil)
	return r, err
}

// History describes context id with its whole token history.
func (c *Client) History(ctx context.Context, id string) (api.ContextInfo, error) {
	var r api.ContextInfo
	err := c.do(ctx, "GET", "/v1/contexts/"+url.PathEscape(id)+"?history=true", nil, &r, nil)
	return r, err
}

// List returns the ids of the client's app's contexts.
func (c *Client) List(ctx context.Context) ([]string, error) {
	var r struct {
		IDs []string `json:"ids"`
	}
	err := c.do(ctx, "GET", "/v1/contexts", nil, &r, nil)
	return r.IDs, err
}

// Stats returns the server's statistics as decoded JSON.
func (c *Client) Stats(ctx context.Context) (map[string]any, error) {
	var r map[string]any
	err := c.do(ctx, "GET", "/v1/stats", nil, &r, nil)
	return r, err
}

// Chat runs a chat completion, bound to context id unless id is empty.
func (c *Client) Chat(ctx context.Context, id string, req api.ChatRequest) (api.ChatResponse, error) {
	req.Stream = false
	var hdr map[string]string
	if id != "" {
		hdr = map[string]string{"X-Context-Id": id}
	}
	var r api.ChatResponse
	err := c.do(ctx, "POST", "/v1/chat/completions", req, &r, hdr)
	return r, err
}

// Package wdstub is a small, fast WebDriver server used wherever a real browser is
// not the point: lifecycle and fault tests, the load tool's baseline, the scratch
// image. It keeps sessions in memory and answers the few commands tests use.
package wdstub

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"
)

// TestPage is the page the end-to-end tests open in a real browser: a greeting,
// and a file input whose chosen file the page reads back into #upload.
const TestPage = `<!doctype html><html><head><title>WebSummoner e2e</title></head><body><p id="greeting">Hello from 127.0.0.1</p>
<input type="file" id="file"><pre id="upload"></pre>
<script>document.getElementById("file").addEventListener("change", e => {
  const r = new FileReader(); r.onload = () => { document.getElementById("upload").textContent = r.result; };
  r.readAsText(e.target.files[0]); });</script></body></html>`

// TestDownloadName and TestDownload are the file the test page server offers
// as an attachment, for download tests.
const (
	TestDownloadName = "report.txt"
	TestDownload     = "websummoner download test file\n"
)

// Options shape the stub's behaviour, for fault injection.
type Options struct {
	// NewSessionDelay is how long POST /session takes.
	NewSessionDelay time.Duration
	// FailNewSession makes POST /session answer 500 "session not created".
	FailNewSession bool
	// DeleteDelay is how long DELETE /session/{id} takes: a real driver quits
	// its browser there.
	DeleteDelay time.Duration
}

// Server is the stub's HTTP handler.
type Server struct {
	opts     Options
	mu       sync.Mutex
	sessions map[string]map[string]any // id → state (url, …)
	created  int
}

// New returns a stub server.
func New(opts Options) *Server { return &Server{opts: opts, sessions: map[string]map[string]any{}} }

// Created is how many sessions the stub has created.
func (s *Server) Created() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.created
}

// Live is how many sessions the stub holds now.
func (s *Server) Live() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.sessions)
}

func write(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeErr(w http.ResponseWriter, status int, code, msg string) {
	write(w, status, map[string]any{"value": map[string]any{"error": code, "message": msg, "stacktrace": ""}})
}

// ServeHTTP answers /status, POST /session, DELETE /session/{id} and a few commands
// under /session/{id}/: url (get and set), title, echo (returns the request), and
// anything else with {"value":null}.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := strings.TrimSuffix(r.URL.Path, "/")
	if i := strings.Index(path, "/status"); i >= 0 && strings.HasSuffix(path, "/status") {
		// env lets launcher tests see the environment a driver was really given.
		write(w, 200, map[string]any{"value": map[string]any{"ready": true, "message": "wdstub ready", "pid": os.Getpid(), "env": os.Environ()}})
		return
	}
	i := strings.Index(path, "/session")
	if i < 0 {
		writeErr(w, 404, "unknown command", "no such endpoint: "+r.URL.Path)
		return
	}
	rest := strings.Trim(path[i+len("/session"):], "/")
	if rest == "" {
		if r.Method != http.MethodPost {
			writeErr(w, 405, "unknown method", r.Method)
			return
		}
		s.newSession(w, r)
		return
	}
	id, cmd, _ := strings.Cut(rest, "/")
	s.mu.Lock()
	state, ok := s.sessions[id]
	if ok && cmd == "" && r.Method == http.MethodDelete {
		delete(s.sessions, id)
	}
	s.mu.Unlock()
	if !ok {
		writeErr(w, 404, "invalid session id", "wdstub: no session "+id)
		return
	}
	body, _ := io.ReadAll(r.Body)
	switch {
	case cmd == "":
		if s.opts.DeleteDelay > 0 && r.Method == http.MethodDelete {
			time.Sleep(s.opts.DeleteDelay) // the stub's stand-in for quitting a browser
		}
		write(w, 200, map[string]any{"value": nil})
	case cmd == "url" && r.Method == http.MethodPost:
		var in struct {
			URL string `json:"url"`
		}
		_ = json.Unmarshal(body, &in)
		s.mu.Lock()
		state["url"] = in.URL
		s.mu.Unlock()
		write(w, 200, map[string]any{"value": nil})
	case cmd == "url":
		s.mu.Lock()
		u := state["url"]
		s.mu.Unlock()
		write(w, 200, map[string]any{"value": u})
	case cmd == "title":
		write(w, 200, map[string]any{"value": "wdstub"})
	case cmd == "window/new" && r.Method == http.MethodPost:
		s.mu.Lock()
		n := windows(state) + 1
		state["windows"] = n
		s.mu.Unlock()
		write(w, 200, map[string]any{"value": map[string]any{"handle": fmt.Sprintf("w%d", n), "type": "tab"}})
	case cmd == "window" && r.Method == http.MethodDelete:
		// W3C Close Window: the handles left; closing the last ends the session.
		s.mu.Lock()
		n := windows(state) - 1
		state["windows"] = n
		if n == 0 {
			delete(s.sessions, id)
		}
		s.mu.Unlock()
		left := []string{}
		for i := range n {
			left = append(left, fmt.Sprintf("w%d", i+1))
		}
		write(w, 200, map[string]any{"value": left})
	case cmd == "echo":
		write(w, 200, map[string]any{"value": map[string]any{"method": r.Method, "path": r.URL.EscapedPath(), "query": r.URL.RawQuery, "body": string(body)}})
	default:
		write(w, 200, map[string]any{"value": nil})
	}
}

func (s *Server) newSession(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if s.opts.NewSessionDelay > 0 {
		t := time.NewTimer(s.opts.NewSessionDelay)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}
	if s.opts.FailNewSession {
		writeErr(w, 500, "session not created", "wdstub: told to fail (FailNewSession)")
		return
	}
	var req struct {
		Capabilities *struct {
			AlwaysMatch map[string]any `json:"alwaysMatch"`
		} `json:"capabilities"`
		Desired map[string]any `json:"desiredCapabilities"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		writeErr(w, 400, "invalid argument", "wdstub: "+err.Error())
		return
	}
	// As chromedriver: a body with desiredCapabilities alone opens a JSONWire
	// session, answered in JSONWire's shape.
	jsonWire := req.Capabilities == nil && req.Desired != nil
	received := req.Desired
	if req.Capabilities != nil {
		received = req.Capabilities.AlwaysMatch
	}
	if bad, ok := received["wdstub:reject"]; ok {
		writeErr(w, 400, "invalid argument", "wdstub: rejected capability wdstub:reject="+toString(bad))
		return
	}
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	id := hex.EncodeToString(b)
	s.mu.Lock()
	s.sessions[id] = map[string]any{}
	s.created++
	s.mu.Unlock()
	caps := map[string]any{"browserName": "wdstub", "browserVersion": "1.0", "platformName": "linux", "wdstub:received": received, "wdstub:dialect": "w3c"}
	if jsonWire {
		caps["wdstub:dialect"] = "jsonwire"
		write(w, 200, map[string]any{"sessionId": id, "status": 0, "value": caps})
		return
	}
	write(w, 200, map[string]any{"value": map[string]any{"sessionId": id, "capabilities": caps}})
}

func toString(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// windows is how many windows a session has open: one at its start.
func windows(state map[string]any) int {
	if n, ok := state["windows"].(int); ok {
		return n
	}
	return 1
}

// Package hostile is a WebDriver stand-in that misbehaves on purpose: it wraps a
// working driver (wdstub) and, at a chosen phase, answers with a broken body,
// a redirect, a hang, an exit, a huge answer or garbage. Tests and the load
// tool's soak use it for the faults a real driver will not produce on demand.
package hostile

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"sort"
	"strings"
	"time"
)

// Phase is where a fault strikes.
type Phase string

// Phases of a session as a driver sees them.
const (
	PhaseStatus     Phase = "status"      // GET /status (readiness)
	PhaseNewSession Phase = "new-session" // POST /session
	PhaseCommand    Phase = "command"     // any /session/{id}/… command
	PhaseDelete     Phase = "delete"      // DELETE /session/{id}
)

// Phases lists every phase.
var Phases = []Phase{PhaseStatus, PhaseNewSession, PhaseCommand, PhaseDelete}

// Fault is a way to misbehave.
type Fault string

// Faults.
const (
	// BrokenBody announces 1000 bytes, writes 11 and closes the connection.
	BrokenBody Fault = "broken-body"
	// Redirect answers 307 to another path of the same driver.
	Redirect Fault = "redirect"
	// Hang never answers (until the request is cancelled).
	Hang Fault = "hang"
	// Exit ends the driver's process at once (or, in a test, drops the
	// connection without an answer).
	Exit Fault = "exit"
	// Huge answers 64 MiB of a valid-looking JSON string.
	Huge Fault = "huge"
	// Garbage answers 200 with bytes that are not JSON.
	Garbage Fault = "garbage"
)

// Faults lists every fault.
var Faults = []Fault{BrokenBody, Redirect, Hang, Exit, Huge, Garbage}

// Options say which fault strikes where. Zero Options misbehave nowhere.
type Options struct {
	// At maps a phase to its fault.
	At map[Phase]Fault
	// Probability is the chance a request of a faulty phase gets its fault; zero
	// means always.
	Probability float64
	// ExitProcess makes Exit end the process (a driver binary); otherwise Exit
	// drops the connection (in-process tests).
	ExitProcess bool
}

// Parse reads "phase=fault,phase=fault" (a command-line flag).
func Parse(s string) (map[Phase]Fault, error) {
	out := map[Phase]Fault{}
	if s == "" {
		return out, nil
	}
	for _, kv := range strings.Split(s, ",") {
		p, f, ok := strings.Cut(kv, "=")
		if !ok || !known(Phases, Phase(p)) || !known(Faults, Fault(f)) {
			return nil, fmt.Errorf("%q is not phase=fault (phases %v, faults %v)", kv, Phases, Faults)
		}
		out[Phase(p)] = Fault(f)
	}
	return out, nil
}

// String writes the map back as Parse reads it, in a stable order.
func String(m map[Phase]Fault) string {
	var parts []string
	for p, f := range m {
		parts = append(parts, string(p)+"="+string(f))
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

func known[T comparable](all []T, v T) bool {
	for _, a := range all {
		if a == v {
			return true
		}
	}
	return false
}

// phaseOf classifies a driver request.
func phaseOf(r *http.Request) Phase {
	path := strings.TrimSuffix(r.URL.Path, "/")
	switch {
	case strings.HasSuffix(path, "/status"):
		return PhaseStatus
	case strings.HasSuffix(path, "/session") && r.Method == http.MethodPost:
		return PhaseNewSession
	}
	i := strings.Index(path, "/session/")
	if i < 0 {
		return ""
	}
	if !strings.Contains(path[i+len("/session/"):], "/") && r.Method == http.MethodDelete {
		return PhaseDelete
	}
	return PhaseCommand
}

// Wrap returns next with opts' faults in front of it.
func Wrap(next http.Handler, opts Options) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f, ok := opts.At[phaseOf(r)]
		if !ok || (opts.Probability > 0 && rand.Float64() >= opts.Probability) || r.URL.Query().Has("hostile-redirected") {
			next.ServeHTTP(w, r)
			return
		}
		strike(w, r, f, opts.ExitProcess)
	})
}

func strike(w http.ResponseWriter, r *http.Request, f Fault, exitProcess bool) {
	switch f {
	case BrokenBody:
		raw(w, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"value\":nu")
	case Redirect:
		u := *r.URL
		u.RawQuery = "hostile-redirected=1"
		http.Redirect(w, r, u.String(), http.StatusTemporaryRedirect)
	case Hang:
		// The body read first: only then does Go's server notice a closed
		// connection and end the request, as a killed driver's would.
		_, _ = io.Copy(io.Discard, r.Body)
		<-r.Context().Done()
	case Exit:
		if exitProcess {
			fmt.Fprintln(os.Stderr, "wdstub: told to exit mid-request (hostile fault)")
			os.Exit(3)
		}
		raw(w, "")
	case Huge:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		chunk := strings.Repeat("x", 1<<20)
		_, _ = w.Write([]byte(`{"value":"`))
		for range 64 {
			if _, err := w.Write([]byte(chunk)); err != nil {
				return
			}
		}
		_, _ = w.Write([]byte(`"}`))
	case Garbage:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte("\x00\xffnot json at all\n{{{"))
	}
}

// raw writes bytes straight onto the connection and closes it.
func raw(w http.ResponseWriter, s string) {
	conn, buf, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	defer conn.Close()
	_ = conn.SetWriteDeadline(time.Now().Add(time.Second))
	writeAll(buf, s)
}

func writeAll(buf *bufio.ReadWriter, s string) {
	_, _ = buf.WriteString(s)
	_ = buf.Flush()
}

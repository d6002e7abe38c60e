package hub

import (
	"fmt"
	"net/http"
	"time"

	"github.com/websummoner/websummoner/internal/launcher"
	"github.com/websummoner/websummoner/internal/session"
	"github.com/websummoner/websummoner/internal/webdriver"
)

// selenoidStatus is GET /status in Selenoid's shape, plus the queue's state.
func (h *Hub) selenoidStatus(w http.ResponseWriter, r *http.Request) {
	// Selenoid's session entry, which selenoid-ui reads.
	type sess struct {
		ID        string         `json:"id"`
		Container string         `json:"container"`
		Name      string         `json:"name,omitempty"`
		VNC       bool           `json:"vnc"`
		Screen    string         `json:"screen"`
		Started   time.Time      `json:"started"`
		Caps      map[string]any `json:"caps,omitempty"`
	}
	type quota struct {
		Count    int    `json:"count"`
		Sessions []sess `json:"sessions"`
	}
	browsers := map[string]map[string]map[string]*quota{}
	conf := h.conf.Browsers()
	for _, name := range conf.Names() {
		browsers[name] = map[string]map[string]*quota{}
		for _, v := range conf.VersionsOf(name) {
			browsers[name][v] = map[string]*quota{}
		}
	}
	for _, s := range h.sessions.List() {
		vs := browsers[s.Browser]
		if vs == nil {
			vs = map[string]map[string]*quota{}
			browsers[s.Browser] = vs
		}
		if vs[s.Version] == nil {
			vs[s.Version] = map[string]*quota{}
		}
		q := vs[s.Version]["unknown"]
		if q == nil {
			q = &quota{}
			vs[s.Version]["unknown"] = q
		}
		q.Count++
		e := sess{ID: s.ID, Container: s.Instance.Describe(), Name: s.Name, VNC: s.VNC, Screen: s.Screen, Started: s.Started, Caps: selenoidCaps(s)}
		if !h.sees(r, s) {
			// Another user's: counted and listed, but its capabilities (env
			// secrets, proxy credentials, URLs) are theirs.
			e.Caps, e.Name = nil, ""
		}
		q.Sessions = append(q.Sessions, e)
	}
	st := h.queue.Stats()
	pending := int(h.pending.Load())
	writeJSON(w, http.StatusOK, map[string]any{
		"total":    st.Limit,
		"used":     st.InUse,
		"queued":   st.Waiting,
		"pending":  pending,
		"browsers": browsers,
		"queue": map[string]any{
			"congested":         st.Congested,
			"oldestWaitSeconds": st.OldestWait.Seconds(),
			"idleSeconds":       st.Idle.Seconds(),
			"timeoutSeconds":    h.queue.Options().Timeout.Seconds(),
			"disabled":          h.queue.Options().Disabled,
		},
		"gate":     h.gateStats(),
		"draining": h.draining.Load(),
		"version":  h.opts.Version,
	})
}

// w3cStatus is GET /wd/hub/status: ready when a new session would start now.
func (h *Hub) w3cStatus(w http.ResponseWriter, _ *http.Request) {
	ready, msg := h.readiness()
	writeJSON(w, http.StatusOK, map[string]any{"value": map[string]any{"ready": ready, "message": msg}})
}

func (h *Hub) readiness() (bool, string) {
	if h.draining.Load() {
		return false, "WebSummoner is shutting down"
	}
	st := h.queue.Stats()
	if st.InUse >= st.Limit {
		return false, "WebSummoner is busy: all slots are in use; new sessions queue"
	}
	return true, "WebSummoner is ready to create new sessions"
}

// ping is GET /ping, as in Selenoid.
func (h *Hub) ping(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{
		"uptime":         time.Since(h.started).Round(time.Second).String(),
		"lastReloadTime": h.conf.LoadedAt().Format(time.RFC3339),
		"numRequests":    h.requests.Load(),
		"version":        h.opts.Version,
	})
}

// healthz says the process serves HTTP.
func (h *Hub) healthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"value": map[string]any{"healthy": true}})
}

// readyz says whether the hub can start browsers now: not draining, and every
// launcher's backend (the Docker engine) answering. A busy hub is ready: it queues.
func (h *Hub) readyz(w http.ResponseWriter, _ *http.Request) {
	if h.draining.Load() {
		webdriver.WriteError(w, http.StatusServiceUnavailable, webdriver.ErrSessionNotCreated, "shutting down")
		return
	}
	for _, l := range []launcher.Launcher{h.launchers.Process, h.launchers.Docker} {
		if r, ok := l.(launcher.Readier); ok {
			if ready, why := r.Ready(); !ready {
				webdriver.WriteError(w, http.StatusServiceUnavailable, webdriver.ErrSessionNotCreated, why)
				return
			}
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"value": map[string]any{"ready": true}})
}

func (h *Hub) gateStats() any {
	if h.opts.Gate == nil {
		return nil
	}
	return h.opts.Gate.Stats()
}

// selenoidCaps is a session's capabilities as Selenoid's /status shows them:
// the client's, with Selenoid's flat fields (name, version, screenResolution,
// enableVNC, enableVideo) added where the client did not set them.
func selenoidCaps(s *session.Session) map[string]any {
	out := make(map[string]any, len(s.Caps)+6)
	for k, v := range s.Caps {
		out[k] = v
	}
	for k, v := range map[string]any{"browserName": s.Browser, "version": s.Version, "name": s.Name,
		"screenResolution": s.Screen, "enableVNC": s.VNC, "enableVideo": false} {
		if _, set := out[k]; !set {
			out[k] = v
		}
	}
	return out
}

// welcome is Selenoid's answer to "/": a line saying what serves here.
func (h *Hub) welcome(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintf(w, "You are using WebSummoner %s!\n", h.opts.Version)
}

// errorPage is Selenoid's /error: where ggr and selenoid-ui send a session that
// is gone.
func (h *Hub) errorPage(w http.ResponseWriter, _ *http.Request) {
	webdriver.WriteError(w, http.StatusNotFound, webdriver.ErrInvalidSessionID, "session timed out or not found")
}

package hub

import (
	"net/http"
	"time"

	"github.com/websummoner/websummoner/internal/launcher"
	"github.com/websummoner/websummoner/internal/webdriver"
)

// selenoidStatus is GET /status in Selenoid's shape, plus the queue's state.
func (h *Hub) selenoidStatus(w http.ResponseWriter, r *http.Request) {
	type sess struct {
		ID        string         `json:"id"`
		Container string         `json:"container"`
		Name      string         `json:"name,omitempty"`
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
		e := sess{ID: s.ID, Container: s.Instance.Describe(), Name: s.Name, Started: s.Started, Caps: s.Caps}
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

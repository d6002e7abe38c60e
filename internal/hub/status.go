package hub

import (
	"fmt"
	"net/http"
	"time"

	"github.com/websummoner/websummoner/internal/launcher"
	"github.com/websummoner/websummoner/internal/pool"
	"github.com/websummoner/websummoner/internal/queue"
	"github.com/websummoner/websummoner/internal/session"
	"github.com/websummoner/websummoner/internal/webdriver"
)

// selenoidStatus is GET /status in Selenoid's shape, plus the queue's state.
// statusSession is Selenoid's session entry, which selenoid-ui reads.
type statusSession struct {
	ID            string           `json:"id"`
	Container     string           `json:"container"`
	ContainerInfo *statusContainer `json:"containerInfo,omitempty"`
	Name          string           `json:"name,omitempty"`
	VNC           bool             `json:"vnc"`
	Screen        string           `json:"screen"`
	Started       time.Time        `json:"started"`
	Caps          map[string]any   `json:"caps,omitempty"`
}

// statusContainer is Selenoid's containerInfo: the container's full id and
// its address on its network.
type statusContainer struct {
	ID string `json:"id"`
	IP string `json:"ip"`
}

// statusQuota is Selenoid's per-quota entry; the hub has one quota, "unknown".
type statusQuota struct {
	Count    int             `json:"count"`
	Sessions []statusSession `json:"sessions"`
}

func (h *Hub) selenoidStatus(w http.ResponseWriter, r *http.Request) {
	st := h.queue.Stats()
	pending := int(h.pending.Load())
	writeJSON(w, http.StatusOK, map[string]any{
		"total": st.Limit,
		// As Selenoid counts: a starting session is pending, not used, so
		// that total - used - pending is what is free (selenoid-ui and
		// capacity scripts compute it so).
		"used":     max(st.InUse-pending, 0),
		"queued":   st.Waiting,
		"pending":  pending,
		"browsers": h.statusBrowsers(r),
		"queue": map[string]any{
			"congested":         st.Congested,
			"oldestWaitSeconds": st.OldestWait.Seconds(),
			"idleSeconds":       st.Idle.Seconds(),
			"timeoutSeconds":    h.queue.Options().Timeout.Seconds(),
			"disabled":          h.queue.Options().Disabled,
		},
		"gate":     h.gateStats(),
		"pool":     h.poolStats(),
		"tenants":  h.tenantStats(r),
		"draining": h.draining.Load(),
		"version":  h.opts.Version,
	})
}

// statusBrowsers is every configured browser and version, with the live
// sessions under each, as the request's user may see them.
func (h *Hub) statusBrowsers(r *http.Request) map[string]map[string]map[string]*statusQuota {
	browsers := map[string]map[string]map[string]*statusQuota{}
	quota := func(name, version string) *statusQuota {
		if browsers[name] == nil {
			browsers[name] = map[string]map[string]*statusQuota{}
		}
		if browsers[name][version] == nil {
			browsers[name][version] = map[string]*statusQuota{}
		}
		q := browsers[name][version]["unknown"]
		if q == nil {
			q = &statusQuota{Sessions: []statusSession{}}
			browsers[name][version]["unknown"] = q
		}
		return q
	}
	conf := h.conf.Browsers()
	for _, name := range conf.Names() {
		browsers[name] = map[string]map[string]*statusQuota{}
		for _, v := range conf.VersionsOf(name) {
			browsers[name][v] = map[string]*statusQuota{} // listed even with no session, as Selenoid does
		}
	}
	for _, s := range h.sessions.List() {
		// Filed under the version the client asked for, as Selenoid files it
		// (a session that asked none is under ""); caps.version says which
		// one runs.
		q := quota(s.Browser, s.AskedVersion)
		q.Count++
		e := statusSession{ID: s.ID, Container: s.Instance.Describe(), Name: s.Name, VNC: s.VNC, Screen: s.Screen, Started: s.Started, Caps: selenoidCaps(s)}
		if c, ok := s.Instance.(launcher.Container); ok {
			id, ip := c.ContainerInfo()
			e.Container, e.ContainerInfo = id, &statusContainer{ID: id, IP: ip}
		}
		if !h.sees(r, s) {
			// Another user's: counted and listed, but its capabilities (env
			// secrets, proxy credentials, URLs) are theirs, and its container
			// (a container id, or a local driver's pid and port) says where to
			// reach their browser.
			e.Caps, e.Name, e.Container, e.ContainerInfo = nil, "", "", nil
		}
		q.Sessions = append(q.Sessions, e)
	}
	return browsers
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
	if st.InUse-h.poolReady() >= st.Limit {
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

// tenantStats is each tenant's share of the slots (-quotas), as the request's
// user may see it: an operator, or anyone without authentication, sees every
// tenant; a user sees their own row.
func (h *Hub) tenantStats(r *http.Request) []queue.TenantStats {
	all := h.queue.Tenants()
	if h.opts.Auth == nil || !h.opts.Auth.Enabled() || h.opts.Auth.Admin(userOf(r)) {
		return all
	}
	mine := []queue.TenantStats{}
	for _, t := range all {
		if t.Tenant == userOf(r) {
			mine = append(mine, t)
		}
	}
	return mine
}

// poolStats is the warm pool per browsers.json entry, nil while it is off.
func (h *Hub) poolStats() []pool.KeyStats {
	if h.pool == nil {
		return nil
	}
	return h.pool.Stats()
}

// poolReady counts ready browsers: their slots are a client's for the asking
// (a claim, or an eviction).
func (h *Hub) poolReady() int {
	n := 0
	for _, s := range h.poolStats() {
		n += s.Ready
	}
	return n
}

func (h *Hub) gateStats() any {
	if h.opts.Gate == nil {
		return nil
	}
	return h.opts.Gate.Stats()
}

// selenoidCaps is a session's capabilities as Selenoid's /status shows them:
// the client's, its vendor options also at the top level as Selenoid merges
// them (env, labels, timeZone, sessionTimeout, logName, enableLog,
// videoScreenSize…), and Selenoid's flat fields (name, version,
// screenResolution, enableVNC, enableVideo) where the client did not set them.
func selenoidCaps(s *session.Session) map[string]any {
	out := make(map[string]any, len(s.Caps)+7)
	for k, v := range s.Caps {
		out[k] = v
	}
	for _, key := range []string{webdriver.SelenoidOptionsKey, webdriver.OptionsKey} {
		if o, ok := s.Caps[key].(map[string]any); ok {
			for k, v := range o {
				if _, set := out[k]; !set {
					out[k] = v
				}
			}
		}
	}
	for k, v := range map[string]any{"browserName": s.Browser, "version": s.Version, "name": s.Name,
		"screenResolution": s.Screen, "enableVNC": s.VNC, "enableVideo": s.Video != "", "videoName": s.Video} {
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

package hub

import (
	"fmt"
	"net/http"
	"strings"
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
	Caps          *statusCaps      `json:"caps,omitempty"`
}

// statusContainer is Selenoid's containerInfo: the container's full id and
// its address on its network.
type statusContainer struct {
	ID string `json:"id"`
	IP string `json:"ip"`
}

// statusQuota is Selenoid's per-quota entry: a user's sessions of one version.
type statusQuota struct {
	Count    int             `json:"count"`
	Sessions []statusSession `json:"sessions"`
}

func (h *Hub) selenoidStatus(w http.ResponseWriter, r *http.Request) {
	st := h.queue.Stats()
	pending := int(h.pending.Load())
	ready, msg := h.readiness()
	writeJSON(w, http.StatusOK, map[string]any{
		// Selenium Grid's answer beside Selenoid's, which has no "value":
		// scripts written for Grid wait on /status's .value.ready.
		"value": map[string]any{"ready": ready, "message": msg},
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
	quota := func(name, version, user string) *statusQuota {
		if browsers[name] == nil {
			browsers[name] = map[string]map[string]*statusQuota{}
		}
		if browsers[name][version] == nil {
			browsers[name][version] = map[string]*statusQuota{}
		}
		q := browsers[name][version][user]
		if q == nil {
			q = &statusQuota{Sessions: []statusSession{}}
			browsers[name][version][user] = q
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
		// one runs. The quota is its owner, or without -htpasswd the
		// basic-auth user, as Selenoid's (session.Session.Quota); "unknown"
		// for none, and for another user's session, whose owner /status does
		// not name, as tenants shows each user their own.
		owner := "unknown"
		if h.sees(r, s) && s.Quota != "" {
			owner = s.Quota
		}
		q := quota(s.Browser, s.AskedVersion, owner)
		q.Count++
		e := statusSession{ID: s.ID, Container: s.Instance.Describe(), Name: s.Name, VNC: s.VNC, Screen: statusScreen(s), Started: s.Started}
		if c, ok := s.Instance.(launcher.Container); ok {
			id, ip := c.ContainerInfo()
			e.Container, e.ContainerInfo = id, &statusContainer{ID: id, IP: ip}
		}
		if !h.sees(r, s) {
			// Another user's: counted and listed, but its capabilities (env
			// secrets, proxy credentials, URLs) are theirs, and its container
			// (a container id, or a local driver's pid and port) says where to
			// reach their browser.
			e.Name, e.Container, e.ContainerInfo = "", "", nil
		} else {
			e.Caps = selenoidCaps(s)
		}
		q.Sessions = append(q.Sessions, e)
	}
	return browsers
}

// statusScreen is the session's screen as Selenoid's /status gives it,
// WIDTHxHEIGHTxDEPTH: the one asked for ("1280x1024" has depth 24), or for
// a container asked for none, the images' default 1920x1080x24. A local
// driver asked for none has no screen of that size: "".
func statusScreen(s *session.Session) string {
	if _, ok := s.Instance.(launcher.Container); s.Screen == "" && !ok {
		return ""
	}
	return webdriver.Options{ScreenResolution: s.Screen}.Screen()
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

// statusCaps is Selenoid's session.Caps, the caps of a /status entry: its
// fields under its names, and nothing else. The client's other capabilities
// stay out: a base64 extension made each entry megabytes, and selenoid-ui
// polls /status. skin and s3KeyPattern, which the hub refuses unless empty,
// are always empty, which Selenoid omits; selenoid:options, which repeats the
// merged fields, is left out.
type statusCaps struct {
	BrowserName           string            `json:"browserName,omitempty"`
	DeviceName            string            `json:"deviceName,omitempty"`
	Version               string            `json:"version,omitempty"`
	BrowserVersion        string            `json:"browserVersion,omitempty"`
	Platform              string            `json:"platform,omitempty"`
	PlatformName          string            `json:"platformName,omitempty"`
	AppiumDeviceName      string            `json:"appium:deviceName,omitempty"`
	ScreenResolution      string            `json:"screenResolution,omitempty"`
	EnableVNC             bool              `json:"enableVNC"`
	EnableVideo           bool              `json:"enableVideo"`
	EnableLog             bool              `json:"enableLog,omitempty"`
	VideoName             string            `json:"videoName,omitempty"`
	VideoScreenSize       string            `json:"videoScreenSize,omitempty"`
	VideoFrameRate        int               `json:"videoFrameRate,omitempty"`
	VideoCodec            string            `json:"videoCodec,omitempty"`
	LogName               string            `json:"logName,omitempty"`
	Name                  string            `json:"name,omitempty"`
	TimeZone              string            `json:"timeZone,omitempty"`
	ContainerHostname     string            `json:"containerHostname,omitempty"`
	Env                   []string          `json:"env,omitempty"`
	ApplicationContainers []string          `json:"applicationContainers,omitempty"`
	AdditionalNetworks    []string          `json:"additionalNetworks,omitempty"`
	HostsEntries          []string          `json:"hostsEntries,omitempty"`
	DNSServers            []string          `json:"dnsServers,omitempty"`
	Labels                map[string]string `json:"labels,omitempty"`
	SessionTimeout        string            `json:"sessionTimeout,omitempty"`
}

// selenoidCaps is a session's capabilities as Selenoid's /status shows them.
// What the session records comes from it: the browser and the version that
// runs, the name, the screen asked for, the video's name; the other options
// are read back from its capabilities. enableVNC and enableVideo are always
// there (false too), as selenoid-ui reads them.
func selenoidCaps(s *session.Session) *statusCaps {
	o := webdriver.SessionOptions(s.Caps)
	str := func(k string) string { v, _ := s.Caps[k].(string); return v }
	c := &statusCaps{
		BrowserName: s.Browser, Version: s.Version, BrowserVersion: str("browserVersion"),
		DeviceName: str("deviceName"), AppiumDeviceName: str("appium:deviceName"),
		Platform: str("platform"), PlatformName: str("platformName"),
		ScreenResolution: statusScreen(s), EnableVNC: o.EnableVNC || s.VNC,
		EnableVideo: s.Video != "", VideoName: s.Video,
		EnableLog: o.EnableLog, LogName: o.LogName, Name: s.Name, TimeZone: o.TimeZone,
		ContainerHostname: o.ContainerHostname, Env: o.Env, ApplicationContainers: o.ApplicationContainers,
		AdditionalNetworks: o.AdditionalNetworks, HostsEntries: o.HostsEntries, DNSServers: o.DNSServers, Labels: o.Labels,
		VideoScreenSize: o.VideoScreenSize, VideoFrameRate: o.VideoFrameRate, VideoCodec: o.VideoCodec,
	}
	if o.SessionTimeout > 0 {
		c.SessionTimeout = shortDuration(o.SessionTimeout)
	}
	return c
}

// shortDuration writes d as a client writes a sessionTimeout: "5m", not
// time.Duration's "5m0s".
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
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

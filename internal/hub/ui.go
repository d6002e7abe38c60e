package hub

import (
	"embed"
	"fmt"
	"io/fs"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/websummoner/websummoner/internal/launcher"
	"github.com/websummoner/websummoner/internal/webdriver"
)

// The status page at /ui/: static files embedded in the binary (no build step,
// nothing fetched from elsewhere) that poll /ui/state once a second while the
// page is visible. The state is computed only when asked, so the page costs the
// hub nothing when nobody watches; it holds counts, never a list of waiters, so
// it stays small at 5,000 waiters.
//
//go:embed ui
var uiFiles embed.FS

// uiMaxSessions bounds the sessions listed in one state (the oldest first); the
// counts are always whole.
const uiMaxSessions = 1000

// uiPolicy is the status page's Content-Security-Policy: its own script,
// style and state only. The page shows names clients chose (a session's
// name, a tenant); were one ever to slip past the page's escaping, it could
// run nothing, load nothing and send nothing elsewhere, and no other site
// can frame the page to click through it.
const uiPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; " +
	"frame-ancestors 'none'; base-uri 'none'; form-action 'none'"

func (h *Hub) uiStatic() http.Handler {
	sub, _ := fs.Sub(uiFiles, "ui")
	files := http.StripPrefix("/ui/", http.FileServer(http.FS(sub)))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := strings.TrimPrefix(r.URL.Path, "/ui/")
		if name == "" {
			name = "."
		}
		if _, err := fs.Stat(sub, name); err != nil {
			// The file server's own 404 is Go's plain text.
			webdriver.WriteError(w, http.StatusNotFound, webdriver.ErrUnknownCommand,
				fmt.Sprintf("the status page has no %s; it is at /ui/", r.URL.Path))
			return
		}
		uiHeaders(w.Header())
		files.ServeHTTP(w, r)
	})
}

// uiHeaders sets the status page's policy on one of its answers.
func uiHeaders(h http.Header) {
	h.Set("Content-Security-Policy", uiPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
}

// uiSession is one live session as the page shows it.
type uiSession struct {
	ID      string  `json:"id"`
	Browser string  `json:"browser"`
	Version string  `json:"version"`
	Name    string  `json:"name,omitempty"`
	Age     float64 `json:"ageSeconds"`
	Idle    float64 `json:"idleSeconds"`
	VNC     string  `json:"vnc,omitempty"`
	Video   string  `json:"video,omitempty"`
}

// uiState is GET /ui/state: everything the page shows, computed now.
func (h *Hub) uiState(w http.ResponseWriter, r *http.Request) {
	uiHeaders(w.Header())
	st := h.queue.Stats()
	o := h.queue.Options()
	now := time.Now()
	var mine []uiSession
	others := 0
	for _, s := range h.sessions.List() {
		if !h.sees(r, s) {
			others++
			continue
		}
		e := uiSession{ID: s.ID, Browser: s.Browser, Version: s.Version, Name: s.Name, Video: s.Video,
			Age: now.Sub(s.Started).Seconds(), Idle: h.sessions.IdleFor(s).Seconds()}
		if s.VNC {
			e.VNC = h.wsBase(r) + "/vnc/" + url.PathEscape(s.ID)
		}
		mine = append(mine, e)
	}
	sort.Slice(mine, func(i, j int) bool { return mine[i].Age > mine[j].Age })
	listed := len(mine)
	if listed > uiMaxSessions {
		mine = mine[:uiMaxSessions]
	}
	rejected := map[string]uint64{}
	for reason, n := range h.queue.Rejected() {
		rejected[string(reason)] = n
	}
	ready, why := true, "local drivers"
	for _, l := range []launcher.Launcher{h.launchers.Process, h.launchers.Docker} {
		if rd, ok := l.(launcher.Readier); ok {
			if ready, why = rd.Ready(); !ready {
				break
			}
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"version":  h.opts.Version,
		"now":      now.UTC().Format(time.RFC3339),
		"draining": h.draining.Load(),
		"slots":    map[string]any{"limit": st.Limit, "used": st.InUse, "pending": h.pending.Load()},
		"queue": map[string]any{
			"waiting": st.Waiting, "congested": st.Congested, "disabled": o.Disabled,
			"idleSeconds": st.Idle.Seconds(), "oldestWaitSeconds": st.OldestWait.Seconds(),
			"timeoutSeconds": o.Timeout.Seconds(), "fastThresholdSeconds": o.FastThreshold.Seconds(),
			"keepingUpBudgetSeconds": o.KeepingUpBudget.Seconds(), "saturatedBudgetSeconds": o.SaturatedBudget.Seconds(),
		},
		"rejected":      rejected,
		"gate":          h.gateStats(),
		"pool":          h.poolStats(),
		"tenants":       h.tenantStats(r),
		"engine":        map[string]any{"ready": ready, "message": why},
		"sessions":      append([]uiSession{}, mine...),
		"listed":        listed,
		"otherSessions": others,
	})
}

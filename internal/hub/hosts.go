package hub

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/websummoner/websummoner/internal/logtag"
	"github.com/websummoner/websummoner/internal/webdriver"
)

// hostAllowed reports whether a request's Host header may reach the hub when
// only allowed names (besides addresses and localhost) are taken. An IP
// address cannot be rebound, and browsers resolve localhost and *.localhost
// to loopback themselves; any other name is one a web page could have made
// resolve to this hub (DNS rebinding), so that its scripts reach the hub as
// their own origin, unless the operator named it. A name starting with "."
// allows that domain and every name under it.
func hostAllowed(host string, allowed []string) bool {
	if host == "" {
		return true // HTTP/1.0 without Host: no browser sends that
	}
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	if _, err := netip.ParseAddr(host); err == nil || host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	for _, a := range allowed {
		a = strings.TrimSuffix(strings.ToLower(a), ".")
		if host == a || strings.HasPrefix(a, ".") && (host == a[1:] || strings.HasSuffix(host, a)) {
			return true
		}
	}
	return false
}

// refusedHosts paces the log of refused Host names, so that the operator
// learns of each name (a front such as ggr passes on the one its own
// clients gave it) without a line per request: a name once a minute, and
// refusedHostsPerMinute names a minute in all (a rebinding page with a
// wildcard name may make a new one per request).
type refusedHosts struct {
	mu      sync.Mutex
	last    map[string]time.Time
	minute  time.Time // when the current minute of the overall count began
	logged  int       // names logged in it
	skipped int       // names refused in it, past the count, unlogged
}

// refusedHostsKept bounds the names remembered; past it, the memory starts
// again (a name may then be logged twice within the minute).
const (
	refusedHostsKept      = 1024
	refusedHostsPerMinute = 10
)

// first reports whether host should be logged now, and how many refused
// names went unlogged in the minute before (to say so once).
func (rh *refusedHosts) first(host string, now time.Time) (log bool, skipped int) {
	rh.mu.Lock()
	defer rh.mu.Unlock()
	if t, ok := rh.last[host]; ok && now.Sub(t) < time.Minute {
		return false, 0
	}
	if now.Sub(rh.minute) >= time.Minute {
		skipped, rh.minute, rh.logged, rh.skipped = rh.skipped, now, 0, 0
	}
	if rh.logged >= refusedHostsPerMinute {
		rh.skipped++
		return false, 0
	}
	if rh.last == nil || len(rh.last) >= refusedHostsKept {
		rh.last = map[string]time.Time{}
	}
	rh.last[host] = now
	rh.logged++
	return true, skipped
}

// refuseHost answers a request whose Host is not one the hub answers to.
func (h *Hub) refuseHost(w http.ResponseWriter, r *http.Request) {
	host := strings.ToLower(r.Host)
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if len(host) > 100 {
		host = host[:100]
	}
	if log, skipped := h.refusedHosts.first(host, time.Now()); log {
		more := ""
		if skipped > 0 {
			more = fmt.Sprintf(" (and %d other names in the minute before, unlogged)", skipped)
		}
		logtag.Event(h.log, slog.LevelWarn, "", "HOST_REFUSED", r.RemoteAddr, fmt.Sprintf("host %q, %s %.100s: a name not in -allowed-hosts (each logged once a minute, %d names a minute at most)%s; add it if your clients or a front such as ggr or selenoid-ui use it", host, r.Method, r.URL.Path, refusedHostsPerMinute, more))
	}
	webdriver.WriteError(w, http.StatusForbidden, webdriver.ErrUnknownError,
		fmt.Sprintf("this hub does not answer to the host name %.100q: it takes IP addresses, localhost and the names of -allowed-hosts, so that a web page cannot reach it through DNS rebinding; add the name to -allowed-hosts (a proxy in front that passes its own Host, such as nginx's proxy_set_header Host $host, needs that too)", r.Host))
}

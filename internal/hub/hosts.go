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

// refusedHosts remembers when a Host was last logged as refused, so that
// the operator learns of each name (a front such as ggr passes on the one
// its own clients gave it) without a line per request.
type refusedHosts struct {
	mu   sync.Mutex
	last map[string]time.Time
}

// refusedHostsKept bounds the names remembered; past it, the memory starts
// again (a name may then be logged twice within the minute).
const refusedHostsKept = 1024

// first reports whether host was not logged within the last minute, and
// records it.
func (rh *refusedHosts) first(host string, now time.Time) bool {
	rh.mu.Lock()
	defer rh.mu.Unlock()
	if t, ok := rh.last[host]; ok && now.Sub(t) < time.Minute {
		return false
	}
	if rh.last == nil || len(rh.last) >= refusedHostsKept {
		rh.last = map[string]time.Time{}
	}
	rh.last[host] = now
	return true
}

// refuseHost answers a request whose Host is not one the hub answers to.
func (h *Hub) refuseHost(w http.ResponseWriter, r *http.Request) {
	host := strings.ToLower(r.Host)
	if len(host) > 100 {
		host = host[:100]
	}
	if h.refusedHosts.first(host, time.Now()) {
		logtag.Event(h.log, slog.LevelWarn, "", "HOST_REFUSED", r.RemoteAddr, fmt.Sprintf("host %q, %s %.100s: a name not in -allowed-hosts (logged once a minute a name); add it if your clients or a front such as ggr or selenoid-ui use it", host, r.Method, r.URL.Path))
	}
	webdriver.WriteError(w, http.StatusForbidden, webdriver.ErrUnknownError,
		fmt.Sprintf("this hub does not answer to the host name %.100q: it takes IP addresses, localhost and the names of -allowed-hosts, so that a web page cannot reach it through DNS rebinding; add the name to -allowed-hosts (a proxy in front that passes its own Host, such as nginx's proxy_set_header Host $host, needs that too)", r.Host))
}

package hub

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"reflect"
	"sync"
	"time"

	"github.com/websummoner/websummoner/internal/config"
	"github.com/websummoner/websummoner/internal/launcher"
	"github.com/websummoner/websummoner/internal/pool"
	"github.com/websummoner/websummoner/internal/queue"
	"github.com/websummoner/websummoner/internal/webdriver"
)

// warm is a ready browser of the warm pool (internal/pool): started on a
// slot of its own with a session created as a cold start for its entry's
// defaults would create it. It is handed to one client at most.
type warm struct {
	h       *Hub
	id      string // the fill's request id, for log lines
	key     pool.Key
	browser config.Resolved
	inst    launcher.Instance
	driver  webdriver.DriverSession
	slot    *queue.Slot
	// canon is the canonical form of the capabilities it was started with
	// (webdriver.CanonicalCaps): a request whose own is equal is a hit.
	canon string
	born  time.Time
	// handed is closed once a near hit's own session exists on the
	// browser, or the browser is stopped (pool.HandOver).
	handed   chan struct{}
	handOnce sync.Once
}

// HandedOver is closed once a near hit's session exists on the browser, or
// the browser is stopped: the pool starts its refill then (pool.HandOver).
func (w *warm) HandedOver() <-chan struct{} { return w.handed }

func (w *warm) handOver() { w.handOnce.Do(func() { close(w.handed) }) }

// nearInstance is a near-claimed warm browser's instance from the claim to
// startNear, which unwraps it: a creation abandoned before then stops it,
// and the stop hands the browser over (its refill may start).
type nearInstance struct {
	launcher.Instance
	w *warm
}

func (n nearInstance) Stop(ctx context.Context) error {
	n.w.handOver()
	return n.Instance.Stop(ctx)
}

// Fill starts a ready browser for k (pool.Filler): a spare slot, the entry's
// browser, and a session with the capabilities a request naming only the
// browser would send.
func (h *Hub) Fill(ctx context.Context, id string, k pool.Key) (pool.Item, error) {
	b, err := h.conf.Browsers().Find(k.Browser, k.Version)
	if err != nil {
		return nil, err
	}
	l := h.launcherFor(b)
	if l == nil {
		return nil, &noLauncherError{b}
	}
	if ch, ok := l.(launcher.Checker); ok {
		if err := ch.Check(ctx, b); err != nil {
			var se *launcher.StartError
			if errors.As(err, &se) && se.Down {
				// The engine is down (or not checked yet): nothing to start
				// now, and nothing wrong with the entry to back off from.
				return nil, fmt.Errorf("%w: %w", pool.ErrNoSpare, err)
			}
			return nil, err // a missing image: the pool backs off
		}
	}
	slot := h.queue.Spare(1, b.String())
	if slot == nil {
		return nil, pool.ErrNoSpare
	}
	body := h.driverBody(map[string]any{"browserName": k.Browser}, true, b, webdriver.Options{})
	t0 := time.Now()
	inst, err := l.Start(ctx, launcher.Request{ID: id, Browser: b})
	if err == nil {
		var ds webdriver.DriverSession
		ds, err = h.newDriverSession(ctx, inst, forInstance(body, inst), b)
		if err == nil {
			slot.Started(queue.StartSucceeded)
			return &warm{h: h, id: id, key: k, browser: b, inst: inst, driver: ds, slot: slot, canon: webdriver.CanonicalCaps(body), born: t0, handed: make(chan struct{})}, nil
		}
		h.stop(id, inst)
	}
	if ctx.Err() == nil {
		h.countFailure(b, err)
	}
	slot.Started(startOutcome(ctx, err))
	slot.Release()
	return nil, err
}

// Entries lists every configured entry with its fixed pool size
// (pool.Filler): size for a browser's default version, an entry's own
// "warm" where it sets one, else 0.
func (h *Hub) Entries(size int) map[pool.Key]int {
	bs := h.conf.Browsers()
	out := map[pool.Key]int{}
	for _, name := range bs.Names() {
		vs := bs[name]
		for _, v := range bs.VersionsOf(name) {
			n := 0
			if v == vs.Default {
				n = size
			}
			if b := vs.Versions[v]; b != nil && b.Warm != nil {
				n = *b.Warm
			}
			if h.launcherFor(config.Resolved{Name: name, Version: v, Browser: vs.Versions[v]}) == nil {
				continue // -disable-docker: nothing can start it
			}
			out[pool.Key{Browser: name, Version: v}] = n
		}
	}
	return out
}

// Alive asks the driver for its session's URL: a browser that answers is
// alive. The answer itself is not read.
func (w *warm) Alive(ctx context.Context) bool {
	u := driverURL(w.inst, w.driver, "session", w.driver.ID, "url")
	status, _, err := w.h.driverCall(ctx, http.MethodGet, u, nil, 1<<20)
	return err == nil && status == http.StatusOK
}

func (w *warm) Exited() <-chan struct{} { return w.inst.Exited() }

// Stale reports whether browsers.json no longer has the entry as it was.
func (w *warm) Stale() bool {
	b, err := w.h.conf.Browsers().Find(w.key.Browser, w.key.Version)
	return err != nil || b.Version != w.key.Version || !reflect.DeepEqual(b.Browser, w.browser.Browser)
}

// Discard stops the browser and frees its slot (pool.Item).
func (w *warm) Discard() {
	w.slot.Releasing()
	go func() {
		w.h.stop(w.id, w.inst)
		w.slot.Release()
	}()
}

// launcherFor is the launcher that runs b's entry, nil if none does.
func (h *Hub) launcherFor(b config.Resolved) launcher.Launcher {
	if b.Browser == nil {
		return nil
	}
	if b.Image.IsCommand() {
		return h.launchers.Process
	}
	return h.launchers.Docker
}

// driverBody is the new-session body a cold start sends the driver, before
// what belongs to one instance (forInstance).
func (h *Hub) driverBody(caps map[string]any, w3c bool, b config.Resolved, o webdriver.Options) []byte {
	if name, _ := b.Caps["browserName"].(string); name != "" && caps["browserName"] != name {
		// The entry names what its driver answers to (WebKitWebDriver
		// accepts MiniBrowser alone): a client that reached it by another
		// of its names (webkit, webkitgtk) gets that driver's name.
		caps = maps.Clone(caps)
		caps["browserName"] = name
	}
	body := webdriver.DriverBody(caps, w3c, b.Caps)
	if screen := o.ScreenResolution; screen != "" {
		body = withScreen(body, screen)
	}
	return body
}

// forInstance adds to a new-session body what belongs to the instance it
// goes to: a local driver's own download directory, and a sandbox's proxy
// for a browser that takes it by a flag.
func forInstance(body []byte, inst launcher.Instance) []byte {
	ep := inst.Endpoints()
	if files := ep.Files; files != nil && files.Scheme == "file" {
		body = withDownloadDir(body, files.Path)
	}
	if ep.Proxy != nil {
		body = withProxyFlag(body, ep.Proxy)
	}
	return body
}

// poolShape reports whether a request's options ask for a container the warm
// pool starts: the entry's defaults. What only the hub reads (a name, an idle
// timeout, ignored keys) does not shape the container.
func poolShape(o webdriver.Options) bool {
	o.Name, o.SessionTimeout, o.Ignored = "", 0, nil
	for _, l := range []*[]string{&o.Env, &o.HostsEntries, &o.DNSServers, &o.AdditionalNetworks, &o.ApplicationContainers} {
		if len(*l) == 0 {
			*l = nil
		}
	}
	if len(o.Labels) == 0 {
		o.Labels = nil
	}
	return reflect.DeepEqual(o, webdriver.Options{})
}

// claim gives c a ready browser when the warm pool has one its request fits:
// a hit takes the browser's session as it is, a near hit the browser alone
// (start then creates the client's session on it). It reports whether c got
// one; with none, it returns false and c starts cold.
func (h *Hub) claim(c *creation) bool {
	if h.pool == nil {
		return false
	}
	k := pool.Key{Browser: c.browser.Name, Version: c.browser.Version}
	if !h.queue.MayStart(c.tenant) {
		h.pool.Missed(c.id, k)
		return false // the tenant is at its maxSessions: it waits, warm browser or not
	}
	if !poolShape(c.opts) {
		h.pool.Missed(c.id, k)
		return false
	}
	canon := webdriver.CanonicalCaps(h.driverBody(c.caps, c.w3c, c.browser, c.opts))
	t0 := time.Now()
	item, res := h.pool.Claim(c.ctx, c.id, k, func(it pool.Item) pool.Result {
		w := it.(*warm)
		if !reflect.DeepEqual(w.browser.Browser, c.browser.Browser) {
			return pool.Miss // started from an entry browsers.json has since changed
		}
		res := pool.Near
		if c.w3c && canon == w.canon {
			res = pool.Hit
		}
		// The tenant's count takes the slot here, where the pool still may
		// take the browser back: another request of the tenant's may have
		// been counted since MayStart, by this pool or by the queue.
		if !w.slot.Assign(c.tenant) {
			return pool.Miss
		}
		return res
	})
	if item == nil {
		return false
	}
	w := item.(*warm)
	c.slot, c.inst, c.warm = w.slot, w.inst, res
	if res == pool.Hit {
		c.driver, c.took = w.driver, time.Since(t0)
	} else {
		c.stale = w.driver
		c.inst = nearInstance{w.inst, w}
	}
	h.queue.AdmittedFast()
	return true
}

// startNear creates the client's session on a near hit's browser: the
// pooled session is ended first, so the driver serves one session, the
// client's. It reports false, having stopped the browser, when the driver
// failed for a reason not the client's: the request then starts cold.
func (h *Hub) startNear(c *creation) (bool, error) {
	if n, ok := c.inst.(nearInstance); ok {
		c.inst = n.Instance
		defer n.w.handOver() // the pool's refill may start now
	}
	// The client's session starts a browser on the warm container (the
	// container's start alone is saved): the start gate paces it as any
	// start, with a baseline of its own.
	if err := c.slot.Restart(c.ctx, c.browser.String()+" (warm)"); err != nil {
		return true, err // abandon stops the browser and frees the slot
	}
	t0 := time.Now()
	dctx, cancel := context.WithTimeout(c.ctx, h.opts.SessionDeleteTimeout)
	_, _, err := h.driverCall(dctx, http.MethodDelete, driverURL(c.inst, c.stale, "session", c.stale.ID), nil, 1<<20)
	cancel()
	if err == nil {
		var ds webdriver.DriverSession
		ds, err = h.newDriverSession(c.ctx, c.inst, forInstance(h.driverBody(c.caps, c.w3c, c.browser, c.opts), c.inst), c.browser)
		if err == nil {
			c.driver, c.took = ds, time.Since(t0)
			return true, nil
		}
		var de *webdriver.DriverError
		if errors.As(err, &de) && de.ClientFault() {
			return true, err // abandon stops the browser and frees the slot
		}
	}
	h.stop(c.id, c.inst)
	c.inst = nil
	if c.ctx.Err() != nil {
		return true, c.ctx.Err()
	}
	h.countFailure(c.browser, fmt.Errorf("a warm browser's new session: %w", err))
	// The gate hears the warm start failed, and the cold start that
	// follows takes its own permit, under its own kind: its time is not a
	// warm start's.
	c.slot.Started(queue.StartFailed)
	if err := c.slot.Restart(c.ctx, c.browser.String()); err != nil {
		return true, err
	}
	return false, nil
}

package hub

import (
	"context"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/websummoner/websummoner/internal/capacity"
	"github.com/websummoner/websummoner/internal/config"
	"github.com/websummoner/websummoner/internal/launcher"
	"github.com/websummoner/websummoner/internal/pool"
	"github.com/websummoner/websummoner/internal/queue"
	"github.com/websummoner/websummoner/internal/wdstub"
	"github.com/websummoner/websummoner/internal/webdriver"
)

// newWarmFixture is a hub in fake time with a warm pool; the pool is closed
// (and every browser it held stopped) before the fixture's own checks.
func newWarmFixture(t *testing.T, qopts queue.Options, wp pool.Options, l *stubLauncher) *fixture {
	t.Helper()
	l.mem = newMemTransport()
	f := newFixture(t, qopts, Options{WarmPool: wp}, l)
	f.hub.Start()
	t.Cleanup(func() {
		f.hub.pool.Close()
		synctest.Wait() // discarded browsers stop and free their slots
	})
	return f
}

func sessionID(t *testing.T, body map[string]any) string {
	t.Helper()
	v, _ := body["value"].(map[string]any)
	id, _ := v["sessionId"].(string)
	if id == "" {
		t.Fatalf("no session in %v", body)
	}
	return id
}

// sample is the value of a metric's series whose one label has that value
// (0 when there is none).
func sample(t *testing.T, f *fixture, name, label, value string) float64 {
	t.Helper()
	mfs, err := f.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == label && lp.GetValue() == value {
					if c := m.GetCounter(); c != nil {
						return c.GetValue()
					}
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	return 0
}

// instanceOf is the stub browser a session runs on.
func instanceOf(f *fixture, id string) *stubInstance {
	s, ok := f.sess.Get(id)
	if !ok {
		return nil
	}
	inst, _ := s.Instance.(*stubInstance)
	return inst
}

// liveSet is the stub launcher's live browsers.
func liveSet(l *stubLauncher) map[launcher.Instance]bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[launcher.Instance]bool{}
	for inst := range l.live {
		out[inst] = true
	}
	return out
}

func TestWarmPoolHitNearMiss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := &stubLauncher{bodies: make(chan []byte, 16)}
		f := newWarmFixture(t, queue.Options{Limit: 3}, pool.Options{Size: 1}, l)
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if n := l.starts.Load(); n != 1 {
			t.Fatalf("browsers started by a pool of 1 = %d, want 1", n)
		}
		filled := <-l.bodies // what the ready browser's session was created with

		ready := liveSet(l)
		// A hit: stock ChromeOptions as Python's Selenium sends them.
		resp, body := f.do("POST", "/session", `{"capabilities":{"firstMatch":[{}],"alwaysMatch":{"browserName":"chrome","pageLoadStrategy":"normal","goog:chromeOptions":{"extensions":[],"args":[]}}}}`)
		if resp.StatusCode != 200 {
			t.Fatalf("hit: %d %v", resp.StatusCode, body)
		}
		hitID := sessionID(t, body)
		if s, _ := f.sess.Get(hitID); s == nil || !ready[s.Instance] {
			t.Fatal("a hit did not get the ready browser")
		}
		if inst := instanceOf(f, hitID); inst == nil || inst.stub.Created() != 1 {
			t.Fatal("a hit's driver was sent a second new session")
		}
		if !strings.Contains(string(filled), `--headless`) {
			t.Fatalf("the ready browser was not started with the entry's caps: %s", filled)
		}
		f.ev.Wait(t, "warm pool hit", time.Second)
		if got := sample(t, f, "websummoner_pool_claims_total", "result", string(pool.Hit)); got != 1 {
			t.Fatalf("hits counted = %v, want 1", got)
		}
		if resp, _ := f.do("GET", "/session/"+hitID+"/url", ""); resp.StatusCode != 200 {
			t.Fatalf("the hit's session does not answer commands: %d", resp.StatusCode)
		}

		// The pool refills; a near hit: same container, other browser options.
		time.Sleep(2 * time.Second)
		synctest.Wait()
		<-l.bodies // the refill's
		ready = liveSet(l)
		resp, body = f.do("POST", "/session", `{"capabilities":{"alwaysMatch":{"browserName":"chrome","goog:chromeOptions":{"args":["--lang=de"]}}}}`)
		if resp.StatusCode != 200 {
			t.Fatalf("near hit: %d %v", resp.StatusCode, body)
		}
		nearID := sessionID(t, body)
		if s, _ := f.sess.Get(nearID); s == nil || !ready[s.Instance] {
			t.Fatal("a near hit did not get the ready browser")
		}
		synctest.Wait()
		sentOwn := false
		for len(l.bodies) > 0 { // the near hit's, and the refill's
			if strings.Contains(string(<-l.bodies), "--lang=de") {
				sentOwn = true
			}
		}
		if !sentOwn {
			t.Fatal("the near hit's own capabilities did not reach the driver")
		}
		if got := sample(t, f, "websummoner_pool_claims_total", "result", string(pool.Near)); got != 1 {
			t.Fatalf("near hits counted = %v, want 1", got)
		}
		// The driver serves one session, the client's: the pooled one is gone.
		if inst := instanceOf(f, nearID); inst == nil || inst.stub.Created() != 2 || inst.stub.Live() != 1 {
			t.Fatal("a near hit's driver does not hold the client's session alone")
		}

		// A miss: another container (a screen size).
		time.Sleep(2 * time.Second)
		synctest.Wait()
		for len(l.bodies) > 0 {
			<-l.bodies
		}
		ready = liveSet(l)
		resp, body = f.do("POST", "/session", `{"capabilities":{"alwaysMatch":{"browserName":"chrome","selenoid:options":{"screenResolution":"1024x768x24"}}}}`)
		if resp.StatusCode != 200 {
			t.Fatalf("miss: %d %v", resp.StatusCode, body)
		}
		missID := sessionID(t, body)
		if s, _ := f.sess.Get(missID); s == nil || ready[s.Instance] {
			t.Fatal("a miss was given the ready browser")
		}
		if got := sample(t, f, "websummoner_pool_claims_total", "result", string(pool.Miss)); got != 1 {
			t.Fatalf("misses counted = %v, want 1", got)
		}
		// With three slots held (two sessions, one ready browser), the miss
		// took the ready browser's slot.
		if got := sample(t, f, "websummoner_pool_discarded_total", "reason", pool.ReasonEvicted); got != 1 {
			t.Fatalf("evictions = %v, want 1", got)
		}
		var used []*stubInstance
		for _, id := range []string{hitID, nearID, missID} {
			used = append(used, instanceOf(f, id))
			f.do("DELETE", "/session/"+id, "")
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		live := liveSet(l)
		for _, inst := range used {
			if live[inst] {
				t.Fatal("a browser outlived its session (single use: never returned to the pool)")
			}
		}
		if len(live) != 1 {
			t.Fatalf("browsers live after every session ended = %d, want the pool's 1", len(live))
		}
	})
}

func TestWarmPoolNeverExceedsLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := &stubLauncher{}
		f := newWarmFixture(t, queue.Options{Limit: 2}, pool.Options{Size: 5}, l)
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if n := l.liveCount(); n != 2 {
			t.Fatalf("ready browsers with -limit 2 = %d, want 2", n)
		}
		// Misses with every slot held by the pool: each evicts one at once,
		// even one that asked not to wait.
		var ids []string
		for i, hdr := range [][]string{nil, {"X-Selenoid-No-Wait", ""}} {
			resp, body := f.do("POST", "/session", `{"capabilities":{"alwaysMatch":{"browserName":"chrome","selenoid:options":{"timeZone":"Europe/Berlin"}}}}`, hdr...)
			if resp.StatusCode != 200 {
				t.Fatalf("miss %d with the pool holding every slot: %d %v", i, resp.StatusCode, body)
			}
			ids = append(ids, sessionID(t, body))
			if n := l.liveCount(); n > 2 {
				t.Fatalf("%d browsers live with -limit 2", n)
			}
		}
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if st := f.hub.pool.Stats(); len(st) != 1 || st[0].Ready != 0 {
			t.Fatalf("pool with clients holding every slot: %+v, want none ready", st)
		}
		if got := sample(t, f, "websummoner_pool_discarded_total", "reason", pool.ReasonEvicted); got != 2 {
			t.Fatalf("evictions = %v, want 2", got)
		}
		for _, id := range ids {
			f.do("DELETE", "/session/"+id, "")
		}
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if n := l.liveCount(); n != 2 {
			t.Fatalf("ready browsers once the clients left = %d, want 2", n)
		}
	})
}

func TestWarmPoolDeadBrowserNotHandedOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := &stubLauncher{}
		f := newWarmFixture(t, queue.Options{Limit: 2}, pool.Options{Size: 1}, l)
		time.Sleep(2 * time.Second)
		synctest.Wait()
		l.mu.Lock()
		var pooled *stubInstance
		for inst := range l.live {
			pooled = inst
		}
		l.mu.Unlock()
		// It dies without a word (no exit seen yet): only the check finds it.
		pooled.close()
		resp, body := f.do("POST", "/session", w3cChrome)
		if resp.StatusCode != 200 {
			t.Fatalf("%d %v", resp.StatusCode, body)
		}
		s, ok := f.sess.Get(sessionID(t, body))
		if !ok || s.Instance == launcher.Instance(pooled) {
			t.Fatal("the dead browser was handed out")
		}
		if got := sample(t, f, "websummoner_pool_discarded_total", "reason", pool.ReasonDead); got != 1 {
			t.Fatalf("dead discards = %v, want 1", got)
		}
		f.do("DELETE", "/session/"+sessionID(t, body), "")
	})
}

func TestWarmPoolOffStartsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := &stubLauncher{mem: newMemTransport()}
		f := newFixture(t, queue.Options{Limit: 2}, Options{}, l)
		time.Sleep(time.Minute)
		synctest.Wait()
		if n := l.starts.Load(); n != 0 || f.hub.pool != nil {
			t.Fatalf("-warm-pool off started %d browsers", n)
		}
		resp, _ := f.do("GET", "/status", "")
		if resp.StatusCode != 200 {
			t.Fatal(resp.StatusCode)
		}
	})
}

func TestWarmPoolDrains(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := &stubLauncher{}
		f := newWarmFixture(t, queue.Options{Limit: 3}, pool.Options{Size: 2}, l)
		time.Sleep(5 * time.Second)
		synctest.Wait()
		done := make(chan struct{})
		go func() { f.hub.Drain(context.Background()); close(done) }()
		<-done // ready browsers hold no one: the drain does not wait for them
		if n := l.liveCount(); n != 0 {
			t.Fatalf("%d ready browsers left after a drain", n)
		}
	})
}

// "warm" sizes an entry's pool over -warm-pool N, 0 included: a default
// version set to 0 keeps none, not N as if unset.
func TestEntriesWarm(t *testing.T) {
	f := newFixture(t, queue.Options{Limit: 1}, Options{}, &stubLauncher{})
	bs, err := config.Parse([]byte(`{"chrome": {"default": "2", "versions": {
		"2": {"image": ["chromedriver"], "warm": 0}, "1": {"image": ["chromedriver"], "warm": 3}}},
		"other": {"default": "1", "versions": {"1": {"image": ["chromedriver"]}, "0": {"image": ["chromedriver"]}}}}`), true)
	if err != nil {
		t.Fatal(err)
	}
	f.hub.conf = config.NewStore(bs)
	got := f.hub.Entries(2)
	want := map[pool.Key]int{{Browser: "chrome", Version: "2"}: 0, {Browser: "chrome", Version: "1"}: 3,
		{Browser: "other", Version: "1"}: 2, {Browser: "other", Version: "0"}: 0}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Entries(2) = %v, want %v", got, want)
	}
}

func TestPoolShape(t *testing.T) {
	if !poolShape(webdriver.Options{Name: "a test", SessionTimeout: time.Minute, Ignored: []string{"selenoid:options.x"}, Env: []string{}, Labels: map[string]string{}}) {
		t.Fatal("options only the hub reads made a request a miss")
	}
	for what, o := range map[string]webdriver.Options{
		"video": {EnableVideo: true}, "VNC": {EnableVNC: true}, "screen": {ScreenResolution: "1024x768x24"},
		"time zone": {TimeZone: "UTC"}, "env": {Env: []string{"A=1"}}, "labels": {Labels: map[string]string{"a": "b"}},
		"log": {EnableLog: true}, "hosts": {HostsEntries: []string{"a:1.2.3.4"}}, "hostname": {ContainerHostname: "x"},
	} {
		if poolShape(o) {
			t.Errorf("a request with %s took a ready browser's container", what)
		}
	}
}

func TestWarmPoolInStatus(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := &stubLauncher{}
		f := newWarmFixture(t, queue.Options{Limit: 2}, pool.Options{Size: 2}, l)
		time.Sleep(5 * time.Second)
		synctest.Wait()
		_, st := f.do("GET", "/status", "")
		rows, _ := st["pool"].([]any)
		if len(rows) != 1 {
			t.Fatalf("/status pool = %v, want one row", st["pool"])
		}
		row := rows[0].(map[string]any)
		if row["browser"] != "chrome" || row["version"] != "128.0" || row["ready"] != 2.0 || row["target"] != 2.0 {
			t.Fatalf("/status pool row = %v", row)
		}
		if st["used"] != 2.0 {
			t.Fatalf("/status used = %v, want 2: ready browsers hold slots", st["used"])
		}
		_, ws := f.do("GET", "/wd/hub/status", "")
		if v := ws["value"].(map[string]any); v["ready"] != true {
			t.Fatalf("W3C status with every slot held by ready browsers (a request would take one): %v", v)
		}
		if got := sample(t, f, "websummoner_pool_ready", "version", "128.0"); got != 2 {
			t.Fatalf("websummoner_pool_ready = %v, want 2", got)
		}
	})
}

// A tenant header that is no tenant's name is refused whole, not cut:
// cut at 128 bytes, two long names would be one tenant, and one cut inside
// a character would not be UTF-8.
func TestTenantHeaderRefused(t *testing.T) {
	f := newFixture(t, queue.Options{Limit: 1}, Options{TenantHeader: "X-Team"}, &stubLauncher{})
	for what, v := range map[string]string{
		"129 bytes":                  strings.Repeat("B", 128) + "x",
		"not UTF-8":                  "team-\xff\xfe",
		"a character past 128 bytes": strings.Repeat("A", 127) + "é", // cut, it was not UTF-8
	} {
		resp, body := f.do("POST", "/session", w3cChrome, "X-Team", v)
		if code, msg := errOf(body); resp.StatusCode != 400 || code != "invalid argument" || !strings.Contains(msg, "X-Team") {
			t.Errorf("%s: %d %q %q, want 400 invalid argument naming the header", what, resp.StatusCode, code, msg)
		}
	}
	resp, body := f.do("POST", "/session", w3cChrome, "X-Team", strings.Repeat("é", 64))
	if resp.StatusCode != 200 {
		t.Fatalf("a 128-byte UTF-8 name: %d %v", resp.StatusCode, body)
	}
	f.do("DELETE", "/session/"+sessionID(t, body), "")
}

// newTenantPoolFixture is a hub in fake time with quotas, tenants by the
// X-Team header and a warm pool of one, filled.
func newTenantPoolFixture(t *testing.T, quotas string, limit int, timeout time.Duration) *fixture {
	t.Helper()
	qs, err := queue.ParseQuotas([]byte(quotas))
	if err != nil {
		t.Fatal(err)
	}
	l := &stubLauncher{mem: newMemTransport()}
	f := newFixture(t, queue.Options{Limit: limit, Timeout: timeout, Quotas: qs}, Options{TenantHeader: "X-Team", WarmPool: pool.Options{Size: 1}}, l)
	f.hub.Start()
	t.Cleanup(func() { f.hub.pool.Close(); synctest.Wait() })
	time.Sleep(2 * time.Second)
	synctest.Wait()
	return f
}

// teamAAtMaxSessions creates team-a's one session, lets the pool refill,
// and sends team-a's next request, which must wait: done gets its status.
func teamAAtMaxSessions(t *testing.T, f *fixture) (first string, done chan int) {
	t.Helper()
	resp, body := f.do("POST", "/session", w3cChrome, "X-Team", "team-a")
	if resp.StatusCode != 200 {
		t.Fatalf("team-a's first: %d %v", resp.StatusCode, body)
	}
	first = sessionID(t, body)
	time.Sleep(2 * time.Second) // the pool refills
	synctest.Wait()
	done = make(chan int, 1)
	go func() {
		resp, _ := f.do("POST", "/session", w3cChrome, "X-Team", "team-a")
		done <- resp.StatusCode
	}()
	synctest.Wait()
	select {
	case code := <-done:
		t.Fatalf("team-a past its maxSessions got an answer at once: %d", code)
	default:
	}
	return first, done
}

// Without authentication, -tenant-header names the tenant: a tenant at its
// maxSessions waits, and neither a free slot nor a ready browser goes to it.
func TestTenantHeaderAndMaxSessions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newTenantPoolFixture(t, `{"team-a": {"maxSessions": 1}}`, 3, time.Minute)
		first, done := teamAAtMaxSessions(t, f)
		if st := f.hub.pool.Stats(); len(st) != 1 || st[0].Ready != 1 {
			t.Fatalf("a tenant at its maxSessions took the ready browser: %+v", st)
		}
		resp, body := f.do("POST", "/session", w3cChrome, "X-Team", "team-b")
		if resp.StatusCode != 200 {
			t.Fatalf("team-b: %d %v", resp.StatusCode, body)
		}
		rows := map[string]float64{}
		_, st := f.do("GET", "/status", "")
		for _, r := range st["tenants"].([]any) {
			r := r.(map[string]any)
			rows[r["tenant"].(string)] = r["sessions"].(float64)
		}
		if rows["team-a"] != 1 || rows["team-b"] != 1 {
			t.Fatalf("/status tenants = %v, want team-a 1 and team-b 1 (the ready browser counted as team-b's once taken)", rows)
		}
		f.do("DELETE", "/session/"+first, "")
		synctest.Wait()
		if code := <-done; code != 200 {
			t.Fatalf("team-a's waiting request once its session ended: %d", code)
		}
		for _, s := range f.sess.List() {
			f.do("DELETE", "/session/"+s.ID, "")
		}
	})
}

// A request of a tenant at its maxSessions evicts no ready browser: it
// would wait whatever is freed, and each eviction cost a browser's start
// and other tenants their ready one, the refused requests' too. It counts
// as a miss.
func TestCappedTenantEvictsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newTenantPoolFixture(t, `{"team-a": {"maxSessions": 1, "maxQueued": 1}}`, 2, time.Minute)
		resp, body := f.do("POST", "/session", w3cChrome, "X-Team", "team-a")
		if resp.StatusCode != 200 {
			t.Fatalf("team-a's first: %d %v", resp.StatusCode, body)
		}
		first := sessionID(t, body)
		time.Sleep(2 * time.Second) // the pool refills: both slots held
		synctest.Wait()
		misses := sample(t, f, "websummoner_pool_claims_total", "result", "miss")
		ctx, cancel := context.WithCancel(context.Background())
		waiting := httptest.NewRequest("POST", "/session", strings.NewReader(w3cChrome)).WithContext(ctx)
		waiting.Header.Set("X-Team", "team-a")
		go f.hub.ServeHTTP(httptest.NewRecorder(), waiting) // waits for team-a's session
		synctest.Wait()
		if resp, body := f.do("POST", "/session", w3cChrome, "X-Team", "team-a"); resp.StatusCode != 429 {
			t.Fatalf("team-a past its maxQueued: %d %v", resp.StatusCode, body)
		}
		if resp, body := f.do("POST", "/session", w3cChrome, "X-Team", "team-a", NoWaitHeader, "1"); resp.StatusCode != 429 {
			t.Fatalf("team-a's no-wait request at its maxSessions: %d %v", resp.StatusCode, body)
		}
		synctest.Wait()
		if got := sample(t, f, "websummoner_pool_discarded_total", "reason", "evicted"); got != 0 {
			t.Fatalf("%v ready browsers evicted for a tenant at its maxSessions", got)
		}
		if st := f.hub.pool.Stats(); len(st) != 1 || st[0].Ready != 1 {
			t.Fatalf("pool after team-a's requests: %+v, want its ready browser kept", st)
		}
		if got := sample(t, f, "websummoner_pool_claims_total", "result", "miss") - misses; got != 3 {
			t.Fatalf("misses counted for team-a's three requests: %v", got)
		}
		cancel()
		synctest.Wait()
		f.do("DELETE", "/session/"+first, "")
	})
}

// A reload that lets a waiting tenant run gives it a ready browser's slot
// at once, as a request arriving gets one: it must not wait behind ready
// browsers until a session ends.
func TestQuotaReloadFreesReadySlotsForWaiters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newTenantPoolFixture(t, `{"team-a": {"maxSessions": 1}}`, 2, 10*time.Minute)
		first, done := teamAAtMaxSessions(t, f)
		raised, err := queue.ParseQuotas([]byte(`{"team-a": {"maxSessions": 3}}`))
		if err != nil {
			t.Fatal(err)
		}
		f.hub.SetQuotas(raised)
		time.Sleep(5 * time.Second) // the ready browser stops; the waiter's browser starts
		synctest.Wait()
		select {
		case code := <-done:
			if code != 200 {
				t.Fatalf("team-a's waiter after the reload: %d", code)
			}
		default:
			t.Fatal("team-a's waiter still waits behind a ready browser after a reload let it run")
		}
		f.do("DELETE", "/session/"+first, "")
		for _, s := range f.sess.List() {
			f.do("DELETE", "/session/"+s.ID, "")
		}
	})
}

// A pool short of three browsers behind the default start gate (adaptive,
// 2 starts at once at first): the first fill runs alone, its healthy start
// grows the gate, and the other two overlap, each begun as soon as the gate
// permits it. Before, fills never grew the gate (they leave its last permit
// to clients, so they never filled it) and ran one at a time: 6 s for three
// 2 s starts.
func TestWarmPoolFillsOverlapBehindTheStartGate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, err := capacity.New(capacity.Options{Limit: 10}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		l := &stubLauncher{stub: wdstub.Options{NewSessionDelay: 2 * time.Second}}
		f := newWarmFixture(t, queue.Options{Limit: 10, Gate: g}, pool.Options{Size: 3}, l)
		time.Sleep(4*time.Second + 500*time.Millisecond)
		synctest.Wait()
		if st := f.hub.pool.Stats(); len(st) != 1 || st[0].Ready != 3 {
			t.Fatalf("pool 4.5 s after start: %+v, want 3 ready (one 2 s start, then two side by side)", st)
		}
		if gs := g.Stats(); gs.Limit < 4 || gs.InFlight != 0 {
			t.Fatalf("gate after the fills: %+v, want a limit of 4 or more and nothing in flight", gs)
		}
		// A client's start still finds its permit: a miss starts at once.
		resp, body := f.do("POST", "/session", `{"capabilities":{"alwaysMatch":{"browserName":"chrome","selenoid:options":{"timeZone":"UTC"}}}}`)
		if resp.StatusCode != 200 {
			t.Fatalf("miss beside the pool: %d %v", resp.StatusCode, body)
		}
		f.do("DELETE", "/session/"+sessionID(t, body), "")
	})
}

// Near hits start browsers behind the start gate, as cold starts do: a
// near hit starts a whole browser in its warm container.
func TestWarmPoolNearHitsBehindTheStartGate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, err := capacity.New(capacity.Options{Limit: 8, Mode: capacity.Fixed, Fixed: 2}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		l := &stubLauncher{stub: wdstub.Options{NewSessionDelay: 2 * time.Second}}
		f := newWarmFixture(t, queue.Options{Limit: 8, Gate: g}, pool.Options{Size: 4}, l)
		time.Sleep(time.Minute) // the pool fills, two at a time
		synctest.Wait()
		if st := f.hub.pool.Stats(); len(st) != 1 || st[0].Ready != 4 {
			t.Fatalf("pool: %+v, want 4 ready", st)
		}
		t0 := time.Now()
		took := make(chan time.Duration, 4)
		for range 4 {
			go func() {
				resp, body := f.do("POST", "/session", `{"capabilities":{"alwaysMatch":{"browserName":"chrome","goog:chromeOptions":{"args":["--lang=de"]}}}}`)
				if resp.StatusCode != 200 {
					t.Errorf("near hit: %d %v", resp.StatusCode, body)
				}
				took <- time.Since(t0)
			}()
		}
		var last time.Duration
		for range 4 {
			last = max(last, <-took)
		}
		if got := sample(t, f, "websummoner_pool_claims_total", "result", string(pool.Near)); got != 4 {
			t.Fatalf("near hits = %v, want 4", got)
		}
		if last < 4*time.Second {
			t.Fatalf("four near hits of 2 s each behind a gate of 2 took %v, want two rounds (4 s)", last)
		}
		for _, s := range f.sess.List() {
			f.do("DELETE", "/session/"+s.ID, "")
		}
	})
}

// A near hit whose warm browser fails its client's session starts cold:
// the gate hears the warm start failed, and the cold start takes a permit
// of its own (it was counted as a warm start, cold start's time and all).
func TestWarmPoolNearHitFallsBackCold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		greg := prometheus.NewRegistry()
		g, err := capacity.New(capacity.Options{Limit: 4, Mode: capacity.Fixed, Fixed: 2}, nil, greg)
		if err != nil {
			t.Fatal(err)
		}
		l := &stubLauncher{wrap: func(next http.Handler) http.Handler {
			var creates atomic.Int32 // this driver's: its second session fails
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodPost && r.URL.Path == "/session" && creates.Add(1) == 2 {
					webdriver.WriteError(w, http.StatusInternalServerError, webdriver.ErrSessionNotCreated, "the browser crashed")
					return
				}
				next.ServeHTTP(w, r)
			})
		}}
		f := newWarmFixture(t, queue.Options{Limit: 4, Gate: g}, pool.Options{Size: 1}, l)
		time.Sleep(2 * time.Second)
		synctest.Wait()
		resp, body := f.do("POST", "/session", `{"capabilities":{"alwaysMatch":{"browserName":"chrome","goog:chromeOptions":{"args":["--lang=de"]}}}}`)
		if resp.StatusCode != 200 {
			t.Fatalf("a near hit whose warm browser failed: %d %v, want a cold start's session", resp.StatusCode, body)
		}
		outcome := func(o string) float64 {
			mfs, _ := greg.Gather()
			for _, mf := range mfs {
				if mf.GetName() == "websummoner_gate_start_outcomes_total" {
					for _, m := range mf.GetMetric() {
						if m.GetLabel()[0].GetValue() == o {
							return m.GetCounter().GetValue()
						}
					}
				}
			}
			return -1
		}
		if failed := outcome(queue.StartFailed.String()); failed != 1 {
			t.Fatalf("gate outcomes failed = %v, want 1 (the warm browser's)", failed)
		}
		f.do("DELETE", "/session/"+sessionID(t, body), "")
		synctest.Wait()
		if st := g.Stats(); st.InFlight != 0 {
			t.Fatalf("gate after the session: %+v, want nothing in flight", st)
		}
	})
}

// A near hit's browser is replaced only once the client's own session
// exists on it: the refill, the lowest-priority start, does not start a
// browser beside the client's starting one.
func TestWarmPoolNearHitRefillsAfterItsSession(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := &stubLauncher{stub: wdstub.Options{NewSessionDelay: time.Second}}
		f := newWarmFixture(t, queue.Options{Limit: 3}, pool.Options{Size: 1}, l)
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if n := l.starts.Load(); n != 1 {
			t.Fatalf("browsers started by a pool of 1 = %d, want 1", n)
		}
		done := make(chan string, 1)
		go func() {
			_, body := f.do("POST", "/session", `{"capabilities":{"alwaysMatch":{"browserName":"chrome","goog:chromeOptions":{"args":["--lang=de"]}}}}`)
			done <- sessionID(t, body)
		}()
		time.Sleep(500 * time.Millisecond) // the near hit's session is starting
		synctest.Wait()
		if n := l.starts.Load(); n != 1 {
			t.Fatalf("browsers started while the near hit's session starts = %d, want 1 (no refill yet)", n)
		}
		id := <-done
		if got := sample(t, f, "websummoner_pool_claims_total", "result", string(pool.Near)); got != 1 {
			t.Fatalf("near hits counted = %v, want 1", got)
		}
		time.Sleep(1500 * time.Millisecond)
		synctest.Wait()
		if st := f.hub.pool.Stats(); l.starts.Load() != 2 || len(st) != 1 || st[0].Ready != 1 {
			t.Fatalf("after the near hit: %d browsers started, pool %+v; want the refill ready", l.starts.Load(), st)
		}
		f.do("DELETE", "/session/"+id, "")
	})
}

// A near hit whose client leaves before its session is started gives its
// browser back to nobody: the browser is stopped, and the refill starts.
func TestWarmPoolNearHitAbandonedRefills(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := &stubLauncher{}
		f := newWarmFixture(t, queue.Options{Limit: 3}, pool.Options{Size: 1}, l)
		time.Sleep(2 * time.Second)
		synctest.Wait()
		ctx, cancel := context.WithCancel(context.Background())
		c := &creation{id: "gone", ctx: ctx, w3c: true, caps: map[string]any{"browserName": "chrome", "goog:chromeOptions": map[string]any{"args": []any{"--lang=de"}}}}
		b, err := f.hub.conf.Browsers().Find("chrome", "")
		if err != nil {
			t.Fatal(err)
		}
		c.browser = b
		if !f.hub.claim(c) || c.warm != pool.Near {
			t.Fatalf("claim = %v %q, want a near hit", c.inst, c.warm)
		}
		cancel()
		f.hub.abandon(c) // as runPhases does for a client gone after admit
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if st := f.hub.pool.Stats(); len(st) != 1 || st[0].Ready != 1 {
			t.Fatalf("pool after an abandoned near hit: %+v, want the refill ready", st)
		}
	})
}

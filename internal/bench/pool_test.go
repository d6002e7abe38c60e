package bench

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// The pool scenario's figures come from the hub's /metrics and /status: a
// label read wrongly would turn a miss into a hit or hide a leak.
func TestPoolMetricsAndStatus(t *testing.T) {
	const metrics = `# HELP websummoner_pool_claims_total x
websummoner_pool_claims_total{result="hit"} 7
websummoner_pool_claims_total{result="miss"} 2
websummoner_pool_claims_total{result="near"} 1
websummoner_pool_discarded_total{reason="evicted"} 3
websummoner_pool_discarded_total{reason="surplus"} 1
websummoner_pool_fills_total{result="ready"} 11
websummoner_pool_ready{browser="stub",version="1"} 2
websummoner_pool_ready{browser="chrome",version="local"} 1
websummoner_sessions_total{result="hit"} 99
`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(metrics)) }))
	defer srv.Close()
	m, err := readPoolMetrics(srv.Client(), srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if m.claims["hit"] != 7 || m.claims["near"] != 1 || m.claims["miss"] != 2 || m.discardedAll() != 4 || m.fills["ready"] != 11 || m.ready != 3 {
		t.Fatalf("read %+v", m)
	}
	run := &poolRun{m: m}
	if run.starts() != 13 || run.unused() != 7 || run.hitRate() != 0.7 {
		t.Errorf("starts %v, unused %v, hit rate %v; want 13, 7, 0.7", run.starts(), run.unused(), run.hitRate())
	}

	before := m
	before.claims = map[string]float64{"hit": 7, "near": 0, "miss": 2}
	if v := m.verdict(before); v != "near" {
		t.Errorf("one near claim more: verdict %q", v)
	}
	before.claims = map[string]float64{"hit": 6, "near": 0, "miss": 2}
	if v := m.verdict(before); v != "" {
		t.Errorf("two claims more: verdict %q, want none", v)
	}

	var st poolStatus
	if err := json.Unmarshal([]byte(`{"used":5,"queued":0,"pending":0,
		"browsers":{"stub":{"1":{"unknown":{"count":2,"sessions":[]}}}},
		"pool":[{"browser":"stub","version":"1","ready":1,"filling":1,"target":3}]}`), &st); err != nil {
		t.Fatal(err)
	}
	if st.sessions() != 2 || st.stray() != 1 {
		t.Errorf("sessions %d, stray slots %d; want 2, 1", st.sessions(), st.stray())
	}
}

// The same seed gives the adaptive and the off run the same arrivals, at
// the rate asked for, and the result's ratio reads the runs it was given.
func TestPoolAdaptiveResult(t *testing.T) {
	s := poolLoadSpec{mode: "adaptive", rate: 2, d: 10 * time.Minute, holdMin: 5 * time.Second, holdX: 15 * time.Second, seed: 37}
	a := poolArrivals(s)
	s.mode = "off"
	b := poolArrivals(s)
	if len(a) != len(b) || a[len(a)/2] != b[len(b)/2] {
		t.Fatalf("two runs of one seed differ: %d and %d arrivals", len(a), len(b))
	}
	if n := float64(len(a)); n < 1100 || n > 1300 {
		t.Errorf("%v arrivals in 10 minutes at 2/s", n)
	}
	for _, x := range a {
		if x.hold < s.holdMin || x.hold >= s.holdMin+s.holdX || x.at >= s.d {
			t.Fatalf("arrival %+v outside the spec", x)
		}
	}

	spec := poolLoadSpec{mode: "adaptive", rate: 1, d: 10 * time.Second}
	half := &poolRun{spec: spec, m: poolMetrics{claims: map[string]float64{"hit": 9, "miss": 1}, fills: map[string]float64{"ready": 10}, discarded: map[string]float64{"surplus": 1}}}
	fa := &poolRun{spec: spec, completed: 19, m: poolMetrics{claims: map[string]float64{"miss": 30}}}
	off := spec
	off.mode = "off"
	fo := &poolRun{spec: off, completed: 20}
	r := poolAdaptiveResult([]*poolRun{half, fa, fo}, 0.8)
	if got := r.Figures["full_adaptive_over_off"]; got != 0.95 {
		t.Errorf("adaptive over off %v, want 0.95", got)
	}
	if got := r.Figures["half_hit_rate"]; got != 0.9 {
		t.Errorf("hit rate %v, want 0.9", got)
	}
	if r.CorrectnessMissed() != 0 || len(r.Rows) != 3 {
		t.Errorf("%d correctness misses, %d rows", r.CorrectnessMissed(), len(r.Rows))
	}
}

// The ideal pool, the scale for a run's hit rate: it misses only when
// sessions and refills hold every slot.
func TestPoolIdeal(t *testing.T) {
	s := time.Second
	// Spaced requests on two slots: every one finds a browser.
	var spaced []poolArrival
	for i := range 10 {
		spaced = append(spaced, poolArrival{at: time.Duration(5+10*i) * s, hold: s})
	}
	if got := poolIdeal(spaced, 2, 2*s, 0); got != 1 {
		t.Errorf("spaced requests: ideal hit rate %v, want 1", got)
	}
	// One slot held by a long session: the next request has nothing, and
	// a request before the first browser is up has nothing either.
	long := []poolArrival{{at: 5 * s, hold: 100 * s}, {at: 6 * s, hold: s}}
	if got := poolIdeal(long, 1, 2*s, 0); got != 0.5 {
		t.Errorf("one slot, held: ideal hit rate %v, want 0.5", got)
	}
	early := []poolArrival{{at: s, hold: s}, {at: 10 * s, hold: s}}
	if got := poolIdeal(early, 2, 2*s, 0); got != 0.5 {
		t.Errorf("a request before any browser is ready: ideal hit rate %v, want 0.5", got)
	}
	if got := poolIdeal(early, 2, 2*s, 5*s); got != 1 {
		t.Errorf("counted from 5 s on: ideal hit rate %v, want 1", got)
	}
	// Half load on 10 slots, sessions of 5–20 s, 2 s starts: sessions and
	// refills hold every slot about 8 % of the time.
	half := poolArrivals(poolLoadSpec{rate: 0.4, d: time.Hour, holdMin: 5 * s, holdX: 15 * s, seed: 37})
	if got := poolIdeal(half, 10, 2*s, time.Minute); got < 0.88 || got > 0.95 {
		t.Errorf("an hour at half load: ideal hit rate %v, want about 0.92", got)
	}
}

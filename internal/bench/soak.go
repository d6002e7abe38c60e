package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/websummoner/websummoner/internal/hostile"
	"github.com/websummoner/websummoner/internal/launcher/process"
)

// Soak churns sessions at -limit 8 against drivers that misbehave at random
// phases (hostile.Faults) while clients leave at random phases, for d. Then,
// once the hub has reaped what the clients abandoned, nothing may be left: no
// session, no slot, no driver process, goroutines back to where they started,
// and RSS flat.
func (e *Env) Soak(ctx context.Context, d time.Duration) (*Result, error) {
	const limit, workers = 8, 16
	var entries, names []string
	for _, p := range []hostile.Phase{hostile.PhaseStatus, hostile.PhaseNewSession, hostile.PhaseCommand, hostile.PhaseDelete} {
		for _, f := range hostile.Faults {
			name := fmt.Sprintf("%s-%s", p, f)
			names = append(names, name)
			entries = append(entries, fmt.Sprintf(`%q: {"default": "1", "versions": {"1": {"image": [%q, "-fault", %q, "-fault-rate", "0.5"], "path": "/"}}}`,
				name, e.Stub, string(p)+"="+string(f)))
		}
	}
	names = append(names, "stub", "stub") // a healthy share of the traffic
	hub, err := e.startHub(ctx, e.stubBrowsers(entries...), "-limit", strconv.Itoa(limit), "-timeout", "2s",
		"-service-startup-timeout", "2s", "-session-attempt-timeout", "2s", "-session-delete-timeout", "2s", "-start-gate", "off")
	if err != nil {
		return nil, err
	}
	defer hub.stop()
	mon := pooled(4)
	base := hub.url + "/wd/hub"
	time.Sleep(200 * time.Millisecond)
	g0 := metric(mon, hub.url, "go_goroutines")

	var (
		mu       sync.Mutex
		outcomes = map[string]int{}
		created  atomic.Int64
		left     atomic.Int64
	)
	count := func(what string) {
		mu.Lock()
		outcomes[what]++
		mu.Unlock()
	}
	t0 := time.Now()
	deadline := t0.Add(d)
	// RSS climbs while the first 16 MiB answers are read; flat means the
	// second half of the run adds nothing to the first. Each figure is the
	// least over a window (leastRSS), the last one ending with the load: an
	// idle hub keeps a burst's freed heap until its next collection, which
	// the load keeps coming within seconds.
	window := min(rssWindow, d/10)
	earlyc, midc, endc := make(chan float64, 1), make(chan float64, 1), make(chan float64, 1)
	for _, at := range []struct {
		after time.Duration
		c     chan float64
	}{{d / 10, earlyc}, {d / 2, midc}, {d - window, endc}} {
		t := time.AfterFunc(at.after, func() { at.c <- leastRSS(hub.pid(), window) })
		defer t.Stop()
	}
	var wg sync.WaitGroup
	var transports []*http.Transport
	for range workers {
		tr := &http.Transport{MaxIdleConnsPerHost: 2}
		transports = append(transports, tr)
		wg.Go(func() {
			w := wd{c: &http.Client{Transport: tr, Timeout: 20 * time.Second}}
			for time.Now().Before(deadline) && ctx.Err() == nil {
				browser := names[rand.IntN(len(names))]
				caps := `{"capabilities":{"alwaysMatch":{"browserName":"` + browser + `"}}}`
				cctx, cancel := context.WithCancel(ctx)
				if rand.IntN(8) == 0 { // this client leaves during the creation
					time.AfterFunc(time.Duration(rand.IntN(300))*time.Millisecond, cancel)
				}
				id, code, err := w.create(cctx, base, caps)
				cancel()
				switch {
				case err != nil:
					count("client left or create failed")
					continue
				case code != 200:
					count(fmt.Sprintf("create %d", code))
					continue
				}
				created.Add(1)
				for range rand.IntN(6) {
					if code, err := w.command(base, id); err != nil || code != 200 {
						count(fmt.Sprintf("command %d", code))
						break
					}
				}
				if rand.IntN(6) == 0 {
					left.Add(1) // abandoned: the idle timeout must reap it
					continue
				}
				w.remove(base, id)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(t0)
	for _, tr := range transports {
		tr.CloseIdleConnections() // each is a goroutine in the hub, and not a leak
	}
	// What the clients abandoned ends at the idle timeout; a stop takes at most
	// the delete timeout.
	settled := false
	for wait := time.Now().Add(30 * time.Second); time.Now().Before(wait) && ctx.Err() == nil; time.Sleep(250 * time.Millisecond) {
		if statusField(mon, hub.url, "used") == 0 && statusField(mon, hub.url, "pending") == 0 && statusField(mon, hub.url, "queued") == 0 {
			settled = true
			break
		}
	}
	time.Sleep(time.Second) // let the last stops' goroutines unwind
	prefix := fmt.Sprintf("wsbench-%d/", os.Getpid())
	drivers := process.MarkedPIDs(func(v string) bool { return strings.HasPrefix(v, prefix) })
	g1 := metric(mon, hub.url, "go_goroutines")
	var rssEarly, rssMid, rssEnd float64
	for _, r := range []struct {
		v *float64
		c chan float64
	}{{&rssEarly, earlyc}, {&rssMid, midc}, {&rssEnd, endc}} {
		select {
		case *r.v = <-r.c:
		case <-ctx.Done():
		}
	}
	slots := metric(mon, hub.url, "websummoner_queue_slots_in_use")
	active := metric(mon, hub.url, "websummoner_sessions_active")

	var keys []string
	total := 0
	for k, v := range outcomes {
		keys = append(keys, fmt.Sprintf("%s: %d", k, v))
		total += v
	}
	sort.Strings(keys)
	r := &Result{Scenario: "soak", Figures: map[string]float64{
		"duration_s": elapsed.Seconds(), "sessions_created": float64(created.Load()), "abandoned_by_clients": float64(left.Load()),
		"failed_or_left": float64(total), "sessions_left": active, "slots_left": slots, "driver_processes_left": float64(len(drivers)),
		"goroutines_before": g0, "goroutines_after": g1, "rss_early_mb": rssEarly / (1 << 20), "rss_mid_mb": rssMid / (1 << 20), "rss_end_mb": rssEnd / (1 << 20),
	}, Header: []string{"duration", "sessions", "abandoned", "faults and departures", "sessions left", "slots left", "drivers left", "goroutines before → after", "least RSS (10 s) at d/10 → d/2 → end of load MB"}}
	r.Rows = append(r.Rows, []string{elapsed.Round(time.Second).String(), fmt.Sprint(created.Load()), fmt.Sprint(left.Load()), fmt.Sprint(total),
		fmt.Sprint(active), fmt.Sprint(slots), fmt.Sprint(len(drivers)), fmt.Sprintf("%.0f → %.0f", g0, g1), fmt.Sprintf("%.1f → %.1f → %.1f", rssEarly/(1<<20), rssMid/(1<<20), rssEnd/(1<<20))})
	r.Notes = append(r.Notes, "outcomes the clients saw: "+strings.Join(keys, "; "))
	r.correct("sessions left after the soak", active, 0, "")
	r.correct("slots held after the soak", slots, 0, "")
	r.correct("driver processes left after the soak", float64(len(drivers)), 0, "")
	r.correct("goroutines after over before", g1-g0, 5, "goroutines")
	r.target("least RSS at the load's end over at half the run", rssEnd/rssMid, 1.3, "×")
	if !settled || active != 0 || slots != 0 || len(drivers) != 0 || g1-g0 > 5 {
		return r, fmt.Errorf("soak left something behind: settled %v, sessions %v, slots %v, drivers %v, goroutines %v → %v", settled, active, slots, drivers, g0, g1)
	}
	return r, nil
}

// rssWindow is how long leastRSS looks (a tenth of a shorter soak).
const rssWindow = 10 * time.Second

// leastRSS is pid's least RSS over window, sampled every 100 ms. Under load
// Go gives freed heap back to the kernel within seconds, so one instant's
// RSS can land on a burst of the hostile drivers' huge answers (each read up
// to the 16 MiB bound) and call it growth; a leak is in every sample.
func leastRSS(pid int, window time.Duration) float64 {
	least := rss(pid)
	for end := time.Now().Add(window); time.Now().Before(end); {
		time.Sleep(100 * time.Millisecond) // sampling, not waiting for a condition
		least = min(least, rss(pid))
	}
	return least
}

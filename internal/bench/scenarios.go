package bench

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// loop runs one worker per target, each issuing commands on its own session, for
// d or until max commands in all, and returns every command's latency.
// Each target is "base\x00session-id".
func loop(targets []string, d time.Duration, max int) ([]time.Duration, time.Duration, error) {
	w := wd{c: pooled(len(targets))}
	var mu sync.Mutex
	var lat []time.Duration
	var count atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	t0 := time.Now()
	deadline := t0.Add(d)
	for _, target := range targets {
		base, id, _ := strings.Cut(target, "\x00")
		wg.Go(func() {
			local := make([]time.Duration, 0, 1024)
			for time.Now().Before(deadline) && count.Add(1) <= int64(max) {
				s := time.Now()
				code, err := w.command(base, id)
				if err != nil || code != 200 {
					firstErr.CompareAndSwap(nil, fmt.Sprintf("status %d, %v", code, err))
					break
				}
				local = append(local, time.Since(s))
			}
			mu.Lock()
			lat = append(lat, local...)
			mu.Unlock()
		})
	}
	wg.Wait()
	elapsed := time.Since(t0)
	sortDurations(lat)
	if e := firstErr.Load(); e != nil {
		return lat, elapsed, fmt.Errorf("command failed: %s", e)
	}
	return lat, elapsed, nil
}

// Proxy measures a command loop straight to one stub driver (the floor) and the
// same loop through the hub, at each concurrency, in the same run: the two take
// turns in rounds.
func (e *Env) Proxy(ctx context.Context, concs []int) (*Result, error) {
	d, maxCmds, rounds := 10*time.Second, 200000, 5
	if e.Short {
		d, maxCmds, rounds = time.Second, 5000, 1
	}
	hub, err := e.startHub(ctx, e.stubBrowsers(), "-limit", "64")
	if err != nil {
		return nil, err
	}
	defer hub.stop()
	r := &Result{Scenario: "proxy", Figures: map[string]float64{},
		Header: []string{"C", "path", "cmds/s", "p50 ms", "p95 ms", "p99 ms", "overhead p50 µs", "overhead p99 µs"}}
	client := wd{c: pooled(64)}
	for _, c := range concs {
		// The baseline has what the hub has: one driver process per session.
		var stubs []*proc
		var direct, viaHub []string
		for range c {
			port, err := freePort()
			if err != nil {
				return nil, err
			}
			stub, err := e.start(ctx, e.Stub, []string{"-port", strconv.Itoa(port)}, port, "listening", hubEnv()...)
			if err != nil {
				return nil, err
			}
			stubs = append(stubs, stub)
			id, _, err := client.create(ctx, stub.url, stubCaps)
			if err != nil {
				return nil, err
			}
			direct = append(direct, stub.url+"\x00"+id)
			id, code, err := client.create(ctx, hub.url+"/wd/hub", stubCaps)
			if err != nil || code != 200 {
				return nil, fmt.Errorf("hub create: %d %v", code, err)
			}
			viaHub = append(viaHub, id)
		}
		// Where the CPU goes, per command: this process (the clients), the
		// stub drivers, and the proxy in between.
		var stubPIDs []int
		for _, s := range stubs {
			stubPIDs = append(stubPIDs, s.pid())
		}
		stubCPU := func() float64 { return sumCPU(stubPIDs) }
		hubIDs := make([]string, len(viaHub))
		for i, id := range viaHub {
			hubIDs[i] = hub.url + "/wd/hub\x00" + id
		}
		hubStubs := hubDrivers(hub.pid())
		directPath := &proxyPath{name: "direct", targets: direct, drivers: stubCPU}
		hubPath := &proxyPath{name: "hub", targets: hubIDs, drivers: func() float64 { return sumCPU(hubStubs) },
			proxy: func() float64 { return cpuSeconds(hub.pid()) }}
		paths := []*proxyPath{directPath}
		// The relay: the cheapest proxy, for what one extra hop costs by itself.
		var relayPath *proxyPath
		var relay *proc
		if e.Self != "" {
			var spec, relayed []string
			first := 0
			taken := map[int]bool{}
			for i, s := range stubs {
				port, err := freePort()
				for err == nil && taken[port] { // a port just closed may come again
					port, err = freePort()
				}
				if err != nil {
					return nil, err
				}
				taken[port] = true
				first = cmp.Or(first, port)
				spec = append(spec, fmt.Sprintf("%d=%s", port, strings.TrimPrefix(s.url, "http://")))
				_, id, _ := strings.Cut(direct[i], "\x00")
				relayed = append(relayed, fmt.Sprintf("http://127.0.0.1:%d\x00%s", port, id))
			}
			relay, err = e.start(ctx, e.Self, nil, first, "listening", append(hubEnv(), RelayEnv+"="+strings.Join(spec, ","))...)
			if err != nil {
				return nil, fmt.Errorf("starting the relay: %w", err)
			}
			relayPath = &proxyPath{name: "relay", targets: relayed, drivers: stubCPU,
				proxy: func() float64 { return cpuSeconds(relay.pid()) }}
			paths = append(paths, relayPath)
		}
		paths = append(paths, hubPath)
		// The paths take turns, rounds times each, so that whatever else the
		// machine does in the window weighs on all alike.
		for range rounds {
			for _, p := range paths {
				if err := p.turn(d/time.Duration(rounds), maxCmds/rounds); err != nil {
					return nil, fmt.Errorf("%s: %w", p.name, err)
				}
			}
		}
		for _, s := range stubs {
			s.stop()
		}
		if relay != nil {
			relay.stop()
		}
		cs := strconv.Itoa(c)
		for _, p := range paths {
			sortDurations(p.lat)
			r.Rows = append(r.Rows, p.row(cs, directPath))
		}
		dl, hl := directPath.lat, hubPath.lat
		r.Notes = append(r.Notes, fmt.Sprintf("%d sessions, CPU µs per command (clients / drivers / hub): direct %s / %s, via the hub %s / %s / %s",
			c, directPath.us(directPath.self), directPath.us(directPath.driverCPU), hubPath.us(hubPath.self), hubPath.us(hubPath.driverCPU), hubPath.us(hubPath.proxyCPU)))
		r.Figures[fmt.Sprintf("c%d_hub_cpu_us_per_cmd", c)] = hubPath.perCmd(hubPath.proxyCPU) * 1e6
		r.Figures[fmt.Sprintf("c%d_direct_cpu_us_per_cmd", c)] = directPath.perCmd(directPath.self+directPath.driverCPU) * 1e6
		if rp := relayPath; rp != nil {
			rl := rp.lat
			r.Notes = append(r.Notes, fmt.Sprintf("%d sessions, CPU µs per command through the relay (clients / drivers / relay): %s / %s / %s",
				c, rp.us(rp.self), rp.us(rp.driverCPU), rp.us(rp.proxyCPU)))
			r.Figures[fmt.Sprintf("c%d_relay_cpu_us_per_cmd", c)] = rp.perCmd(rp.proxyCPU) * 1e6
			r.Figures[fmt.Sprintf("c%d_relay_p50_ms", c)] = float64(percentile(rl, 50)) / 1e6
			r.Figures[fmt.Sprintf("c%d_relay_p99_ms", c)] = float64(percentile(rl, 99)) / 1e6
			r.Figures[fmt.Sprintf("c%d_relay_ratio_p50", c)] = float64(percentile(rl, 50)) / float64(percentile(dl, 50))
			r.Figures[fmt.Sprintf("c%d_hub_over_relay_p50", c)] = float64(percentile(hl, 50)) / float64(percentile(rl, 50))
		}
		o50 := percentile(hl, 50) - percentile(dl, 50)
		o99 := percentile(hl, 99) - percentile(dl, 99)
		for k, v := range map[string]time.Duration{"direct_p50": percentile(dl, 50), "direct_p95": percentile(dl, 95), "direct_p99": percentile(dl, 99),
			"hub_p50": percentile(hl, 50), "hub_p95": percentile(hl, 95), "hub_p99": percentile(hl, 99), "overhead_p50": o50, "overhead_p99": o99} {
			r.Figures[fmt.Sprintf("c%d_%s_ms", c, k)] = float64(v) / 1e6
		}
		r50, r99 := float64(percentile(hl, 50))/float64(percentile(dl, 50)), float64(percentile(hl, 99))/float64(percentile(dl, 99))
		// Reported, not targets: a stub driver answers in microseconds, so
		// these ratios weigh the hub's hop against almost nothing; the
		// realbrowser scenario holds the hub to a real driver's time.
		r.Figures[fmt.Sprintf("c%d_ratio_p50", c)] = r50
		r.Figures[fmt.Sprintf("c%d_ratio_p99", c)] = r99
		r.Notes = append(r.Notes, fmt.Sprintf("%d sessions: hub over direct p50 %.3f×, p99 %.3f× (reported, not targets)", c, r50, r99))
		for _, id := range viaHub {
			client.remove(hub.url+"/wd/hub", id)
		}
	}
	return r, nil
}

// proxyPath is one way the proxy scenario's commands take — straight to the
// drivers, through the relay, through the hub — and what its turns measured.
type proxyPath struct {
	name    string
	targets []string
	// drivers and proxy read CPU seconds used so far by the drivers this
	// path reaches and by the process in between (nil: none).
	drivers, proxy func() float64

	lat                       []time.Duration
	elapsed                   time.Duration
	self, driverCPU, proxyCPU float64 // seconds, over all turns
}

// turn runs one round of commands on the path and adds what it cost.
func (p *proxyPath) turn(d time.Duration, max int) error {
	proxyNow := func() float64 {
		if p.proxy == nil {
			return 0
		}
		return p.proxy()
	}
	self0, drivers0, proxy0 := cpuSeconds(os.Getpid()), p.drivers(), proxyNow()
	l, el, err := loop(p.targets, d, max)
	p.self += cpuSeconds(os.Getpid()) - self0
	p.driverCPU += p.drivers() - drivers0
	p.proxyCPU += proxyNow() - proxy0
	p.lat, p.elapsed = append(p.lat, l...), p.elapsed+el
	return err
}

// perCmd is sec per command of the path; us the same in µs, for notes.
func (p *proxyPath) perCmd(sec float64) float64 { return sec / float64(max(len(p.lat), 1)) }
func (p *proxyPath) us(sec float64) string      { return fmt.Sprintf("%.0f", p.perCmd(sec)*1e6) }

// row is the path's table row; a proxy's has its overhead over direct.
func (p *proxyPath) row(c string, direct *proxyPath) []string {
	row := []string{c, p.name, fmt.Sprintf("%.0f", float64(len(p.lat))/p.elapsed.Seconds()),
		ms(percentile(p.lat, 50)), ms(percentile(p.lat, 95)), ms(percentile(p.lat, 99)), "", ""}
	if p != direct {
		row[6] = fmt.Sprintf("%.0f", float64(percentile(p.lat, 50)-percentile(direct.lat, 50))/1e3)
		row[7] = fmt.Sprintf("%.0f", float64(percentile(p.lat, 99)-percentile(direct.lat, 99))/1e3)
	}
	return row
}

// Churn runs C clients doing create → K commands → delete for a while, through
// the hub and, as the floor, with the load tool doing the hub's job itself
// (floorChurn), in the same run, taking turns of churnTurn(c) each.
// At 4 clients it runs once more beside 2,000
// sleeping processes: a DELETE must not notice them.
func (e *Env) Churn(ctx context.Context, c, k int, d time.Duration) (*Result, error) {
	browsers := fmt.Sprintf(`{"stub": {"default": "1", "versions": {"1": {"image": [%q, "-delete-delay", %q], "path": "/"}}}}`, e.Stub, stubDeleteDelay.String())
	hub, err := e.startHub(ctx, browsers, "-limit", strconv.Itoa(c))
	if err != nil {
		return nil, err
	}
	defer hub.stop()
	w := wd{c: pooled(c)}
	// One client alone first: what a session creation costs without contention.
	var alone []time.Duration
	for i := 0; i < 100 && ctx.Err() == nil; i++ {
		s := time.Now()
		id, code, err := w.create(ctx, hub.url+"/wd/hub", stubCaps)
		if err != nil || code != 200 {
			return nil, fmt.Errorf("create: %d %v", code, err)
		}
		alone = append(alone, time.Since(s))
		w.remove(hub.url+"/wd/hub", id)
	}
	sortDurations(alone)
	// And the floor's one client alone, for the same figure's ratio.
	// With the hub's -limit, as the hub's one client had: with one slot the
	// floor's client waited for its last stub to be reaped, the hub's did not.
	aloneFloor := e.floorChurn(ctx, 1, c, k, min(d/2, 5*time.Second))
	rssEarly := rss(hub.pid())
	// The floor and the hub take turns, so that whatever else the machine
	// does in the window weighs on both alike. The turns are short, since a
	// virtual machine's speed can move within seconds, but long enough for
	// each client to run a few dozen sessions: every turn begins with all c
	// clients creating at once, a burst it must outlast by far.
	turn := churnTurn(c)
	rounds := max(1, int(d/turn))
	var floor, run churnRun
	var turnRatios []float64
	for range rounds {
		f := e.floorChurn(ctx, c, c, k, d/time.Duration(rounds))
		h := hubChurn(ctx, hub, c, k, d/time.Duration(rounds))
		floor, run = floor.add(f), run.add(h)
		if len(f.creates) > 0 && len(h.creates) > 0 {
			turnRatios = append(turnRatios, float64(percentile(h.creates, 50))/float64(percentile(f.creates, 50)))
		}
	}
	n := float64(run.sessions)
	r := &Result{Scenario: fmt.Sprintf("churn-%d", c), Figures: map[string]float64{
		"sessions":              n,
		"sessions_per_s":        run.perSecond(),
		"floor_sessions_per_s":  floor.perSecond(),
		"create_p50_ms":         float64(percentile(run.creates, 50)) / 1e6,
		"create_p99_ms":         float64(percentile(run.creates, 99)) / 1e6,
		"floor_create_p50_ms":   float64(percentile(floor.creates, 50)) / 1e6,
		"delete_p50_ms":         float64(percentile(run.deletes, 50)) / 1e6,
		"delete_p99_ms":         float64(percentile(run.deletes, 99)) / 1e6,
		"driver_delete_p50_ms":  float64(percentile(floor.deletes, 50)) / 1e6,
		"cpu_s_per_1000":        run.cpuSeconds / n * 1000,
		"rss_early_mb":          rssEarly / (1 << 20),
		"rss_end_mb":            run.rssEnd / (1 << 20),
		"concurrency":           float64(c),
		"commands_per_session":  float64(k),
		"stub_delete_delay_ms":  float64(stubDeleteDelay) / 1e6,
		"duration_s_per_run":    d.Seconds(),
		"one_client_create_p50": float64(percentile(alone, 50)) / 1e6,
	}, Header: []string{"path", "clients", "sessions", "sessions/s", "create p50 ms", "create p99 ms", "DELETE p50 ms", "DELETE p99 ms", "hub CPU s/1000", "errors"}}
	row := func(name string, x churnRun, cpu string) {
		r.Rows = append(r.Rows, []string{name, strconv.Itoa(c), strconv.Itoa(x.sessions), fmt.Sprintf("%.1f", x.perSecond()),
			ms(percentile(x.creates, 50)), ms(percentile(x.creates, 99)), ms(percentile(x.deletes, 50)), ms(percentile(x.deletes, 99)), cpu, fmt.Sprint(x.errs)})
	}
	if len(turnRatios) > 1 {
		// How much a turn's figure moves tells how far to trust the whole.
		sort.Float64s(turnRatios)
		q := func(p float64) float64 { return turnRatios[int(p*float64(len(turnRatios)-1)+0.5)] }
		r.Notes = append(r.Notes, fmt.Sprintf("hub create p50 over the floor's in each of %d turns of %v: min %.3f, quartiles %.3f / %.3f / %.3f, max %.3f",
			len(turnRatios), d/time.Duration(rounds), q(0), q(0.25), q(0.5), q(0.75), q(1)))
		r.Figures["turns"] = float64(len(turnRatios))
		r.Figures["turn_create_ratio_median"] = q(0.5)
	}
	// The machine's CPU a session on each path, and whose it was: the
	// hub's path costs the machine what its extra process and hop cost, and
	// the creates of the other clients wait for that CPU.
	r.Notes = append(r.Notes, fmt.Sprintf("CPU ms a session, floor: machine %.2f (load tool %.2f, stubs %.2f); hub: machine %.2f (load tool %.2f, hub %.2f, stubs %.2f)",
		floor.perSession(floor.machine), floor.perSession(floor.tool), floor.perSession(floor.stubs),
		run.perSession(run.machine), run.perSession(run.tool), run.perSession(run.cpuSeconds), run.perSession(run.stubs)))
	r.Figures["floor_machine_cpu_ms"], r.Figures["machine_cpu_ms"] = floor.perSession(floor.machine), run.perSession(run.machine)
	r.Figures["floor_tool_cpu_ms"], r.Figures["tool_cpu_ms"] = floor.perSession(floor.tool), run.perSession(run.tool)
	r.Figures["floor_stub_cpu_ms"], r.Figures["stub_cpu_ms"] = floor.perSession(floor.stubs), run.perSession(run.stubs)
	row("floor (load tool spawns the stub)", floor, "")
	row("hub", run, fmt.Sprintf("%.2f", run.cpuSeconds/n*1000))
	r.targetMin(fmt.Sprintf("hub sessions/s over the floor's at %d clients", c), run.perSecond()/floor.perSecond(), 0.85, "×")
	createRatio := float64(percentile(run.creates, 50)) / float64(percentile(floor.creates, 50))
	r.Figures["create_p50_over_floor"] = createRatio
	r.Notes = append(r.Notes, fmt.Sprintf("hub create p50 over the floor's: %.3f× (reported, not a target)", createRatio))
	if c == 4 {
		r.target("hub DELETE p50 over the driver's own DELETE p50 (4 clients)", float64(percentile(run.deletes, 50))/float64(percentile(floor.deletes, 50)), 1.2, "×")
		stop, err := sleepers(2000, d)
		if err != nil {
			return r, err
		}
		busy := hubChurn(ctx, hub, c, k, d)
		stop()
		row("hub, 2,000 sleeping processes", busy, fmt.Sprintf("%.2f", busy.cpuSeconds/float64(busy.sessions)*1000))
		r.Figures["busy_delete_p50_ms"] = float64(percentile(busy.deletes, 50)) / 1e6
		// Reported beside the targets, no longer targets themselves (issue
		// 34): a DELETE among many processes, one client's create against
		// the floor's one client, and RSS over the run.
		busyRatio := float64(percentile(busy.deletes, 50)) / float64(percentile(run.deletes, 50))
		aloneRatio := float64(percentile(alone, 50)) / float64(percentile(aloneFloor.creates, 50))
		r.Figures["busy_delete_over_delete_p50"] = busyRatio
		r.Figures["one_client_create_over_floor"] = aloneRatio
		r.Figures["rss_end_over_early"] = run.rssEnd / rssEarly
		r.Figures["floor_one_client_create_p50"] = float64(percentile(aloneFloor.creates, 50)) / 1e6
		r.Notes = append(r.Notes, fmt.Sprintf("reported, not targets: DELETE p50 beside 2,000 sleeping processes over without %.3f×; one client's create p50 over the floor's one client %.3f×; RSS at the end over after the first 100 sessions %.3f×",
			busyRatio, aloneRatio, run.rssEnd/rssEarly))
		r.Notes = append(r.Notes, fmt.Sprintf("one client alone: create p50 %s ms, p99 %s ms; the floor's one client: p50 %s ms", ms(percentile(alone, 50)), ms(percentile(alone, 99)), ms(percentile(aloneFloor.creates, 50))))
	}
	r.Notes = append(r.Notes, fmt.Sprintf("the stub takes %v to answer DELETE (a real driver quits its browser there)", stubDeleteDelay))
	failed := 0
	for _, n := range run.errs {
		failed += n
	}
	// Under a 32-client churn on 2 cores a start can fail (a stub losing its
	// port twice); more than 1% is a fault of the hub.
	if failed*100 > run.sessions {
		return r, fmt.Errorf("churn errors: %v; the hub logged:\n%s", run.errs, hub.failures())
	}
	if failed > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("%d failed requests of %d: %v; the hub logged: %s", failed, run.sessions, run.errs, hub.failures()))
	}
	return r, nil
}

// churnTurn is how long each of the floor's and the hub's turns in a churn
// lasts at c clients: short, for a virtual machine's drift, but long enough
// for a few dozen sessions a client (a client's sessions slow as clients are
// added, since they share the machine).
func churnTurn(c int) time.Duration {
	return max(time.Second, time.Duration(c)*150*time.Millisecond)
}

// Waiters queues M requests behind L held slots and measures what a waiting
// request costs the hub, then hands slots over and measures the hand-off.
func (e *Env) Waiters(ctx context.Context, l, m, handoffs int) (*Result, error) {
	q, err := e.fillQueue(ctx, l, m)
	if err != nil {
		return nil, err
	}
	defer q.close()
	for i := 0; i < handoffs && i < m; i++ {
		if err := q.handOff(); err != nil {
			return nil, err
		}
	}
	return q.result(e.Short), nil
}

// WaitersFlat measures the hand-off at two queue lengths at once: a hub with
// small waiters and one with big waiters are filled, then their hand-offs
// alternate, so that whatever the machine does meanwhile — a virtual
// machine's speed can move by half within seconds — weighs on both alike,
// and what differs is the queue's length alone. The big hub's result carries the flatness
// target (HandOffFlat); each hub's memory figures are its own process's.
func (e *Env) WaitersFlat(ctx context.Context, l, small, big, handoffs int) (smallR, bigR *Result, err error) {
	qs, err := e.fillQueue(ctx, l, small)
	if err != nil {
		return nil, nil, err
	}
	defer qs.close()
	qb, err := e.fillQueue(ctx, l, big)
	if err != nil {
		return nil, nil, err
	}
	defer qb.close()
	for i := 0; i < handoffs && i < small; i++ {
		if err := qs.handOff(); err != nil {
			return nil, nil, err
		}
		if err := qb.handOff(); err != nil {
			return nil, nil, err
		}
	}
	smallR = qs.result(e.Short)
	bigR = qb.result(e.Short)
	smallR.Notes = append(smallR.Notes, fmt.Sprintf("hand-offs alternated with a hub holding %d waiters at the same time", big))
	bigR.Notes = append(bigR.Notes, fmt.Sprintf("hand-offs alternated with a hub holding %d waiters at the same time", small))
	bigR.HandOffFlat(smallR)
	return smallR, bigR, nil
}

// waitQueue is one hub with L held slots and M requests queued behind them,
// and what was measured of it so far.
type waitQueue struct {
	hub     *proc
	ctl     wd
	m       int
	held    []string
	served  chan arrival
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	tr      *http.Transport
	hand    []time.Duration
	queued  float64
	drained bool
	before  queueMem
	peak    queueMem
}

// arrival is a waiter served: its session and when its client had the answer.
type arrival struct {
	id string
	at time.Time
}

// queueMem is the hub's memory and goroutines at one moment.
type queueMem struct{ rss, goroutines, inuse float64 }

func (q *waitQueue) mem() queueMem {
	return queueMem{rss(q.hub.pid()), metric(q.ctl.c, q.hub.url, "go_goroutines"),
		metric(q.ctl.c, q.hub.url, "go_memstats_heap_inuse_bytes") + metric(q.ctl.c, q.hub.url, "go_memstats_stack_inuse_bytes")}
}

// fillQueue starts a hub, holds its l slots and queues m requests behind
// them, each on a connection of its own, as separate CI jobs would.
func (e *Env) fillQueue(ctx context.Context, l, m int) (*waitQueue, error) {
	hub, err := e.startHub(ctx, e.stubBrowsers(), "-limit", strconv.Itoa(l))
	if err != nil {
		return nil, err
	}
	q := &waitQueue{hub: hub, ctl: wd{c: pooled(8)}, m: m, served: make(chan arrival, m),
		tr: &http.Transport{MaxIdleConnsPerHost: -1, DisableKeepAlives: true}}
	for range l {
		id, code, err := q.ctl.create(ctx, hub.url+"/wd/hub", stubCaps)
		if err != nil || code != 200 {
			hub.stop()
			return nil, fmt.Errorf("hold: %d %v", code, err)
		}
		q.held = append(q.held, id)
	}
	runtime.GC()
	time.Sleep(200 * time.Millisecond)
	q.before = q.mem()
	wctx, cancel := context.WithCancel(ctx)
	q.cancel = cancel
	wc := wd{c: &http.Client{Transport: q.tr}}
	for range m {
		q.wg.Go(func() {
			id, code, err := wc.create(wctx, hub.url+"/wd/hub", stubCaps)
			if err == nil && code == 200 {
				q.served <- arrival{id: id, at: time.Now()}
			}
		})
	}
	deadline := time.Now().Add(2 * time.Minute)
	for statusField(q.ctl.c, hub.url, "queued") < float64(m) && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	q.queued = statusField(q.ctl.c, hub.url, "queued")
	q.peak = q.mem()
	return q, nil
}

// handOff frees one slot and times it until the next waiter's session exists.
func (q *waitQueue) handOff() error {
	id := q.held[0]
	q.held = q.held[1:]
	q.ctl.remove(q.hub.url+"/wd/hub", id)
	freed := time.Now()
	var a arrival
	select {
	case a = <-q.served:
	case <-q.hub.done:
		return fmt.Errorf("the hub exited while %d requests waited: %s", q.m, q.hub.failures())
	case <-time.After(time.Minute):
		return fmt.Errorf("no waiter was served within a minute of a freed slot: %s", q.hub.failures())
	}
	q.hand = append(q.hand, a.at.Sub(freed))
	q.held = append(q.held, a.id)
	return nil
}

// close lets the waiters go, ends every session and stops the hub: on an
// error, from the caller's defer (after result, the hub is stopped already).
func (q *waitQueue) close() {
	q.drain()
	q.hub.stop()
}

// drain lets the waiters go and ends every session, once.
func (q *waitQueue) drain() {
	if q.drained {
		return
	}
	q.drained = true
	q.cancel()
	q.wg.Wait()
	q.tr.CloseIdleConnections()
	for _, id := range q.held {
		q.ctl.remove(q.hub.url+"/wd/hub", id)
	}
	q.held = nil
	close(q.served)
	for a := range q.served {
		q.ctl.remove(q.hub.url+"/wd/hub", a.id)
	}
}

// result lets the waiters go, waits for the hub's memory to come back, and
// reports; the hub is stopped after.
func (q *waitQueue) result(short bool) *Result {
	sortDurations(q.hand)
	q.drain()
	defer q.hub.stop()
	ctl, hub, m := q.ctl, q.hub, q.m
	deadline := time.Now().Add(time.Minute)
	for statusField(ctl.c, hub.url, "queued") > 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	// Freed memory shows once the hub's GC runs: at the latest the runtime's
	// forced collection every 2 minutes. Wait for it (bounded), not for RSS,
	// which Go gives back to the OS lazily.
	gcWait := 300 * time.Second
	if short {
		gcWait = time.Second
	}
	t0 := time.Now()
	for q.mem().inuse > q.before.inuse+16<<20 && time.Since(t0) < gcWait {
		time.Sleep(time.Second)
	}
	after := q.mem()
	r0 := fmt.Sprintf("after: heap in use %.1f MB, stacks in use %.1f MB, heap objects %.0f",
		metric(ctl.c, hub.url, "go_memstats_heap_inuse_bytes")/(1<<20), metric(ctl.c, hub.url, "go_memstats_stack_inuse_bytes")/(1<<20),
		metric(ctl.c, hub.url, "go_memstats_heap_objects"))
	b, p := q.before, q.peak
	perWaiter := (p.rss - b.rss) / float64(m)
	hand := q.hand
	r := &Result{Scenario: "waiters", Figures: map[string]float64{
		"waiters": float64(m), "queued_seen": q.queued,
		"rss_before_mb": b.rss / (1 << 20), "rss_peak_mb": p.rss / (1 << 20), "rss_after_mb": after.rss / (1 << 20),
		"goroutines_before": b.goroutines, "goroutines_peak": p.goroutines, "goroutines_after": after.goroutines,
		"bytes_per_waiter":           perWaiter,
		"heap_stack_inuse_before_mb": b.inuse / (1 << 20), "heap_stack_inuse_peak_mb": p.inuse / (1 << 20), "heap_stack_inuse_after_mb": after.inuse / (1 << 20),
		"handoff_p50_ms": float64(percentile(hand, 50)) / 1e6, "handoff_p99_ms": float64(percentile(hand, 99)) / 1e6,
		"handoffs": float64(len(hand)),
	}, Header: []string{"waiters", "RSS before/peak/after MB", "Go heap+stacks in use before/peak/after MB", "goroutines before/peak/after", "RSS bytes/waiter", "freed slot → next session p50/p99 ms"}}
	r.Rows = append(r.Rows, []string{strconv.Itoa(m),
		fmt.Sprintf("%.1f / %.1f / %.1f", b.rss/(1<<20), p.rss/(1<<20), after.rss/(1<<20)),
		fmt.Sprintf("%.1f / %.1f / %.1f", b.inuse/(1<<20), p.inuse/(1<<20), after.inuse/(1<<20)),
		fmt.Sprintf("%.0f / %.0f / %.0f", b.goroutines, p.goroutines, after.goroutines),
		fmt.Sprintf("%.0f", perWaiter), fmt.Sprintf("%s / %s", ms(percentile(hand, 50)), ms(percentile(hand, 99)))})
	if m >= 10000 { // the target is at 10,000 waiters: below, the arrival's fixed cost weighs on each
		r.target("RSS per waiter", perWaiter/1024, 8, "KiB")
	}
	r.Notes = append(r.Notes, "the hand-off figure includes starting the next stub driver process and its new-session call; the queue's own hand-off is BenchmarkHandOff in internal/queue (target p99 ≤ 1 ms there)")
	r.Notes = append(r.Notes, r0)
	r.Notes = append(r.Notes, "RSS after stays near the peak because Go returns freed pages to the OS lazily; the Go heap and stacks in use show what the waiters held and that it came back")
	if after.goroutines > b.goroutines+10 {
		r.Notes = append(r.Notes, fmt.Sprintf("goroutines did not return: %0.f before, %.0f after", b.goroutines, after.goroutines))
	}
	return r
}

// HandOffFlat adds the target that the hand-off does not grow with the queue:
// r's p99 (freed slot → next waiter's session) over small's, measured
// alternately with it (WaitersFlat).
func (r *Result) HandOffFlat(small *Result) {
	r.target(fmt.Sprintf("hand-off p99 at %.0f waiters over at %.0f", r.Figures["waiters"], small.Figures["waiters"]),
		r.Figures["handoff_p99_ms"]/small.Figures["handoff_p99_ms"], 1.25, "×")
}

// jamLimit is the jam scenario's -limit.
const jamLimit = 2

// Jam runs a grid whose browsers never become ready and sends one arrival per
// interval; it records each arrival's answer and when the grid reports congestion.
func (e *Env) Jam(ctx context.Context, queueTimeout, every, d time.Duration) (*Result, []JamPoint, error) {
	slow := fmt.Sprintf(`"slow": {"default": "1", "versions": {"1": {"image": [%q, "-listen-delay", "1h"], "path": "/"}}}`, e.Stub)
	hub, err := e.startHub(ctx, e.stubBrowsers(slow), "-limit", strconv.Itoa(jamLimit), "-queue-timeout", queueTimeout.String(), "-service-startup-timeout", "1h", "-start-gate", "off")
	if err != nil {
		return nil, nil, err
	}
	defer hub.stop()
	saturated := max(queueTimeout/10, time.Second)
	w := wd{c: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}}
	caps := `{"capabilities":{"alwaysMatch":{"browserName":"slow"}}}`
	start := time.Now()
	var congestedAt atomic.Int64
	congestedAt.Store(-1)
	stopPoll := make(chan struct{})
	go func() {
		mc := &http.Client{}
		for {
			select {
			case <-stopPoll:
				return
			case <-time.After(50 * time.Millisecond):
			}
			if congestedAt.Load() < 0 && metric(mc, hub.url, "websummoner_queue_congested") == 1 {
				congestedAt.Store(int64(time.Since(start)))
			}
		}
	}()
	var mu sync.Mutex
	var points []JamPoint
	var wg sync.WaitGroup
	for at := time.Duration(0); at < d; at += every {
		time.Sleep(time.Until(start.Add(at)))
		wg.Go(func() {
			s := time.Now()
			rctx, cancel := context.WithTimeout(ctx, queueTimeout+saturated+30*time.Second)
			defer cancel()
			a, _ := w.createAnswer(rctx, hub.url+"/wd/hub", caps) // no answer: status 0
			mu.Lock()
			points = append(points, JamPoint{Arrival: s.Sub(start), Answer: time.Since(s), Status: a.Status, RetryAfter: a.RetryAfter, W3C: a.W3C})
			mu.Unlock()
		})
	}
	wg.Wait()
	close(stopPoll)
	sort.Slice(points, func(i, j int) bool { return points[i].Arrival < points[j].Arrival })
	cAt := time.Duration(congestedAt.Load())
	after, within := 0, 0
	var worst time.Duration
	// What no machine's speed excuses: an arrival answered with a server
	// error or not at all, a refusal a client cannot back off by (no
	// Retry-After), an answer that is not a W3C body. The jamLimit requests
	// admitted to the jammed slots wait on browsers
	// that never come up and are cut by the client: that many unanswered
	// arrivals are the scenario, not a fault.
	var unanswered, errs, noRetry, notW3C int
	for _, p := range points {
		switch {
		case p.Status == 0:
			unanswered++
		case p.Status >= 500:
			errs++
		case p.Status == http.StatusTooManyRequests && p.RetryAfter == "":
			noRetry++
		}
		if p.Status != 0 && p.Status != http.StatusOK && !p.W3C {
			notW3C++
		}
	}
	broken := errs + max(unanswered-jamLimit, 0)
	for _, p := range points {
		if cAt >= 0 && p.Arrival > cAt {
			after++
			worst = max(worst, p.Answer)
			if p.Answer <= saturated+time.Second && p.Status == 429 {
				within++
			}
		}
	}
	share := 0.0
	if after > 0 {
		share = float64(within) / float64(after)
	}
	r := &Result{Scenario: "jam", Figures: map[string]float64{
		"queue_timeout_s": queueTimeout.Seconds(), "saturated_budget_s": saturated.Seconds(),
		"congested_at_s": cAt.Seconds(), "arrivals": float64(len(points)), "post_saturation": float64(after),
		"post_saturation_within_budget_share": share, "worst_post_saturation_answer_s": worst.Seconds(),
	}, Header: []string{"arrival s", "answered after s", "status"}}
	for _, p := range points {
		r.Rows = append(r.Rows, []string{fmt.Sprintf("%.2f", p.Arrival.Seconds()), fmt.Sprintf("%.2f", p.Answer.Seconds()), strconv.Itoa(p.Status)})
	}
	r.Notes = append(r.Notes, fmt.Sprintf("websummoner_queue_congested turned 1 at %.2fs", cAt.Seconds()))
	r.Targets = append(r.Targets, Target{Name: "post-saturation arrivals answered within saturated budget + 1s", Value: share * 100, Limit: 100, Unit: "%", Met: after > 0 && within == after})
	r.correct("arrivals answered 5xx or not at all", float64(broken), 0, "")
	r.correct("429 refusals without Retry-After", float64(noRetry), 0, "")
	r.correct("refusals without a W3C error body", float64(notW3C), 0, "")
	return r, points, nil
}

// JamPoint is one arrival of the jam scenario.
type JamPoint struct {
	Arrival, Answer time.Duration
	Status          int
	RetryAfter      string
	W3C             bool
}

// fakeHost is a Docker host with capacity K for the stampede: each stub start asks
// it how long the start takes (1× base up to K concurrent starts, longer beyond)
// and whether it fails (beyond K, or always while K is 0).
type fakeHost struct {
	mu       sync.Mutex
	k        int
	base     time.Duration
	inFlight int
	ok, fail int
}

func (h *fakeHost) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if r.URL.Path == "/end" {
		h.inFlight--
		return
	}
	h.inFlight++
	n := h.inFlight
	fail := h.k == 0 || n > h.k
	delay := h.base
	if h.k > 0 && n > h.k {
		delay = time.Duration(float64(h.base) * float64(n) / float64(h.k))
	}
	if fail {
		h.fail++
	} else {
		h.ok++
	}
	json.NewEncoder(w).Encode(map[string]any{"delayMs": delay.Milliseconds(), "fail": fail})
}

// Stampede queues n requests while the host is down, brings it back with capacity
// k, and measures failed starts and the time until every request was served, with
// the given -start-gate.
func (e *Env) Stampede(ctx context.Context, gate string, n, k int, outage, hold, capTime time.Duration) (*Result, error) {
	host := &fakeHost{base: 200 * time.Millisecond}
	hs := httptest.NewServer(host)
	defer hs.Close()
	stub := fmt.Sprintf(`"stub": {"default": "1", "versions": {"1": {"image": [%q, "-capacity-url", %q], "path": "/"}}}`, e.Stub, hs.URL)
	hub, err := e.startHub(ctx, "{"+stub+"}", "-limit", "20", "-start-gate", gate, "-service-startup-timeout", "5s")
	if err != nil {
		return nil, err
	}
	defer hub.stop()
	w := wd{c: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: n}}}
	rctx, cancel := context.WithTimeout(ctx, outage+capTime)
	defer cancel()
	var served atomic.Int64
	var lastServed atomic.Int64
	t0 := time.Now()
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i), 11))
			for rctx.Err() == nil {
				id, code, err := w.create(rctx, hub.url+"/wd/hub", stubCaps)
				if err == nil && code == 200 {
					served.Add(1)
					lastServed.Store(int64(time.Since(t0)))
					time.Sleep(hold)
					w.remove(hub.url+"/wd/hub", id)
					return
				}
				select { // the client's retry back-off
				case <-time.After(time.Duration(500+rng.IntN(1500)) * time.Millisecond):
				case <-rctx.Done():
				}
			}
		})
	}
	time.Sleep(outage)
	host.mu.Lock()
	host.k = k
	failsAtRecovery := host.fail
	host.mu.Unlock()
	recovered := time.Since(t0)
	wg.Wait()
	host.mu.Lock()
	fails, oks := host.fail, host.ok
	host.mu.Unlock()
	drain := time.Duration(lastServed.Load()) - recovered
	done := served.Load() == int64(n)
	if !done {
		drain = time.Since(t0) - recovered
	}
	r := &Result{Scenario: "stampede-" + gate, Figures: map[string]float64{
		"requests": float64(n), "capacity": float64(k), "served": float64(served.Load()),
		"failed_starts": float64(fails), "failed_starts_after_recovery": float64(fails - failsAtRecovery),
		"ok_starts": float64(oks), "drain_s": drain.Seconds(),
	}, Header: []string{"start gate", "served", "failed starts (after recovery)", "time to drain s"}}
	drained := fmt.Sprintf("%.1f", drain.Seconds())
	if !done {
		drained = "not drained after " + drained
	}
	r.Rows = append(r.Rows, []string{gate, fmt.Sprintf("%d/%d", served.Load(), n), fmt.Sprintf("%d (%d)", fails, fails-failsAtRecovery), drained})
	return r, nil
}

package bench

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/websummoner/websummoner/internal/launcher"
	"github.com/websummoner/websummoner/internal/launcher/process"
)

// stubDeleteDelay is the stub's DELETE time in the churn scenarios: a real
// driver quits its browser there (chromedriver with headless Chromium:
// tens of milliseconds), and "DELETE as fast as the driver" is judged against
// a driver that takes some time, as real ones do.
const stubDeleteDelay = 20 * time.Millisecond

// churnRun is what one churn run measured.
type churnRun struct {
	sessions           int
	elapsed            time.Duration
	creates, deletes   []time.Duration
	errs               map[string]int
	cpuSeconds, rssEnd float64 // the hub's
	// Where the machine's CPU went in the run (seconds): all of it (every
	// process and the kernel), the load tool's own, and the stub drivers'
	// (reaped: the children's time of whoever reaped them, the tool in the
	// floor, the hub through it).
	machine, tool, stubs float64
}

// cpuShares are a run's CPU figures, read at its start and end.
type cpuShares struct{ machine, tool, stubs float64 }

// readShares reads them now; reaper is the process that reaps the stubs.
func readShares(reaper int) cpuShares {
	return cpuShares{machineCPU(), cpuSeconds(os.Getpid()), childrenCPU(reaper)}
}

// since puts what was used from s0 to now into run.
func (run *churnRun) since(s0 cpuShares, reaper int) {
	s := readShares(reaper)
	run.machine, run.tool, run.stubs = s.machine-s0.machine, s.tool-s0.tool, s.stubs-s0.stubs
}

// perSession is seconds of a run as milliseconds a session.
func (c churnRun) perSession(seconds float64) float64 {
	return seconds * 1000 / float64(max(c.sessions, 1))
}

func (c churnRun) perSecond() float64 { return float64(c.sessions) / c.elapsed.Seconds() }

// add is c and another turn of the same run.
func (c churnRun) add(o churnRun) churnRun {
	c.sessions += o.sessions
	c.elapsed += o.elapsed
	c.creates = append(c.creates, o.creates...)
	c.deletes = append(c.deletes, o.deletes...)
	if c.errs == nil {
		c.errs = map[string]int{}
	}
	for k, v := range o.errs {
		c.errs[k] += v
	}
	c.cpuSeconds += o.cpuSeconds
	c.machine += o.machine
	c.tool += o.tool
	c.stubs += o.stubs
	c.rssEnd = o.rssEnd
	sortDurations(c.creates)
	sortDurations(c.deletes)
	return c
}

// churnLoop runs c clients, each repeating one until d has passed, and gathers
// what one measured: a session's creation and DELETE times, or a failure.
func churnLoop(ctx context.Context, c int, d time.Duration, one func(w wd, fail func(string)) (create, del time.Duration, ok bool)) churnRun {
	w := wd{c: pooled(c)}
	run := churnRun{errs: map[string]int{}}
	var mu sync.Mutex
	fail := func(why string) {
		mu.Lock()
		run.errs[why]++
		mu.Unlock()
	}
	t0 := time.Now()
	deadline := t0.Add(d)
	var wg sync.WaitGroup
	for range c {
		wg.Go(func() {
			for time.Now().Before(deadline) && ctx.Err() == nil {
				if create, del, ok := one(w, fail); ok {
					mu.Lock()
					run.sessions++
					run.creates = append(run.creates, create)
					run.deletes = append(run.deletes, del)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	run.elapsed = time.Since(t0)
	sortDurations(run.creates)
	sortDurations(run.deletes)
	return run
}

// churnSession is one session on the driver (or hub) at base: create — timed
// from s, which may include starting the driver — k commands, DELETE.
func churnSession(ctx context.Context, w wd, base string, k int, s time.Time, fail func(string)) (create, del time.Duration, ok bool) {
	id, code, err := w.create(ctx, base, stubCaps)
	create = time.Since(s)
	if err != nil || code != 200 {
		fail(fmt.Sprintf("create %d %v", code, err))
		return create, 0, false
	}
	for range k {
		if code, err := w.command(base, id); err != nil || code != 200 {
			fail(fmt.Sprintf("command %d", code))
		}
	}
	ds := time.Now()
	w.remove(base, id)
	return create, time.Since(ds), true
}

// floorChurn is the floor the hub is measured against: the load tool does the
// hub's whole job itself, for c clients and with the hub's -limit (limit) —
// take one of the slots, spawn the stub on a free port, wait for /status, create
// a session, run k commands, DELETE, then stop the stub with SIGINT and reap
// it while the slot is still held, as the hub does after answering DELETE.
// A create is timed from asking for the slot, as a hub's client times it: a
// stub still being reaped delays the next create in both when the slots are
// all taken, and in neither when they are not.
func (e *Env) floorChurn(ctx context.Context, c, limit, k int, d time.Duration) (run churnRun) {
	ready := launcher.Options{}.ReadyClient()
	var diag process.SockDiag
	defer diag.Close()
	slots := make(chan struct{}, limit)
	var reaping sync.WaitGroup
	s0 := readShares(os.Getpid())
	defer func() {
		reaping.Wait() // the last stubs' time is the tool's children's once reaped
		run.since(s0, os.Getpid())
	}()
	return churnLoop(ctx, c, d, func(w wd, fail func(string)) (time.Duration, time.Duration, bool) {
		s := time.Now()
		slots <- struct{}{}
		held := true
		release := func() { <-slots }
		defer func() {
			if held {
				release()
			}
		}()
		port, err := freePort()
		if err != nil {
			fail("port " + err.Error())
			return 0, 0, false
		}
		cmd := command(e.Stub, "-delete-delay", stubDeleteDelay.String(), "--port="+strconv.Itoa(port))
		cmd.SysProcAttr.Setpgid = true // as the hub's drivers: Pdeathsig and a group of its own
		if env := hubEnv(); len(env) > 0 {
			cmd.Env = append(os.Environ(), env...)
		}
		said := launcher.NewSaid()
		cmd.Stdout = said // as the hub reads its drivers' output, and looks when they speak
		if err := cmd.Start(); err != nil {
			fail("spawn " + err.Error())
			return 0, 0, false
		}
		exited := make(chan struct{})
		go func() { cmd.Wait(); close(exited) }()
		held = false
		stop := func() {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGINT)
			<-exited
			release()
		}
		base := "http://127.0.0.1:" + strconv.Itoa(port)
		// As the hub does, with the hub's own code: the kernel asked every
		// millisecond at first whether the stub listens, and whenever it
		// writes to its output, then HTTP polls with backoff; a stub that
		// exits (it lost its port) counts as a failed start.
		u, _ := url.Parse(base)
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err = launcher.WaitListening(rctx, ready, u, exited, func() (bool, bool) { return diag.Listening(port) }, said)
		cancel()
		if err != nil {
			stop()
			return 0, 0, false
		}
		create, del, ok := churnSession(ctx, w, base, k, s, fail)
		reaping.Go(stop) // after the answer, holding the slot
		return create, del, ok
	})
}

// hubChurn is the same loop through the hub.
func hubChurn(ctx context.Context, hub *proc, c, k int, d time.Duration) churnRun {
	cpu0, s0 := cpuSeconds(hub.pid()), readShares(hub.pid())
	run := churnLoop(ctx, c, d, func(w wd, fail func(string)) (time.Duration, time.Duration, bool) {
		return churnSession(ctx, w, hub.url+"/wd/hub", k, time.Now(), fail)
	})
	run.since(s0, hub.pid())
	run.cpuSeconds = cpuSeconds(hub.pid()) - cpu0
	run.rssEnd = rss(hub.pid())
	return run
}

// sleepers starts n idle processes (sleep) for the run's length: the "busy
// machine" DELETE must not notice. stop kills and reaps them.
func sleepers(n int, d time.Duration) (stop func(), err error) {
	var cmds []*exec.Cmd
	stop = func() {
		for _, c := range cmds {
			c.Process.Kill()
		}
		for _, c := range cmds {
			c.Wait()
		}
	}
	secs := strconv.Itoa(int(d.Seconds()) + 60) // and they end on their own
	for range n {
		c := command("sleep", secs)
		if err := c.Start(); err != nil {
			stop()
			return nil, fmt.Errorf("starting %d sleeping processes: %w", n, err)
		}
		cmds = append(cmds, c)
	}
	return stop, nil
}

package bench

import (
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// stubDeleteDelay is the stub's DELETE time in the churn scenarios: a real
// driver quits its browser there (chromedriver with headless Chromium here:
// tens of milliseconds), and "DELETE as fast as the driver" is judged against
// a driver that takes some time, as real ones do.
const stubDeleteDelay = 20 * time.Millisecond

// churnRun is what one churn run measured.
type churnRun struct {
	sessions           int
	elapsed            time.Duration
	creates, deletes   []time.Duration
	errs               map[string]int
	cpuSeconds, rssEnd float64
}

func (c churnRun) perSecond() float64 { return float64(c.sessions) / c.elapsed.Seconds() }

// floorChurn is the floor the hub is measured against: the load tool does the
// hub's whole job itself, with the same concurrency — spawn the stub on a free
// port, wait for /status, create a session, run k commands, DELETE, stop the
// stub with SIGINT and reap it.
func (e *Env) floorChurn(ctx context.Context, c, k int, d time.Duration) churnRun {
	w := wd{c: pooled(c)}
	ready := &http.Client{Timeout: time.Second}
	run := churnRun{errs: map[string]int{}}
	var mu sync.Mutex
	var n atomic.Int64
	t0 := time.Now()
	deadline := t0.Add(d)
	var wg sync.WaitGroup
	for range c {
		wg.Go(func() {
			for time.Now().Before(deadline) && ctx.Err() == nil {
				s := time.Now()
				port, err := freePort()
				if err != nil {
					continue
				}
				cmd := exec.Command(e.Stub, "-delete-delay", stubDeleteDelay.String(), "--port="+strconv.Itoa(port))
				cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
				if err := cmd.Start(); err != nil {
					mu.Lock()
					run.errs["spawn "+err.Error()]++
					mu.Unlock()
					continue
				}
				exited := make(chan struct{})
				go func() { cmd.Wait(); close(exited) }()
				base := "http://127.0.0.1:" + strconv.Itoa(port)
				up := false
				// As the hub does: poll from 1 ms with backoff; a stub that exits
				// (it lost its port) is started again on another.
				for wait, give := time.Millisecond, time.Now().Add(10*time.Second); !up && time.Now().Before(give); wait = min(2*wait, 50*time.Millisecond) {
					if resp, err := ready.Get(base + "/status"); err == nil {
						resp.Body.Close()
						up = true
						break
					}
					select {
					case <-exited:
						give = time.Time{}
					case <-time.After(wait):
					}
				}
				if !up {
					_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
					<-exited
					continue
				}
				id, code, err := w.create(ctx, base, stubCaps)
				took := time.Since(s)
				if err == nil && code == 200 {
					for range k {
						w.command(base, id)
					}
					ds := time.Now()
					w.remove(base, id)
					dtook := time.Since(ds)
					mu.Lock()
					run.creates = append(run.creates, took)
					run.deletes = append(run.deletes, dtook)
					mu.Unlock()
					n.Add(1)
				}
				_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGINT)
				<-exited
			}
		})
	}
	wg.Wait()
	run.elapsed = time.Since(t0)
	run.sessions = int(n.Load())
	sortDurations(run.creates)
	sortDurations(run.deletes)
	return run
}

// hubChurn is the same loop through the hub.
func hubChurn(ctx context.Context, hub *proc, c, k int, d time.Duration) churnRun {
	w := wd{c: pooled(c)}
	run := churnRun{errs: map[string]int{}}
	var mu sync.Mutex
	var n atomic.Int64
	cpu0 := cpuSeconds(hub.pid())
	t0 := time.Now()
	deadline := t0.Add(d)
	var wg sync.WaitGroup
	for range c {
		wg.Go(func() {
			for time.Now().Before(deadline) && ctx.Err() == nil {
				s := time.Now()
				id, code, err := w.create(ctx, hub.url+"/wd/hub", stubCaps)
				took := time.Since(s)
				if err != nil || code != 200 {
					mu.Lock()
					run.errs[fmt.Sprintf("create %d %v", code, err)]++
					mu.Unlock()
					continue
				}
				for range k {
					if code, err := w.command(hub.url+"/wd/hub", id); err != nil || code != 200 {
						mu.Lock()
						run.errs[fmt.Sprintf("command %d", code)]++
						mu.Unlock()
					}
				}
				ds := time.Now()
				w.remove(hub.url+"/wd/hub", id)
				dtook := time.Since(ds)
				n.Add(1)
				mu.Lock()
				run.creates = append(run.creates, took)
				run.deletes = append(run.deletes, dtook)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	run.elapsed = time.Since(t0)
	run.sessions = int(n.Load())
	run.cpuSeconds = cpuSeconds(hub.pid()) - cpu0
	run.rssEnd = rss(hub.pid())
	sortDurations(run.creates)
	sortDurations(run.deletes)
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
	secs := strconv.Itoa(int(d.Seconds()) + 60) // they end on their own even if the tool dies
	for range n {
		c := exec.Command("sleep", secs)
		if err := c.Start(); err != nil {
			stop()
			return nil, fmt.Errorf("starting %d sleeping processes: %w", n, err)
		}
		cmds = append(cmds, c)
	}
	return stop, nil
}

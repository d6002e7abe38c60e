package bench

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"time"
)

// EchoEnv names the environment variable that turns the load tool's binary
// into the wakeup scenario's echo process: it listens on 127.0.0.1 at the
// port given and sends back every byte it reads.
const EchoEnv = "WSBENCH_ECHO"

// Echo serves the wakeup scenario, with Go's default GOMAXPROCS as the hub
// has; it returns only on error.
func Echo(port string) error {
	if _, err := strconv.Atoi(port); err != nil {
		return fmt.Errorf("%s: %q is not a port", EchoEnv, port)
	}
	l, err := net.Listen("tcp", "127.0.0.1:"+port)
	if err != nil {
		return err
	}
	fmt.Println("echo listening")
	for {
		c, err := l.Accept()
		if err != nil {
			return err
		}
		go func() {
			defer c.Close()
			b := make([]byte, 64)
			for {
				n, err := c.Read(b)
				if err != nil {
					return
				}
				if _, err := c.Write(b[:n]); err != nil {
					return
				}
			}
		}()
	}
}

// Wakeup measures what waking an idle process costs on this machine: a
// 1-byte loopback round trip to a separate process, back to back and after
// the two have been idle a while. Every step of a session's start (a
// readiness poll, a hand-off between the hub's goroutines and threads, a
// driver's exit noticed) pays it when the machine is not busy, so this is the
// figure to read beside churn's create latency at few clients. It has no
// target: it describes the machine.
func (e *Env) Wakeup(ctx context.Context) (*Result, error) {
	if e.Self == "" {
		return nil, fmt.Errorf("wakeup: the load tool's own binary is needed (Env.Self)")
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	echo, err := e.start(ctx, e.Self, nil, port, "listening", append(hubEnv(), EchoEnv+"="+strconv.Itoa(port))...)
	if err != nil {
		return nil, fmt.Errorf("starting the echo process: %w", err)
	}
	defer echo.stop()
	c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return nil, err
	}
	defer c.Close()
	n := 400
	if e.Short {
		n = 50
	}
	r := &Result{Scenario: "wakeup", Figures: map[string]float64{},
		Header: []string{"idle before each", "round trip p50 µs", "p90 µs"}}
	b := []byte{1}
	for _, gap := range []time.Duration{0, 200 * time.Microsecond, time.Millisecond, 3 * time.Millisecond} {
		var lat []time.Duration
		for range n {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if gap > 0 {
				time.Sleep(gap) // the idleness being measured, not a poll
			}
			t0 := time.Now()
			if _, err := c.Write(b); err != nil {
				return nil, err
			}
			if _, err := c.Read(b); err != nil {
				return nil, err
			}
			lat = append(lat, time.Since(t0))
		}
		sortDurations(lat)
		p50, p90 := percentile(lat, 50), percentile(lat, 90)
		key := fmt.Sprintf("gap_%dus", gap.Microseconds())
		r.Figures[key+"_p50_us"] = float64(p50) / 1e3
		r.Figures[key+"_p90_us"] = float64(p90) / 1e3
		r.Rows = append(r.Rows, []string{gap.String(), fmt.Sprintf("%.0f", float64(p50)/1e3), fmt.Sprintf("%.0f", float64(p90)/1e3)})
	}
	r.Notes = append(r.Notes, "waking a process that has been idle costs the difference between the rows; on a VM it can be several times a busy round trip")
	return r, nil
}

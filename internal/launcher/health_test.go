package launcher

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/websummoner/websummoner/internal/config"
	"github.com/websummoner/websummoner/internal/logtest"
)

// A Health starts down, "not checked yet"; each change is logged once, every
// check is told to OnHealth, and the gauge, Ready and a start's error follow
// the last check, the error saying why and what to check.
func TestHealth(t *testing.T) {
	lines, log := logtest.New(100)
	reg := prometheus.NewRegistry()
	var told []bool
	h, err := NewHealth(HealthOptions{Engine: "Test engine", Tag: "TEST", Metric: "websummoner_test_up",
		Advice: "check the test", OnHealth: func(up bool) { told = append(told, up) }}, log, reg)
	if err != nil {
		t.Fatal(err)
	}
	gauge := func() float64 {
		v, err := testutil.GatherAndCount(reg, "websummoner_test_up")
		if err != nil || v != 1 {
			t.Fatalf("the gauge: %d series, %v", v, err)
		}
		mfs, _ := reg.Gather()
		return mfs[0].GetMetric()[0].GetGauge().GetValue()
	}
	b := config.Resolved{Name: "chrome", Version: "1"}
	if ok, why := h.Ready(); ok || why != "Test engine unreachable: not checked yet" || gauge() != 0 {
		t.Fatalf("new: Ready %v %q, gauge %v; want down, not checked yet, 0", ok, why, gauge())
	}
	h.MarkUp("detail")
	h.MarkUp("detail")
	if ok, why := h.Ready(); !ok || why != "Test engine answers" || gauge() != 1 || !h.Up() {
		t.Fatalf("after MarkUp: Ready %v %q, gauge %v; want up, 1", ok, why, gauge())
	}
	h.MarkDown(errors.New("connection refused"))
	h.MarkDown(errors.New("connection refused again"))
	if ok, why := h.Ready(); ok || why != "Test engine unreachable: connection refused again" || gauge() != 0 || h.Up() {
		t.Fatalf("after MarkDown: Ready %v %q, gauge %v; want down, the last reason, 0", ok, why, gauge())
	}
	var se *StartError
	err = h.DownErr(b, nil)
	if !errors.As(err, &se) || !se.Down || !se.Engine || se.Phase != PhaseStart ||
		!strings.Contains(se.Msg, "the Test engine is unreachable (connection refused again)") || !strings.Contains(se.Msg, "check the test") {
		t.Fatalf("DownErr = %#v: want a start error, down, naming the last reason and the advice", err)
	}
	if err := h.DownErr(b, errors.New("dial timeout")); !errors.As(err, &se) || !strings.Contains(se.Msg, "(dial timeout)") {
		t.Fatalf("DownErr with this start's error = %v: want that error as the reason", err)
	}
	if want := []bool{true, true, false, false}; !slices.Equal(told, want) {
		t.Fatalf("OnHealth was told %v, want every check: %v", told, want)
	}
	var logged []string
	for len(lines) > 0 {
		logged = append(logged, <-lines)
	}
	if len(logged) != 2 || !strings.Contains(logged[0], "[TEST_UP] [detail]") || !strings.Contains(logged[1], "[TEST_DOWN] [connection refused]") {
		t.Fatalf("logged %q: want TEST_UP once with its detail, then TEST_DOWN once with the first reason", logged)
	}
	if _, err := NewHealth(HealthOptions{Engine: "Test engine", Metric: "websummoner_test_up"}, nil, reg); err == nil {
		t.Fatal("a second gauge of the same name registered without an error")
	}
}

// Tend checks at its interval and sweeps at its own only while the engine
// answers; recovered runs once when a check finds the engine after a down
// one, and not when it was up already; it returns when ctx ends.
func TestHealthTend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, err := NewHealth(HealthOptions{Engine: "Test engine", Metric: "websummoner_test_up"}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		// The engine answers from the 3rd check to the 5th, and from the 8th.
		checks, sweeps, recoveries := 0, 0, 0
		check := func(context.Context) {
			checks++
			if checks >= 3 && checks <= 5 || checks >= 8 {
				h.MarkUp()
			} else {
				h.MarkDown(errors.New("down"))
			}
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() {
			h.Tend(ctx, time.Second, 700*time.Millisecond, check, func(context.Context) { sweeps++ }, func(context.Context) { recoveries++ })
			close(done)
		}()
		// Checks each second; sweep ticks every 0.7 s, done only while up:
		// from the 3rd check to the 6th (3.5, 4.2, 4.9, 5.6 s) and from the
		// 8th (8.4, 9.1 s). The one tick that meets a check's (7 s) falls
		// while the engine is down either way.
		time.Sleep(9*time.Second + 750*time.Millisecond)
		synctest.Wait()
		if checks != 9 || sweeps != 6 || recoveries != 2 {
			t.Fatalf("after 9.75 s: %d checks, %d sweeps, %d recoveries; want 9, 6, 2", checks, sweeps, recoveries)
		}
		cancel()
		<-done
	})
}

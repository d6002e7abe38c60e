package launcher

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/websummoner/websummoner/internal/config"
	"github.com/websummoner/websummoner/internal/logtag"
	"github.com/websummoner/websummoner/internal/metrics"
)

// HealthOptions name the engine a Health follows and how its changes are told.
type HealthOptions struct {
	// Engine names what answers or not, as a sentence says it: "Docker engine".
	Engine string
	// Tag begins the log events of a change: Tag+"_UP", Tag+"_DOWN".
	Tag string
	// Metric is the gauge's name, 1 while the engine answers.
	Metric string
	// Advice says what an operator checks while it does not: "check DOCKER_HOST
	// and the daemon".
	Advice string
	// OnHealth, if set, is told the outcome of every check (the start gate's
	// engine-health signal).
	OnHealth func(up bool)
}

// Health is whether a launcher's engine answers, and why not: the one record
// Check, Start, Ready and the gauge read, kept by the launcher's health checks
// (MarkUp, MarkDown). It starts down, "not checked yet".
type Health struct {
	opts HealthOptions
	log  *slog.Logger
	up   atomic.Bool
	why  atomic.Value // string: why the engine is down
}

// NewHealth returns a Health, down until the first MarkUp, with its gauge
// registered on reg (nil: none).
func NewHealth(opts HealthOptions, logger *slog.Logger, reg prometheus.Registerer) (*Health, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	h := &Health{opts: opts, log: logger}
	h.why.Store("not checked yet")
	up := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: opts.Metric,
		Help: "1 while the " + opts.Engine + " answers, 0 while it does not.",
	}, func() float64 {
		if h.Up() {
			return 1
		}
		return 0
	})
	if err := metrics.Register(reg, up); err != nil {
		return nil, err
	}
	return h, nil
}

// Up reports whether the last check found the engine answering.
func (h *Health) Up() bool { return h.up.Load() }

// MarkUp records a check the engine answered; the first after a down one is
// logged, with details.
func (h *Health) MarkUp(details ...any) {
	if !h.up.Swap(true) {
		logtag.Event(h.log, slog.LevelInfo, "", h.opts.Tag+"_UP", details...)
	}
	if h.opts.OnHealth != nil {
		h.opts.OnHealth(true)
	}
}

// MarkDown records a check the engine did not answer, and why; new sessions
// fail at once (DownErr) until a check finds it again.
func (h *Health) MarkDown(err error) {
	h.why.Store(err.Error())
	if h.up.Swap(false) {
		logtag.Event(h.log, slog.LevelWarn, "", h.opts.Tag+"_DOWN", err)
	}
	if h.opts.OnHealth != nil {
		h.opts.OnHealth(false)
	}
}

// Ready is the launcher's readiness for /readyz: whether browsers can be
// started now, and why not.
func (h *Health) Ready() (bool, string) {
	if h.Up() {
		return true, h.opts.Engine + " answers"
	}
	return false, h.opts.Engine + " unreachable: " + h.why.Load().(string)
}

// DownErr is a start's error while the engine does not answer: err is what
// this start met, or nil for what the last check met.
func (h *Health) DownErr(b config.Resolved, err error) error {
	why := h.why.Load().(string)
	if err != nil {
		why = err.Error()
	}
	return &StartError{Phase: PhaseStart, Browser: b.String(), Engine: true, Down: true, Err: err,
		Msg: fmt.Sprintf("the %s is unreachable (%s); new sessions fail until it answers again (%s)", h.opts.Engine, why, h.opts.Advice)}
}

// Tend runs a launcher's upkeep until ctx ends: check (which marks the
// Health) every healthEvery, and sweep every sweepEvery while the engine
// answers. recovered, if set, runs when a check finds the engine again after
// one that did not.
func (h *Health) Tend(ctx context.Context, healthEvery, sweepEvery time.Duration, check, sweep, recovered func(context.Context)) {
	health := time.NewTicker(healthEvery)
	sweeps := time.NewTicker(sweepEvery)
	defer health.Stop()
	defer sweeps.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-health.C:
			was := h.Up()
			check(ctx)
			if !was && h.Up() && recovered != nil {
				recovered(ctx)
			}
		case <-sweeps.C:
			if h.Up() {
				sweep(ctx)
			}
		}
	}
}

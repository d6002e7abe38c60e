package hub

import (
	"github.com/prometheus/client_golang/prometheus"

	wsmetrics "github.com/websummoner/websummoner/internal/metrics"
)

type metrics struct {
	created       prometheus.Counter
	startSeconds  *prometheus.HistogramVec
	startFailures *prometheus.CounterVec
}

func newMetrics(h *Hub, reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		created: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "websummoner_sessions_created_total",
			Help: "Sessions created.",
		}),
		startSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "websummoner_session_start_seconds",
			Help:    "Time from admission to a created session: browser start, readiness and the driver's new-session call.",
			Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60},
		}, []string{"browser", "version"}),
		startFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "websummoner_session_start_failures_total",
			Help: "Browser starts that failed, by browser and phase (start, startup, new-session). Client-caused refusals are not counted.",
		}, []string{"browser", "phase"}),
	}
	pending := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "websummoner_sessions_pending",
		Help: "Sessions being started now (admitted, not yet created).",
	}, func() float64 { return float64(h.pending.Load()) })
	if err := wsmetrics.Register(reg, m.created, m.startSeconds, m.startFailures, pending); err != nil {
		return nil, err
	}
	return m, nil
}

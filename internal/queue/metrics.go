package queue

import (
	"github.com/prometheus/client_golang/prometheus"

	wsmetrics "github.com/websummoner/websummoner/internal/metrics"
)

type metrics struct {
	rejected *prometheus.CounterVec
	wait     prometheus.Histogram
}

// newMetrics registers the queue's collectors. Gauges are functions of the queue's
// own state, read at scrape time, so they cannot drift from it; congested and idle
// change with the clock alone, between any two events.
func newMetrics(q *Queue, reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "websummoner_queue_rejected_total",
			Help: "New-session requests refused by the queue, by reason: no_wait (client opted out, usually ggr), timeout (slow grid, consider raising -limit), shed (saturated grid, needs capacity), disabled (-disable-queue), shutdown (the hub is draining), full (-queue-max or -queue-max-bytes reached), quota (the tenant's maxQueued in -quotas reached).",
		}, []string{"reason"}),
		wait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "websummoner_queue_wait_seconds",
			Help:    "Time admitted requests waited for a slot (0 for requests admitted at once).",
			Buckets: []float64{0.001, 0.01, 0.1, 0.5, 1, 2.5, 5, 10, 15, 30, 60, 120, 300, 600, 1800},
		}),
	}
	for _, r := range []Reason{ReasonNoWait, ReasonTimeout, ReasonShed, ReasonDisabled, ReasonClosed, ReasonFull, ReasonQuota} {
		m.rejected.WithLabelValues(string(r))
	}
	b2f := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	collectors := []prometheus.Collector{
		m.rejected, m.wait,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "websummoner_queue_congested",
			Help: "1 while shedding: a request arriving now would queue with the saturated budget (all slots busy and no fast admission for longer than -queue-timeout). Alert on this.",
		}, func() float64 { return b2f(q.Stats().Congested) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "websummoner_queue_waiting",
			Help: "New-session requests waiting for a slot.",
		}, func() float64 { return float64(q.Stats().Waiting) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "websummoner_queue_waiting_bytes",
			Help: "Bytes of capabilities the waiting requests hold; bounded by -queue-max-bytes.",
		}, func() float64 { return float64(q.Stats().WaitingBytes) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "websummoner_queue_slots_in_use",
			Help: "Slots held by sessions and session starts.",
		}, func() float64 { return float64(q.Stats().InUse) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "websummoner_queue_slots_limit",
			Help: "Slots in all (-limit).",
		}, func() float64 { return float64(q.opts.Limit) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "websummoner_queue_idle_seconds",
			Help: "Seconds since the last fast admission; above -queue-timeout the grid is saturated.",
		}, func() float64 { return q.Stats().Idle.Seconds() }),
	}
	collectors = append(collectors, &tenantCollector{q})
	if err := wsmetrics.Register(reg, collectors...); err != nil {
		return nil, err
	}
	return m, nil
}

var (
	tenantSessionsDesc = prometheus.NewDesc("websummoner_tenant_sessions",
		"Slots held by each tenant's sessions and starts: tenants named in -quotas by name, the rest as \"other\".", []string{"tenant"}, nil)
	tenantWaitingDesc = prometheus.NewDesc("websummoner_tenant_waiting",
		"Each tenant's requests waiting in the queue: tenants named in -quotas by name, the rest as \"other\".", []string{"tenant"}, nil)
)

// tenantCollector reads the tenants' counts at scrape time; labels are the
// quotas file's names and "other", so a grid of many users keeps few series.
type tenantCollector struct{ q *Queue }

func (c *tenantCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- tenantSessionsDesc
	ch <- tenantWaitingDesc
}

func (c *tenantCollector) Collect(ch chan<- prometheus.Metric) {
	qs := c.q.Quotas()
	sessions, waiting := map[string]int{OtherTenants: 0}, map[string]int{OtherTenants: 0}
	for _, t := range c.q.Tenants() {
		label := OtherTenants
		if qs.Named(t.Tenant) {
			label = t.Tenant
		}
		sessions[label] += t.Sessions
		waiting[label] += t.Waiting
	}
	for label, n := range sessions {
		ch <- prometheus.MustNewConstMetric(tenantSessionsDesc, prometheus.GaugeValue, float64(n), label)
		ch <- prometheus.MustNewConstMetric(tenantWaitingDesc, prometheus.GaugeValue, float64(waiting[label]), label)
	}
}

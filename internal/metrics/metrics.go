// Package metrics holds what every component's Prometheus collectors share.
package metrics

import "github.com/prometheus/client_golang/prometheus"

// Register registers collectors on reg, stopping at the first error. A nil reg
// registers nothing: components built without metrics (tests, tools) still work.
func Register(reg prometheus.Registerer, collectors ...prometheus.Collector) error {
	if reg == nil {
		return nil
	}
	for _, c := range collectors {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

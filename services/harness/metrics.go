package harness

import (
	"github.com/prometheus/client_golang/prometheus"

	"corral.dev/pkg/metrics"
)

// serviceMetrics are the harness's Prometheus metrics.
type serviceMetrics struct {
	model    *prometheus.HistogramVec // by provider and outcome
	dispatch *prometheus.CounterVec   // by tool and route
	ended    *prometheus.CounterVec   // by outcome
}

func newMetrics(reg prometheus.Registerer) *serviceMetrics {
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	m := &serviceMetrics{
		model: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "corral_harness_model_seconds",
			Help:    "Model calls and how long they took, by provider and outcome (ok, error).",
			Buckets: metrics.Seconds,
		}, []string{"provider", "outcome"}),
		dispatch: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "corral_harness_tool_calls_total",
			Help: "Tool calls the model made, by tool and what became of them: sandbox or memory (dispatched there), held (for a reviewer) or refused.",
		}, []string{"tool", "route"}),
		ended: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "corral_harness_sessions_ended_total",
			Help: "Requests that ended, by outcome: completed, paused (over a budget), or the failure code.",
		}, []string{"outcome"}),
	}
	reg.MustRegister(m.model, m.dispatch, m.ended)
	return m
}

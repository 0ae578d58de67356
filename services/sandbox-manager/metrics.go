package sandboxmanager

import (
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"corral.dev/pkg/metrics"
)

// serviceMetrics are the sandbox-manager's Prometheus metrics.
type serviceMetrics struct {
	starts *prometheus.HistogramVec // by kind: cold or resume
	calls  *prometheus.HistogramVec // by tool and outcome
	// snapshots and restores time the workspace's captures and restores.
	snapshots, restores prometheus.Histogram
	// snapshotBytes is the size of each workspace snapshotted.
	snapshotBytes prometheus.Histogram
	// forwarded counts calls run by the node their session is placed on.
	forwarded prometheus.Counter
	// reaped counts workspaces the reaper removed, by why.
	reaped *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer, s *Service) *serviceMetrics {
	m := &serviceMetrics{
		starts: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "corral_sandbox_start_seconds",
			Help:    "Sandbox starts and how long they took: cold (a new workspace), resume (a suspended sandbox thawed) or restart (a new sandbox on a kept workspace: stopped when idle, or left by a restart).",
			Buckets: metrics.Seconds,
		}, []string{"kind"}),
		calls: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "corral_sandbox_call_seconds",
			Help:    "Tool calls run in sandboxes and how long they took, by tool and outcome (ok, error, killed).",
			Buckets: metrics.Seconds,
		}, []string{"tool", "outcome"}),
	}
	m.snapshots = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "corral_sandbox_snapshot_seconds",
		Help:    "Workspace snapshots taken after calls, and how long they took.",
		Buckets: metrics.Seconds,
	})
	m.restores = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "corral_sandbox_restore_seconds",
		Help:    "Workspaces restored from their snapshot (the session moved here, or this node restarted), and how long it took.",
		Buckets: metrics.Seconds,
	})
	m.snapshotBytes = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "corral_sandbox_snapshot_bytes",
		Help:    "Size of the workspaces snapshotted after calls (the bytes their files hold; only changed files are uploaded).",
		Buckets: prometheus.ExponentialBuckets(1<<10, 4, 12), // 1 KiB to 4 GiB
	})
	m.forwarded = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "corral_sandbox_forwarded_calls_total",
		Help: "Calls received here and run by the node their session is placed on.",
	})
	m.reaped = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "corral_sandbox_workspaces_reaped_total",
		Help: "Workspaces the reaper removed, by why: no_session, ended, moved (to another node) or idle.",
	}, []string{"why"})
	sandboxes := func(state string) prometheus.GaugeFunc {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "corral_sandbox_sandboxes",
			Help:        "Sandboxes by state: running (processes up, between calls or in one), suspended (processes stopped, none running) stopped (the workspace kept, no process) or pooled (started ahead, for a session's first call to take).",
			ConstLabels: prometheus.Labels{"state": state},
		}, func() float64 {
			if s.driver == nil {
				return 0 // not started
			}
			live, suspended := s.driver.Live()
			switch state {
			case "running":
				return float64(live - suspended)
			case "suspended":
				return float64(suspended)
			case "pooled":
				return float64(s.driver.Pooled())
			}
			// Workspaces, not the pool's directories under .pool.
			dirs, _ := filepath.Glob(filepath.Join(s.cfg.DataDir, "workspaces", "[^.]*", "*"))
			return float64(max(len(dirs)-live, 0))
		})
	}
	reg.MustRegister(m.forwarded, m.reaped, m.snapshotBytes, m.starts, m.calls, m.snapshots, m.restores, sandboxes("running"), sandboxes("suspended"), sandboxes("stopped"), sandboxes("pooled"))
	return m
}

func (m *serviceMetrics) started(kind string, took time.Duration) {
	m.starts.WithLabelValues(kind).Observe(took.Seconds())
}

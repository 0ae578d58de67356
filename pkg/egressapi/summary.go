package egressapi

import "corral.dev/pkg/event"

// The per-call summary of what a sandbox sent, as the control protocol's
// drain returns it: the types of the tool.completed event that records
// it.
type (
	Summary = event.EgressSummary
	Traffic = event.EgressTraffic
	Refusal = event.EgressRefusal
)

// MaxPaths is how many paths a [Traffic] keeps.
const MaxPaths = event.EgressMaxPaths

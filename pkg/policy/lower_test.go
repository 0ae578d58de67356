package policy_test

import (
	"testing"
	"time"

	"corral.dev/pkg/policy"
)

// A session's own caps tighten its tenant's, never loosen them; a cap
// either leaves unset (0) is the other's.
func TestLimitsLower(t *testing.T) {
	tenant := policy.Limits{Steps: 50, CostUSD: 5, WallTime: time.Hour}
	for _, tc := range []struct {
		name    string
		session policy.Limits
		want    policy.Limits
	}{
		{"none", policy.Limits{}, tenant},
		{"lower", policy.Limits{Steps: 10, CostUSD: 0.25, WallTime: time.Minute}, policy.Limits{Steps: 10, CostUSD: 0.25, WallTime: time.Minute}},
		{"higher is capped", policy.Limits{Steps: 500, CostUSD: 50, WallTime: 8 * time.Hour}, tenant},
		{"one the tenant does not set", policy.Limits{Tokens: 1000, SandboxSeconds: 60}, policy.Limits{Steps: 50, Tokens: 1000, CostUSD: 5, SandboxSeconds: 60, WallTime: time.Hour}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tenant.Lower(tc.session); got != tc.want {
				t.Errorf("Lower(%+v) = %+v, want %+v", tc.session, got, tc.want)
			}
		})
	}
}

package harness

import (
	"strings"
	"testing"

	"github.com/google/uuid"
)

// A session asks for the longer cache lifetime as configured, and under
// "auto" once it has waited for a reviewer.
func TestCacheTTL(t *testing.T) {
	waited := newState("t", uuid.New())
	waited.Asked[uuid.New()] = true
	for _, tc := range []struct {
		cfg    string
		waited bool
		want   string
	}{
		{CacheTTLAuto, false, ""},
		{CacheTTLAuto, true, "1h"},
		{"5m", true, ""},
		{"1h", false, "1h"},
	} {
		st := newState("t", uuid.New())
		if tc.waited {
			st = waited
		}
		s := &Service{cfg: Config{CacheTTL: tc.cfg}}
		if got := s.cacheTTL(st); got != tc.want {
			t.Errorf("CORRAL_PROMPT_CACHE_TTL=%s, waited %v: %q, want %q", tc.cfg, tc.waited, got, tc.want)
		}
	}
	_, err := LoadConfig(func(k string) string { return map[string]string{"CORRAL_PROMPT_CACHE_TTL": "2h"}[k] })
	if err == nil || !strings.Contains(err.Error(), "CORRAL_PROMPT_CACHE_TTL") {
		t.Errorf("CORRAL_PROMPT_CACHE_TTL=2h: %v, want it refused", err)
	}
}

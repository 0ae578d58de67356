package sandboxmanager

import (
	"strings"
	"testing"

	"corral.dev/pkg/event"
)

// A number of CPUs that is no number of CPUs is refused, naming its
// variable.
func TestConfigRefusesBadCPUs(t *testing.T) {
	for _, name := range []string{"CORRAL_SANDBOX_CPUS", "CORRAL_SANDBOX_NODE_CPUS"} {
		for _, v := range []string{"NaN", "0", "-1", "+Inf", "two"} {
			_, err := LoadConfig(func(k string) string {
				if k == name {
					return v
				}
				return ""
			})
			if err == nil || !strings.Contains(err.Error(), name) {
				t.Errorf("%s=%s: %v, want an error naming it", name, v, err)
			}
		}
	}
}

// The egress service's control socket must be named by an absolute path.
func TestConfigRefusesRelativeEgressSocket(t *testing.T) {
	_, err := LoadConfig(func(k string) string {
		switch k {
		case "CORRAL_EGRESS_SOCKET":
			return "run/egress.sock"
		case "CORRAL_CALL_PUBLIC_KEY":
			return event.EncodeKey(callPub)
		}
		return ""
	})
	if err == nil || !strings.Contains(err.Error(), "CORRAL_EGRESS_SOCKET") {
		t.Errorf("a relative CORRAL_EGRESS_SOCKET: %v, want an error naming it", err)
	}
}

package sandboxmanager

import (
	"strings"
	"testing"
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

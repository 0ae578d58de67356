package envconf_test

import (
	"strings"
	"testing"
	"time"

	"corral.dev/pkg/envconf"
)

func TestValues(t *testing.T) {
	t.Parallel()
	type result struct {
		v   any
		err error
	}
	pair := func(v any, err error) result { return result{v, err} }
	const name = "CORRAL_X"
	tests := []struct {
		name  string
		value string
		read  func(getenv func(string) string) result
		want  any
		err   string // a part of the error; empty: none
	}{
		{"int unset", "", func(g func(string) string) result { return pair(envconf.Int(g, name, 7)) }, 7, ""},
		{"int", "12", func(g func(string) string) result { return pair(envconf.Int(g, name, 7)) }, 12, ""},
		{"int 0", "0", func(g func(string) string) result { return pair(envconf.Int(g, name, 7)) }, nil, `CORRAL_X="0": want a positive whole number`},
		{"int word", "many", func(g func(string) string) result { return pair(envconf.Int(g, name, 7)) }, nil, `CORRAL_X="many": want a positive whole number`},
		{"count 0", "0", func(g func(string) string) result { return pair(envconf.Count(g, name, 2)) }, 0, ""},
		{"count negative", "-1", func(g func(string) string) result { return pair(envconf.Count(g, name, 2)) }, nil, `CORRAL_X="-1": want a whole number, 0 for none`},
		{"bytes", "1048576", func(g func(string) string) result { return pair(envconf.Bytes(g, name, 1)) }, int64(1 << 20), ""},
		{"bytes with unit", "1MiB", func(g func(string) string) result { return pair(envconf.Bytes(g, name, 1)) }, nil, `CORRAL_X="1MiB": want a positive number of bytes`},
		{"duration unset", "", func(g func(string) string) result { return pair(envconf.Duration(g, name, 2*time.Minute)) }, 2 * time.Minute, ""},
		{"duration", "90s", func(g func(string) string) result { return pair(envconf.Duration(g, name, 2*time.Minute)) }, 90 * time.Second, ""},
		{"duration 0", "0s", func(g func(string) string) result { return pair(envconf.Duration(g, name, 2*time.Minute)) }, nil, `CORRAL_X="0s": want a positive duration such as 2m`},
		{"duration number", "10", func(g func(string) string) result { return pair(envconf.Duration(g, name, 168*time.Hour)) }, nil, `want a positive duration such as 168h`},
		{"duration no default", "x", func(g func(string) string) result { return pair(envconf.Duration(g, name, 0)) }, nil, `want a positive duration such as 1m`},
		{"at least", "2s", func(g func(string) string) result {
			return pair(envconf.DurationAtLeast(g, name, 10*time.Minute, time.Second))
		}, 2 * time.Second, ""},
		{"below least", "500ms", func(g func(string) string) result {
			return pair(envconf.DurationAtLeast(g, name, 10*time.Minute, time.Second))
		}, nil, `CORRAL_X="500ms": want a duration of at least 1s, such as 10m`},
		{"0 allowed", "0s", func(g func(string) string) result {
			return pair(envconf.DurationAtLeast(g, name, 10*time.Second, 0))
		}, time.Duration(0), ""},
		{"negative", "-1s", func(g func(string) string) result {
			return pair(envconf.DurationAtLeast(g, name, 10*time.Second, 0))
		}, nil, `CORRAL_X="-1s": want a duration such as 10s`},
		{"switch unset", "", func(g func(string) string) result { return pair(envconf.Switch(g, name, true)) }, true, ""},
		{"switch off", "off", func(g func(string) string) result { return pair(envconf.Switch(g, name, true)) }, false, ""},
		{"switch yes", "yes", func(g func(string) string) result { return pair(envconf.Switch(g, name, true)) }, nil, `CORRAL_X="yes": want on or off`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := tc.read(func(k string) string {
				if k == name {
					return tc.value
				}
				return ""
			})
			if tc.err != "" {
				if got.err == nil || !strings.Contains(got.err.Error(), tc.err) {
					t.Fatalf("%s=%q: err = %v, want one containing %q", name, tc.value, got.err, tc.err)
				}
				return
			}
			if got.err != nil || got.v != tc.want {
				t.Errorf("%s=%q: %v, %v; want %v", name, tc.value, got.v, got.err, tc.want)
			}
		})
	}
}

func TestNATSURL(t *testing.T) {
	t.Parallel()
	if got := envconf.NATSURL(func(string) string { return "" }); got != envconf.DefaultNATSURL {
		t.Errorf("unset: %q, want %q", got, envconf.DefaultNATSURL)
	}
	if got := envconf.NATSURL(func(string) string { return "nats://a:1,nats://b:1" }); got != "nats://a:1,nats://b:1" {
		t.Errorf("set: %q", got)
	}
}

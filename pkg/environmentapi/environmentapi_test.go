package environmentapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/environment"
	"corral.dev/pkg/environmentapi"
	"corral.dev/pkg/natstest"
)

// TestWire pins the JSON the CLI and the sandbox-manager exchange, and
// the bucket's entries, which every service reads.
func TestWire(t *testing.T) {
	t.Parallel()
	at := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name string
		v    any
		want string
	}{
		{"put", environmentapi.Request{Spec: &environment.Spec{Name: "py", Egress: environment.Egress{Presets: []string{"pypi"}}, Packages: environment.Packages{Pip: []string{"rich"}}, Setup: "true"}, Default: true},
			`{"spec":{"name":"py","egress":{"presets":["pypi"]},"packages":{"pip":["rich"]},"setup":"true"},"default":true}`},
		{"show", environmentapi.Request{Name: "py"}, `{"name":"py"}`},
		{"reply", environmentapi.Reply{Environment: &environmentapi.Environment{Entry: environmentapi.Entry{Spec: environment.Spec{Name: "py"}, Version: "ab",
			Built: &environmentapi.Built{Version: "ab", At: at, SetupMS: 1200}, UpdatedAt: at}, Default: true}, Outcome: environmentapi.Created, Default: "py"},
			`{"environment":{"spec":{"name":"py"},"version":"ab","built":{"version":"ab","at":"2025-01-02T03:04:05Z","setup_ms":1200},"updated_at":"2025-01-02T03:04:05Z","default":true},"outcome":"created","default":"py"}`},
		{"default", environmentapi.DefaultEntry{Name: "py"}, `{"name":"py"}`},
	}
	for _, tc := range tests {
		got, err := json.Marshal(tc.v)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != tc.want {
			t.Errorf("%s:\n got  %s\n want %s", tc.name, got, tc.want)
		}
	}
	if got := environmentapi.Subject("acme", "ada", environmentapi.OpList); got != "corral.environment.acme."+bus.UserToken("ada")+".ls" {
		t.Errorf("Subject = %s", got)
	}
	if got := environmentapi.TenantSubject("acme", environmentapi.OpPut); got != "corral.environment.acme.tenant.put" {
		t.Errorf("TenantSubject = %s", got)
	}
	for op, w := range map[string]bool{environmentapi.OpList: false, environmentapi.OpShow: false, environmentapi.OpPut: true, environmentapi.OpRemove: true, environmentapi.OpDefault: true} {
		if environmentapi.Writes(op) != w {
			t.Errorf("Writes(%s) = %v", op, !w)
		}
	}
}

// bucket returns the environments bucket of a fresh server.
func bucket(t *testing.T) jetstream.KeyValue {
	t.Helper()
	_, _, js := natstest.Run(t)
	ctx := context.Background()
	if err := bus.Setup(ctx, js); err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, bus.BucketEnvironments)
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

// put keeps spec as tenant's environment, built when built is set, and
// returns its version.
func put(t *testing.T, kv jetstream.KeyValue, tenant string, spec environment.Spec, built bool) string {
	t.Helper()
	e := environmentapi.Entry{Spec: spec, Version: spec.Version(), UpdatedAt: time.Now()}
	if built {
		e.Built = &environmentapi.Built{Version: e.Version, At: time.Now(), SetupMS: 10}
	}
	data, _ := json.Marshal(e)
	if _, err := kv.Put(context.Background(), environmentapi.Key(tenant, spec.Name), data); err != nil {
		t.Fatal(err)
	}
	return e.Version
}

func setDefault(t *testing.T, kv jetstream.KeyValue, tenant, name string) {
	t.Helper()
	data, _ := json.Marshal(environmentapi.DefaultEntry{Name: name})
	if _, err := kv.Put(context.Background(), environmentapi.DefaultKey(tenant), data); err != nil {
		t.Fatal(err)
	}
}

func TestResolve(t *testing.T) {
	t.Parallel()
	kv := bucket(t)
	ctx := context.Background()
	py := environment.Spec{Name: "py", Setup: "true"}
	node := environment.Spec{Name: "node", Setup: "false"}
	pyV := put(t, kv, "acme", py, true)
	nodeV := put(t, kv, "acme", node, false)
	put(t, kv, "initech", environment.Spec{Name: "secret"}, true)
	setDefault(t, kv, "acme", "py")
	setDefault(t, kv, "umbrella", "gone")

	tests := []struct {
		name, tenant, ask string
		want, wantV       string
		built             bool
		err               error
		msg               string
	}{
		{"named", "acme", "node", "node", nodeV, false, nil, ""},
		{"default", "acme", "", "py", pyV, true, nil, ""},
		{"no default", "initech", "", "", "", false, nil, ""},
		{"unknown", "acme", "rust", "", "", false, environmentapi.ErrUnknown, `no such environment "rust" in tenant acme (corral environments ls lists them)`},
		{"another tenant's", "acme", "secret", "", "", false, environmentapi.ErrUnknown, `"secret"`},
		{"a default removed", "umbrella", "", "", "", false, environmentapi.ErrUnknown, `"gone"`},
		{"not a name", "acme", "py.x", "", "", false, environmentapi.ErrUnknown, `"py.x"`},
		{"a key token", "acme", "*", "", "", false, environmentapi.ErrUnknown, `"*"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			name, v, built, err := environmentapi.Resolve(ctx, kv, tc.tenant, tc.ask)
			if tc.err != nil {
				if !errors.Is(err, tc.err) || !strings.Contains(err.Error(), tc.msg) {
					t.Errorf("Resolve: %v, want %v with %q", err, tc.err, tc.msg)
				}
				return
			}
			if err != nil || name != tc.want || v != tc.wantV || built != tc.built {
				t.Errorf("Resolve = %q, %q, %v, %v; want %q, %q, %v", name, v, built, err, tc.want, tc.wantV, tc.built)
			}
		})
	}
}

// A version replaced since is still found, while the bucket keeps it; not
// once the environment was removed.
func TestLookup(t *testing.T) {
	t.Parallel()
	kv := bucket(t)
	ctx := context.Background()
	v1 := put(t, kv, "acme", environment.Spec{Name: "py", Egress: environment.Egress{Hosts: []string{"one.example.com"}}}, false)
	put(t, kv, "acme", environment.Spec{Name: "py", Egress: environment.Egress{Hosts: []string{"one.example.com"}}}, true) // built
	v2 := put(t, kv, "acme", environment.Spec{Name: "py", Egress: environment.Egress{Hosts: []string{"two.example.com"}}}, false)

	for _, tc := range []struct{ version, host string }{{v1, "one.example.com"}, {v2, "two.example.com"}} {
		e, err := environmentapi.Lookup(ctx, kv, "acme", "py", tc.version)
		if err != nil || e.Version != tc.version || e.Spec.Egress.Hosts[0] != tc.host {
			t.Errorf("Lookup(%.8s) = %+v, %v; want the definition allowing %s", tc.version, e, err, tc.host)
		}
	}
	if e, _ := environmentapi.Lookup(ctx, kv, "acme", "py", v1); !e.IsBuilt() {
		t.Errorf("Lookup(v1) = %+v: want its last write, which records its build", e)
	}
	if _, err := environmentapi.Lookup(ctx, kv, "acme", "py", strings.Repeat("0", 64)); !errors.Is(err, environmentapi.ErrVersionGone) {
		t.Errorf("Lookup of a version it never had: %v, want ErrVersionGone", err)
	}
	if _, err := environmentapi.Lookup(ctx, kv, "acme", "rust", v1); !errors.Is(err, environmentapi.ErrUnknown) {
		t.Errorf("Lookup of an unknown environment: %v, want ErrUnknown", err)
	}
	// Removed and made again: the old versions are gone.
	if err := kv.Purge(ctx, environmentapi.Key("acme", "py")); err != nil {
		t.Fatal(err)
	}
	put(t, kv, "acme", environment.Spec{Name: "py"}, false)
	if _, err := environmentapi.Lookup(ctx, kv, "acme", "py", v1); !errors.Is(err, environmentapi.ErrVersionGone) {
		t.Errorf("Lookup of a version from before a removal: %v, want ErrVersionGone", err)
	}
}

func TestList(t *testing.T) {
	t.Parallel()
	kv := bucket(t)
	ctx := context.Background()
	if got, def, err := environmentapi.List(ctx, kv, "acme"); err != nil || len(got) != 0 || def != "" {
		t.Fatalf("List of none = %v, %q, %v", got, def, err)
	}
	for _, n := range []string{"zeta", "alpha", "mid"} {
		put(t, kv, "acme", environment.Spec{Name: n}, n == "mid")
	}
	put(t, kv, "acmeco", environment.Spec{Name: "other"}, false)
	setDefault(t, kv, "acme", "mid")
	got, def, err := environmentapi.List(ctx, kv, "acme")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range got {
		names = append(names, fmt.Sprintf("%s/%v/%v", e.Spec.Name, e.Default, e.IsBuilt()))
	}
	// By name, mid the default and built; another tenant's not at all.
	if want := "alpha/false/false mid/true/true zeta/false/false"; def != "mid" || strings.Join(names, " ") != want {
		t.Errorf("List = %v, default %q; want %s, default mid", names, def, want)
	}
}

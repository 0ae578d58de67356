package sandbox

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"corral.dev/pkg/egressapi"
	"corral.dev/pkg/tool"
)

// layersDir returns a directory for layers under the Driver's own, which
// the sandbox user may reach.
func layersDir(t *testing.T, d *Driver) string {
	t.Helper()
	dir := filepath.Join(d.cfg.Dir, "layers")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// Setup runs its command once, with the layer writable at /opt/env and
// its variables, a scratch /workspace and network for the setup's
// identity, and leaves what it wrote in the layer on the host; its
// sandbox, scratch and egress are gone after.
func TestSetupBuildsALayer(t *testing.T) {
	e := newTestEgress(t)
	d, _ := newEgressDriver(t, e, Config{})
	ctx := t.Context()
	layers := layersDir(t, d)
	id := egressapi.Identity{Tenant: tenant, Session: uuid.New(), Environment: "py", EnvironmentVersion: "v1", Phase: egressapi.PhaseSetup}
	layer := filepath.Join(layers, "v1")
	res, err := d.Setup(ctx, id, layer, `echo "PATH=$PATH"; echo "PYTHONPATH=$PYTHONPATH NODE_PATH=$NODE_PATH"
mkdir -p /opt/env/bin
printf '#!/bin/sh\necho hi from the layer\n' > /opt/env/bin/hello
chmod 755 /opt/env/bin/hello
echo "in $(pwd), $(ls -A /workspace | wc -l) entries; proxy $HTTPS_PROXY"`, time.Minute)
	if err != nil {
		t.Fatalf("Setup: %v", err)
	}
	if res.IsError || res.ExitCode == nil || *res.ExitCode != 0 {
		t.Fatalf("Setup = %+v, want success", res)
	}
	for _, want := range []string{
		"PATH=/opt/env/bin:/opt/env/python/bin:/opt/env/node/node_modules/.bin:",
		"PYTHONPATH=/opt/env/python NODE_PATH=/opt/env/node/node_modules",
		"in /workspace, 0 entries; proxy " + egressapi.ProxyURL,
	} {
		if !strings.Contains(res.Output, want) {
			t.Errorf("setup output:\n%s\nwant it to hold %q", res.Output, want)
		}
	}
	if b, err := os.ReadFile(filepath.Join(layer, "bin", "hello")); err != nil || !strings.Contains(string(b), "hi from the layer") {
		t.Errorf("the layer on the host: %q, %v", b, err)
	}
	opened, _, closed := e.calls()
	if len(opened) != 1 || !opened[0].Equal(id) || len(closed) != 1 || closed[0].Session != id.Session {
		t.Errorf("egress opened %+v and closed %+v; want the setup's identity, once each", opened, closed)
	}
	if live, _ := d.Live(); live != 0 {
		t.Errorf("%d sandboxes live after the setup", live)
	}
	if left, _ := os.ReadDir(filepath.Join(d.cfg.Dir, setupDir)); len(left) != 0 {
		t.Errorf("scratch workspaces left: %v", left)
	}

	// A failing setup says how it ended; one past its time is stopped.
	res, err = d.Setup(ctx, id, filepath.Join(layers, "v2"), "echo about to fail; exit 3", time.Minute)
	if err != nil || !res.IsError || res.ExitCode == nil || *res.ExitCode != 3 || !strings.Contains(res.Output, "about to fail") {
		t.Errorf("failing setup = %+v, %v; want exit code 3 with its output", res, err)
	}
	res, err = d.Setup(ctx, id, filepath.Join(layers, "v3"), "sleep 30", 300*time.Millisecond)
	if err != nil || !res.IsError || !res.TimedOut {
		t.Errorf("slow setup = %+v, %v; want it timed out", res, err)
	}
	if _, err := d.Setup(ctx, id, layer, "true", time.Minute); err == nil {
		t.Error("Setup over an existing layer: no error")
	}
}

// A session whose environment has a layer sees it read-only at /opt/env,
// with its programs first on PATH and its variables, and its egress
// identity names the environment; a session without sees none of it. A
// layer that cannot be had fails the call before it runs.
func TestSessionWithALayer(t *testing.T) {
	e := newTestEgress(t)
	var layer string
	withEnv, broken := uuid.New(), uuid.New()
	d, _ := newEgressDriver(t, e, Config{PoolSize: 1, Layer: func(ctx context.Context, id egressapi.Identity) (Layer, error) {
		switch id.Session {
		case withEnv:
			return Layer{Dir: layer, Environment: "py", Version: "v1"}, nil
		case broken:
			return Layer{}, errors.New("no layer today")
		}
		return Layer{}, nil
	}})
	layer = filepath.Join(layersDir(t, d), "v1")
	if res, err := d.Setup(t.Context(), egressapi.Identity{Tenant: tenant, Session: uuid.New(), Phase: egressapi.PhaseSetup}, layer,
		"mkdir -p /opt/env/bin && printf '#!/bin/sh\\necho hi from the layer\\n' > /opt/env/bin/hello && chmod 755 /opt/env/bin/hello", time.Minute); err != nil || res.IsError {
		t.Fatalf("Setup = %+v, %v", res, err)
	}

	out := bash(t, d, withEnv, `hello; echo "PATH=$PATH"; echo "PYTHONPATH=$PYTHONPATH"; touch /opt/env/new 2>&1 || echo read-only; touch /opt/env/bin/hello 2>&1 || echo still`).Output
	for _, want := range []string{"hi from the layer", "PATH=/opt/env/bin:", "PYTHONPATH=/opt/env/python", "Read-only file system", "read-only", "still"} {
		if !strings.Contains(out, want) {
			t.Errorf("a session of the environment:\n%s\nwant it to hold %q", out, want)
		}
	}
	if _, err := os.Stat(filepath.Join(layer, "new")); err == nil {
		t.Error("a session wrote into the layer")
	}
	opened, _, _ := e.calls()
	if last := opened[len(opened)-1]; last.Session != withEnv || last.Environment != "py" || last.EnvironmentVersion != "v1" || last.Phase != "" {
		t.Errorf("egress opened %+v; want the session's identity with its environment", last)
	}

	plain := uuid.New()
	out = bash(t, d, plain, `ls /opt/env 2>&1; echo "PATH=$PATH PYTHONPATH=${PYTHONPATH:-none}"`).Output
	if !strings.Contains(out, "No such file") || strings.Contains(out, "/opt/env/bin") || !strings.Contains(out, "PYTHONPATH=none") {
		t.Errorf("a session without an environment:\n%s", out)
	}

	_, err := d.Run(t.Context(), who(tenant, broken), &tool.BashArgs{Command: "echo ran"})
	if !errors.Is(err, ErrNotRun) || !strings.Contains(err.Error(), "no layer today") {
		t.Errorf("a session whose layer cannot be had: %v, want ErrNotRun saying why", err)
	}
}

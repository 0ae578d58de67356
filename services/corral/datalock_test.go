package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"corral.dev/pkg/logtest"
	"corral.dev/pkg/natstest"
)

// TestDevRefusesALockedDataDir checks that a second corral dev over the
// data directory of one running refuses, naming the holder, and that the
// directory is free again once the first stops.
func TestDevRefusesALockedDataDir(t *testing.T) {
	data := t.TempDir()
	p, stop := startDevAt(t, natstest.FreeAddr(t), data, nil, nil)

	// Its own ports, so that only the data directory is shared.
	vars := map[string]string{"CORRAL_APPROVAL_LISTEN": natstest.FreeAddr(t), "CORRAL_METRICS_LISTEN": natstest.FreeAddr(t)}
	getenv := func(k string) string {
		if v, ok := vars[k]; ok {
			return v
		}
		return p.getenv(k)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var stderr logtest.Buffer
	code := run(ctx, []string{"dev", "--data", data, "--listen", natstest.FreeAddr(t)}, getenv, &stderr, &stderr)
	if ctx.Err() != nil {
		t.Fatalf("the second corral dev ran over the same data directory until stopped:\n%s", &stderr)
	}
	if code == 0 {
		t.Fatalf("the second corral dev exited 0, want non-zero:\n%s", &stderr)
	}
	for _, want := range []string{fmt.Sprintf("pid %d", os.Getpid()), data, "--data"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("the refusal does not say %q:\n%s", want, &stderr)
		}
	}
	// The first runs on.
	nc, err := p.connect()
	if err != nil {
		t.Fatalf("the first corral dev after the refusal: %v", err)
	}
	nc.Close()

	stop()
	_, stop = startDevAt(t, natstest.FreeAddr(t), data, nil, nil)
	stop()
}

package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"corral.dev/pkg/natstest"
	"corral.dev/pkg/tool"
)

// A session's first Bash call takes a sandbox started ahead, with the
// session's files in it, and the pool is filled again; the pool's
// sandboxes and directories go with the Driver.
func TestPooledSandboxTakesTheWorkspace(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var kinds []string
	d := newDriver(t, Config{IdleTimeout: time.Hour, PoolSize: 1, OnStart: func(kind string, _ time.Duration) {
		mu.Lock()
		kinds = append(kinds, kind)
		mu.Unlock()
	}})
	first := uuid.New()
	bash(t, d, first, "true")
	pooledBox := func() (*box, error) {
		d.mu.Lock()
		defer d.mu.Unlock()
		if list := d.pool[tenant]; len(list) == 1 {
			return list[0].b, nil
		}
		return nil, fmt.Errorf("%d pooled sandboxes, want 1", len(d.pool[tenant]))
	}
	var pooled *box
	natstest.WaitFor(t, 10*time.Second, func() (err error) {
		pooled, err = pooledBox()
		return err
	})

	// The second session has a file before its first Bash call.
	second := uuid.New()
	run(t, d, second, &tool.WriteArgs{FilePath: "/workspace/notes/f", Content: "kept\n"})
	res := bash(t, d, second, "cat notes/f; echo more >> notes/f; ls -A /workspace")
	if res.IsError || res.Output != "kept\nnotes\n" {
		t.Errorf("first call in the pooled sandbox = %+v, want the session's file and nothing else", res)
	}
	if got := liveSandbox(d, second); got != pooled {
		t.Error("the session did not get the pooled sandbox")
	}
	data, err := os.ReadFile(filepath.Join(d.Workspace(tenant, second), "notes", "f"))
	if err != nil || string(data) != "kept\nmore\n" {
		t.Errorf("the workspace on the host = %q, %v; want what the sandbox wrote", data, err)
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		b, err := pooledBox()
		if err == nil && b == pooled {
			return errors.New("the pool still holds the sandbox taken")
		}
		return err
	})
	mu.Lock()
	if len(kinds) != 2 || kinds[0] != StartCold || kinds[1] != StartRestart {
		t.Errorf("starts = %v, want cold then restart (a kept workspace)", kinds)
	}
	mu.Unlock()
	leftover, _ := os.ReadDir(d.poolDir())
	if len(leftover) != 1 {
		t.Errorf("%d directories in the pool's, want 1", len(leftover))
	}
	d.Close()
	if _, err := os.Stat(d.poolDir()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the pool's directory after Close: %v", err)
	}
}

// A pooled sandbox made for other skills is not taken.
func TestPooledSandboxWithOtherSkillsIsNotTaken(t *testing.T) {
	t.Parallel()
	skills := t.TempDir()
	var mu sync.Mutex
	current := ""
	d := newDriver(t, Config{IdleTimeout: time.Hour, PoolSize: 1, Skills: func(_ context.Context, _ string) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		return current, nil
	}})
	bash(t, d, uuid.New(), "true")
	natstest.WaitFor(t, 10*time.Second, func() error {
		if n := d.Pooled(); n != 1 {
			return fmt.Errorf("%d pooled", n)
		}
		return nil
	})
	if err := os.WriteFile(filepath.Join(skills, "SKILL.md"), []byte("skill\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	current = skills
	mu.Unlock()
	if res := bash(t, d, uuid.New(), "cat /skills/SKILL.md"); res.IsError || res.Output != "skill\n" {
		t.Errorf("a call with new skills = %+v, want them", res)
	}
}

package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"corral.dev/pkg/natstest"
	"corral.dev/pkg/tool"
	"github.com/google/uuid"
)

func TestBashWritesWorkspace(t *testing.T) {
	t.Parallel()
	d := newDriver(t, Config{})
	session := uuid.New()
	res := bash(t, d, session, "echo hi > a.txt; cat a.txt; pwd")
	if res.IsError || res.Output != "hi\n/workspace\n" {
		t.Errorf("result = %+v, want output %q", res, "hi\n/workspace\n")
	}
	got, err := os.ReadFile(filepath.Join(d.Workspace(tenant, session), "a.txt"))
	if err != nil || string(got) != "hi\n" {
		t.Errorf("a.txt on the host = %q, %v; want %q", got, err, "hi\n")
	}
	// The workspace persists between calls.
	if res := bash(t, d, session, "cat a.txt"); res.Output != "hi\n" {
		t.Errorf("second call output = %q, want %q", res.Output, "hi\n")
	}
}

func TestBashExitStatus(t *testing.T) {
	t.Parallel()
	d := newDriver(t, Config{})
	tests := []struct {
		name    string
		command string
		code    int
		output  string
	}{
		{"success", "echo ok", 0, "ok\n"},
		{"exit 3", "echo partial; exit 3", 3, "partial\nExit code 3"},
		{"no newline", "printf x; exit 1", 1, "x\nExit code 1"},
		{"stdout and stderr in order", "echo a; echo b >&2; echo c", 0, "a\nb\nc\n"},
		{"command not found", "no-such-command-here", 127, "/bin/bash: line 1: no-such-command-here: command not found\nExit code 127"},
		{"lines numbered from 1", "true\nno-such-command-here", 127, "/bin/bash: line 2: no-such-command-here: command not found\nExit code 127"},
		{"errexit", "set -e; false; echo not reached", 1, "Exit code 1"},
		{"killed by signal", "kill -9 $$", 137, "Exit code 137 (killed)"},
		{"runs bash", "echo $BASH_VERSION | grep -q . && echo bash", 0, "bash\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			res := bash(t, d, uuid.New(), tc.command)
			if res.ExitCode == nil || *res.ExitCode != tc.code {
				t.Errorf("ExitCode = %v, want %d", res.ExitCode, tc.code)
			}
			if res.IsError != (tc.code != 0) {
				t.Errorf("IsError = %v, want %v", res.IsError, tc.code != 0)
			}
			if res.Output != tc.output {
				t.Errorf("Output = %q, want %q", res.Output, tc.output)
			}
		})
	}
}

// hostProcesses returns the host pids whose command line contains marker:
// bwrap, the shells and the sleeps of one test.
func hostProcesses(t *testing.T, marker string) []string {
	t.Helper()
	cmdlines, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	var pids []string
	for _, p := range cmdlines {
		b, err := os.ReadFile(p)
		if err == nil && strings.Contains(string(b), marker) {
			pids = append(pids, filepath.Base(filepath.Dir(p)))
		}
	}
	return pids
}

func noProcesses(t *testing.T, marker string) func() error {
	return func() error {
		if pids := hostProcesses(t, marker); len(pids) > 0 {
			return fmt.Errorf("processes %v with %q still running", pids, marker)
		}
		return nil
	}
}

func TestBashTimeoutKillsEverything(t *testing.T) {
	t.Parallel()
	d := newDriver(t, Config{})
	// A distinctive sleep length marks our processes in the host's /proc.
	marker := fmt.Sprintf("60.%d1", os.Getpid())
	cmd := fmt.Sprintf("sleep %s & setsid sleep %s & echo started; sleep %s", marker, marker, marker)
	start := time.Now()
	res := run(t, d, uuid.New(), &tool.BashArgs{Command: cmd, Timeout: 500})
	elapsed := time.Since(start)
	if !res.TimedOut || !res.IsError || res.ExitCode != nil {
		t.Errorf("result = %+v, want TimedOut, IsError and no exit code", res)
	}
	if want := "started\nCommand timed out after 500ms"; res.Output != want {
		t.Errorf("Output = %q, want %q", res.Output, want)
	}
	if elapsed > 30*time.Second {
		t.Errorf("call took %s; the sleep was not killed", elapsed)
	}
	natstest.WaitFor(t, 5*time.Second, noProcesses(t, marker))
}

// When the command ends, background children end with the sandbox and
// cannot hold the call open.
func TestBashBackgroundChildDies(t *testing.T) {
	t.Parallel()
	d := newDriver(t, Config{})
	marker := fmt.Sprintf("60.%d2", os.Getpid())
	res := bash(t, d, uuid.New(), fmt.Sprintf("nohup sleep %s >/dev/null 2>&1 & sleep %s & echo bye", marker, marker))
	if res.IsError || res.Output != "bye\n" {
		t.Errorf("result = %+v, want output %q", res, "bye\n")
	}
	if res.Duration > 30*time.Second {
		t.Errorf("call took %s; a background child held it open", res.Duration)
	}
	natstest.WaitFor(t, 5*time.Second, noProcesses(t, marker))
}

func TestBashOutputCapped(t *testing.T) {
	t.Parallel()
	d := newDriver(t, Config{})
	res := bash(t, d, uuid.New(), "head -c 1000000 /dev/zero | tr '\\0' a; echo done >&2")
	if !res.Truncated || res.IsError {
		t.Errorf("Truncated = %v, IsError = %v; want true, false", res.Truncated, res.IsError)
	}
	wantHead := strings.Repeat("a", DefaultOutputLimit)
	wantNote := fmt.Sprintf("\n[output truncated: %d bytes omitted]", 1000000+len("done\n")-DefaultOutputLimit)
	if res.Output != wantHead+wantNote {
		t.Errorf("Output has %d bytes ending %q; want %d a's then %q", len(res.Output), res.Output[max(0, len(res.Output)-60):], DefaultOutputLimit, wantNote)
	}
}

func TestBashInvalidUTF8(t *testing.T) {
	t.Parallel()
	d := newDriver(t, Config{})
	res := bash(t, d, uuid.New(), `printf 'a\377b\n'`)
	if res.Output != "a\uFFFDb\n" {
		t.Errorf("Output = %q, want %q", res.Output, "a\uFFFDb\n")
	}
}

// Every call starts in a shell of its own, as bash -c would start it:
// nothing of the call before it, and no descriptor but stdin, stdout and
// stderr, even one the manager's process left open for its children.
func TestBashCallsStartAfresh(t *testing.T) {
	t.Parallel()
	d := newDriver(t, Config{})
	session := uuid.New()
	bash(t, d, session, "true") // the sandbox is up
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// Open without close-on-exec, as a parent of the manager might.
	leaked, err := syscall.Dup(int(f.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(leaked)
	if res := bash(t, d, session, "x=set; shopt -s extglob; cd /tmp; trap 'echo trapped' EXIT"); res.Output != "trapped\n" {
		t.Fatalf("first call = %q", res.Output)
	}
	// A new sandbox too, started after the descriptor leaked.
	for _, s := range []uuid.UUID{session, uuid.New()} {
		res := bash(t, d, s, `echo "$0 $# [${x-}${c-}${t-}${REPLY-}] $PWD"; shopt -q extglob && echo extglob; ls /proc/$$/fd`)
		if want := "/bin/bash 0 [] /workspace\n0\n1\n2\n"; res.Output != want {
			t.Errorf("call = %q, want %q", res.Output, want)
		}
	}
}

// No variable of the manager's environment reaches the sandbox, not even
// through bwrap's own /proc/1/environ.
func TestBashEnvironmentIsMinimal(t *testing.T) {
	canary := "canary-" + uuid.NewString()
	t.Setenv("CORRAL_TEST_CANARY", canary)
	d := newDriver(t, Config{})
	res := bash(t, d, uuid.New(), "env; for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < $f; done")
	if strings.Contains(res.Output, canary) {
		t.Fatalf("canary leaked into the sandbox:\n%s", res.Output)
	}
	for _, kv := range d.env {
		if want := kv[0] + "=" + kv[1] + "\n"; !strings.Contains(res.Output, want) {
			t.Errorf("env lacks %q:\n%s", want, res.Output)
		}
	}
}

// Cancelling the caller's context kills the command and returns an error.
func TestBashContextCancelled(t *testing.T) {
	t.Parallel()
	d := newDriver(t, Config{})
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	res, err := d.Run(ctx, who(tenant, uuid.New()), &tool.BashArgs{Command: "echo started; sleep 60"})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Run = %+v, %v; want an error wrapping context.DeadlineExceeded", res, err)
	}
	if res.TimedOut {
		t.Errorf("TimedOut = true; the caller's context ended, not the call's timeout")
	}
}

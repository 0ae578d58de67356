package sandbox

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
)

func TestSandboxIsolation(t *testing.T) {
	t.Parallel()
	d := newDriver(t, Config{})

	// Another session of another tenant, with a secret in its workspace.
	secret := "secret-" + uuid.NewString()
	other := d.Workspace("other", uuid.New())
	if err := os.MkdirAll(other, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(other, "secret.txt"), []byte(secret), 0o644); err != nil {
		t.Fatal(err)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// Not defer: the parallel subtests run after this function returns.
	t.Cleanup(func() { ln.Close() })
	port := ln.Addr().(*net.TCPAddr).Port

	top := []string{"dev", "etc", "home", "proc", "run", "skills", "tmp", "usr", "workspace"}
	for _, dir := range libDirs {
		if fileExists(dir) {
			top = append(top, dir[1:])
		}
	}
	slices.Sort(top)

	tests := []struct {
		name    string
		command string
		check   func(t *testing.T, res Result)
	}{
		{"write etc", "echo x > /etc/corral-test", fails()},
		{"write usr", "echo x > /usr/corral-test", fails()},
		{"write root", "echo x > /corral-test", fails()},
		{"mkdir root", "mkdir /corral-test", fails()},
		{"host root home", "ls -A /root", fails()},
		// The sandbox's /home holds its own HOME alone.
		{"host home", "ls -A /home", outputs("sandbox\n")},
		{"host var", "ls -A /var", fails()},
		{"top level", "ls -A /", outputs(strings.Join(top, "\n") + "\n")},
		{"other workspace", "cat " + filepath.Join(other, "secret.txt"), fails(secret)},
		{"data dir", "ls -A " + d.cfg.Dir, fails("other", tenant)},
		{"secret anywhere outside usr", "grep -rlsD skip --exclude-dir=proc --exclude-dir=usr " + secret + " /", fails(secret)},
		{"shadow", "cat /etc/shadow", fails("root:")},
		{"private keys", "ls -A /etc/ssl/private; touch /etc/ssl/private/x", fails(hostEntries(t, "/etc/ssl/private")...)},
		{"tcp to host loopback", fmt.Sprintf("exec 3<>/dev/tcp/127.0.0.1/%d && echo connected", port), fails("connected")},
		{"only loopback", "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '", outputs("lo\n")},
		{"hostname", "hostname", outputs("sandbox\n")},
		{"pid 1 is the executor", "tr '\\0' ' ' < /proc/1/cmdline", outputs(executorPath + " " + ExecutorArg + " ")},
		{"no capabilities", "grep CapEff /proc/self/status", outputs("CapEff:\t0000000000000000\n")},
		{"not traced", "grep TracerPid /proc/self/status", outputs("TracerPid:\t0\n")},
		{"dev read-only", "touch /dev/corral-test", fails()},
		{"dev shm bounded", "df -B1 --output=size /dev/shm | tail -n 1 | tr -d ' '", outputs(fmt.Sprint(DefaultTmpSize) + "\n")},
		{"home bounded", "df -B1 --output=size ~ | tail -n 1 | tr -d ' '", outputs(fmt.Sprint(DefaultTmpSize) + "\n")},
		{"executor cannot be traced", "cat /proc/1/environ", fails()},
	}
	if d.disableUserns {
		tests = append(tests, struct {
			name    string
			command string
			check   func(t *testing.T, res Result)
		}{"nested user namespace", "unshare -U true", fails()})
	}
	// The group returns once its parallel subtests are done.
	t.Run("calls", func(t *testing.T) {
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				tc.check(t, bash(t, d, uuid.New(), tc.command))
			})
		}
	})

	for _, p := range []string{"/etc/corral-test", "/usr/corral-test", "/corral-test"} {
		if fileExists(p) {
			t.Errorf("%s exists on the host", p)
		}
	}
}

// /tmp, /dev/shm and HOME belong to the session's sandbox: each lasts from
// call to call while the sandbox is warm, no other session sees it, and it
// starts empty in the sandbox that follows an idle stop or a Destroy, which
// keeps /workspace.
func TestSandboxTmpIsPrivate(t *testing.T) {
	t.Parallel()
	d := newDriver(t, Config{IdleTimeout: time.Hour})
	for _, dir := range []string{"/tmp", "/dev/shm", "$HOME"} {
		t.Run(dir, func(t *testing.T) {
			t.Parallel()
			session, other := uuid.New(), uuid.New()
			if res := bash(t, d, session, "echo x > "+dir+"/f && cat "+dir+"/f && echo w > /workspace/f"); res.Output != "x\n" {
				t.Fatalf("writing %s: %+v", dir, res)
			}
			if res := bash(t, d, session, "cat "+dir+"/f"); res.Output != "x\n" || res.IsError {
				t.Errorf("%s in the next call: %+v, want the file written before", dir, res)
			}
			if res := bash(t, d, other, "ls -A "+dir); res.Output != "" || res.IsError {
				t.Errorf("%s of another session: %+v, want empty", dir, res)
			}
			stopSandbox(t, d, session)
			if res := bash(t, d, session, "ls -A "+dir+"; cat /workspace/f"); res.Output != "w\n" || res.IsError {
				t.Errorf("%s and /workspace/f after the sandbox stopped: %+v, want %s empty and /workspace/f kept", dir, res, dir)
			}
		})
	}
}

// fails checks that a command failed and that its output holds none of absent.
func fails(absent ...string) func(t *testing.T, res Result) {
	return func(t *testing.T, res Result) {
		t.Helper()
		if !res.IsError {
			t.Errorf("command succeeded, want it to fail; output:\n%s", res.Output)
		}
		for _, s := range absent {
			if strings.Contains(res.Output, s) {
				t.Errorf("output contains %q:\n%s", s, res.Output)
			}
		}
	}
}

// outputs checks that a command succeeded with output want.
func outputs(want string) func(t *testing.T, res Result) {
	return func(t *testing.T, res Result) {
		t.Helper()
		if res.IsError || res.Output != want {
			t.Errorf("result = %+v, want success with output %q", res, want)
		}
	}
}

func hostEntries(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func fileExists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

package main

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"

	"corral.dev/pkg/modeltest"
	"corral.dev/pkg/natstest"
)

// TestFirstHour follows the README as a newcomer would, on a terminal,
// from a clean home: the first command installs corral and starts the
// platform, whose banner says what matters once; then the commands of
// "Using it" in order, each checked for what it prints and how it exits.
// The provider is the model fake, named as a user names theirs.
func TestFirstHour(t *testing.T) {
	if testing.Short() {
		t.Skip("installs corral and runs it as a user does")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	fake := modeltest.New(t, echoPrompt)
	home := t.TempDir()
	bin := filepath.Join(home, "go", "bin")
	env := []string{
		"HOME=" + home,
		"PATH=" + bin + ":" + os.Getenv("PATH"),
		"GOBIN=" + bin,
		"OPENAI_API_KEY=sk-test",
		"OPENAI_BASE_URL=" + fake.URL() + "/v1",
		"TERM=xterm",
		"LANG=C.UTF-8",
	}
	// The module and build caches are the machine's: a newcomer's Go has
	// its own, and this one would otherwise download and build it all.
	for _, k := range []string{"GOCACHE", "GOMODCACHE", "GOPATH", "GOFLAGS", "GOPROXY", "GOTOOLCHAIN"} {
		if v, err := exec.Command("go", "env", k).Output(); err == nil && len(bytes.TrimSpace(v)) > 0 {
			env = append(env, k+"="+string(bytes.TrimSpace(v)))
		}
	}
	listen, approvals, metrics := natstest.FreeAddr(t), natstest.FreeAddr(t), natstest.FreeAddr(t)

	// The first command: install corral, start the platform.
	dev := startOnTerminal(t, root, env, "scripts/dev.sh", "--listen", listen, "--approvals", approvals, "--metrics", metrics)
	banner := dev.waitFor(t, 5*time.Minute, "Try: ")
	for _, want := range []string{
		"Corral devel ", // the build's version, from its commit
		"Models: openai:gpt-4.1 by default (CORRAL_MODEL sets it; a session may name another); providers: openai.",
		"Reviewers approve held calls at http://" + approvals,
		`Try: corral run "list the files in /workspace"`, // the client finds corral dev's credentials itself
	} {
		if !strings.Contains(banner, want) {
			t.Errorf("the banner lacks %q:\n%s", want, banner)
		}
	}
	if strings.Contains(banner, "level=") {
		t.Errorf("log lines interleave the banner:\n%s", banner)
	}
	if _, err := os.Stat(filepath.Join(bin, "corral")); err != nil {
		t.Fatalf("scripts/dev.sh installed no corral in GOBIN: %v\n%s", err, banner)
	}

	// "Using it", in order.
	corral := func(code int, line string, want ...string) string {
		t.Helper()
		got, exit := onTerminal(t, root, env, line)
		if exit != code {
			t.Errorf("%s: exit %d, want %d:\n%s", line, exit, code, got)
		}
		for _, w := range want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: the output lacks %q:\n%s", line, w, got)
			}
		}
		if strings.Contains(got, `\u00`) {
			t.Errorf("%s: the output shows JSON escaped for HTML:\n%s", line, got)
		}
		return got
	}
	corral(0, "corral --version", "corral devel ")
	out := corral(0, `corral run "tool echo 'a && b' > /workspace/x.txt && cat /workspace/x.txt"`,
		"→ Bash [", "a && b", "answer to tool echo 'a && b' > /workspace/x.txt && cat /workspace/x.txt: a && b")
	session := regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[0-9a-f]{4}-[0-9a-f]{12}`).FindString(out)
	if session == "" {
		t.Fatalf("corral run names no session:\n%s", out)
	}
	corral(0, "corral run --json 'summarise nothing'", `"type":"corral.session.v1.completed"`)
	corral(0, "corral logs "+session, "session.requested", "tool.completed", "a && b")
	corral(0, "corral sessions", session, "completed")
	corral(0, "printf 'from stdin\\n' | corral run -", "answer to from stdin")
	corral(3, `corral policy check --tool Bash --args '{"command":"rm -rf build"}'`, "approve by rule risky-shell")
	corral(2, "corral lgos "+session, `unknown command "lgos"`)
	corral(2, "corral logs", "usage: corral logs")

	// Ctrl-C stops it, saying so.
	dev.interrupt(t)
}

// terminal is a command running on a pseudo-terminal, and what it wrote.
type terminal struct {
	cmd *exec.Cmd
	mu  sync.Mutex
	out bytes.Buffer
	// done is closed once the command's output has ended.
	done chan struct{}
}

// startOnTerminal starts name with args in dir, with env and a terminal
// for its standard streams; the test's end stops it.
func startOnTerminal(t *testing.T, dir string, env []string, name string, args ...string) *terminal {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir, cmd.Env = dir, env
	ptmx, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 40, Cols: 200})
	if err != nil {
		t.Fatal(err)
	}
	term := &terminal{cmd: cmd, done: make(chan struct{})}
	go func() {
		defer close(term.done)
		r := bufio.NewReader(ptmx)
		buf := make([]byte, 4096)
		for {
			n, err := r.Read(buf)
			term.mu.Lock()
			term.out.Write(bytes.ReplaceAll(buf[:n], []byte("\r\n"), []byte("\n")))
			term.mu.Unlock()
			if err != nil {
				return // EIO once the command has exited
			}
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-term.done
		_ = cmd.Wait()
		ptmx.Close()
	})
	return term
}

func (term *terminal) String() string {
	term.mu.Lock()
	defer term.mu.Unlock()
	return term.out.String()
}

// waitFor returns what the command wrote once it holds line, up to the
// end of that line.
func (term *terminal) waitFor(t *testing.T, limit time.Duration, line string) string {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		s := term.String()
		if i := strings.Index(s, line); i >= 0 {
			if j := strings.IndexByte(s[i:], '\n'); j >= 0 {
				return s[:i+j+1]
			}
		}
		select {
		case <-term.done:
			t.Fatalf("the command ended before writing %q:\n%s", line, s)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q within %s:\n%s", line, limit, s)
		}
	}
}

// interrupt sends the command what Ctrl-C does and checks it ends well.
func (term *terminal) interrupt(t *testing.T) {
	t.Helper()
	// dev.sh execs corral: the process is corral dev itself.
	if err := term.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-term.done:
	case <-time.After(60 * time.Second):
		t.Fatalf("corral dev did not stop within 60s of Ctrl-C:\n%s", term)
	}
	var ee *exec.ExitError
	if err := term.cmd.Wait(); err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	} else if err != nil {
		t.Errorf("corral dev ended with %v after Ctrl-C:\n%s", err, term)
	}
}

// onTerminal runs line with bash in dir, with env and a terminal, and
// returns what it wrote and its exit status.
func onTerminal(t *testing.T, dir string, env []string, line string) (string, int) {
	t.Helper()
	term := startOnTerminal(t, dir, env, "bash", "-c", line)
	select {
	case <-term.done:
	case <-time.After(2 * time.Minute):
		t.Fatalf("%s did not end within 2 minutes:\n%s", line, term)
	}
	err := term.cmd.Wait()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return term.String(), 0
	case errors.As(err, &ee):
		return term.String(), ee.ExitCode()
	}
	t.Fatalf("%s: %v", line, err)
	return "", 0
}

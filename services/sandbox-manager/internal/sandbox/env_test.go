package sandbox

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"
)

func TestSandboxEnvPath(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		toolchains []string
		want       string
	}{
		{"none", nil, "/usr/local/bin:/usr/bin:/bin:/home/sandbox/.local/bin:/home/sandbox/go/bin"},
		{"go", []string{"/usr/local/go/bin"}, "/usr/local/go/bin:/usr/local/bin:/usr/bin:/bin:/home/sandbox/.local/bin:/home/sandbox/go/bin"},
		{"go and node", []string{"/usr/local/go/bin", "/usr/local/node/bin"}, "/usr/local/go/bin:/usr/local/node/bin:/usr/local/bin:/usr/bin:/bin:/home/sandbox/.local/bin:/home/sandbox/go/bin"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := sandboxEnv(tc.toolchains)
			if got := env[0]; got != [2]string{"PATH", tc.want} {
				t.Errorf("sandboxEnv(%q)[0] = %q, want PATH=%s", tc.toolchains, got, tc.want)
			}
			if i := slices.Index(env, [2]string{"HOME", homeDir}); i < 0 {
				t.Errorf("sandboxEnv(%q) = %q, want HOME=%s", tc.toolchains, env, homeDir)
			}
		})
	}
}

func TestPresentDirs(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	dir, file, missing := filepath.Join(root, "dir"), filepath.Join(root, "file"), filepath.Join(root, "missing")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(root, "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	got := presentDirs([]string{missing, link, file, dir})
	if want := []string{link, dir}; !slices.Equal(got, want) {
		t.Errorf("presentDirs = %q, want %q", got, want)
	}
}

// HOME is the sandbox's own, outside /workspace and writable, and it is
// where git, pip, npm and go keep what they keep: the workspace gets
// nothing of it.
func TestHomeOutsideWorkspace(t *testing.T) {
	t.Parallel()
	d := newDriver(t, Config{})
	session := uuid.New()
	res := bash(t, d, session, `echo "$HOME"; pwd; touch ~/x && echo ok; mkdir -p ~/.cache/x && dd if=/dev/zero of=$HOME/.cache/x/blob bs=1k count=64 status=none && du -sk ~/.cache/x`)
	if want := homeDir + "\n/workspace\nok\n64\t" + homeDir + "/.cache/x\n"; res.IsError || res.Output != want {
		t.Fatalf("HOME = %+v, want output %q", res, want)
	}

	tests := []struct {
		name, program, command, want string
	}{
		{"git", "git", "git config --global user.name ada && git config --global --show-origin user.name", "file:" + homeDir + "/.gitconfig\tada\n"},
		{"pip", "python3", "python3 -c 'import site; print(site.getuserbase())'", homeDir + "/.local\n"},
		{"npm", "npm", "npm config get cache", homeDir + "/.npm\n"},
		{"go", "go", "go env GOPATH GOMODCACHE GOCACHE", homeDir + "/go\n" + homeDir + "/go/pkg/mod\n" + homeDir + "/.cache/go-build\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if res := bash(t, d, session, "command -v "+tc.program); res.IsError {
				t.Skipf("no %s in the sandbox", tc.program)
			}
			if res := bash(t, d, session, tc.command); res.IsError || res.Output != tc.want {
				t.Errorf("%s: %+v, want output %q", tc.command, res, tc.want)
			}
		})
	}

	entries, err := os.ReadDir(d.Workspace(tenant, session))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 0 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("workspace on the host holds %q, want nothing", names)
	}
}

// The toolchains the host's /usr has are on PATH ahead of the system's
// programs, and work: go builds in /workspace, and its build cache stays
// in HOME.
func TestToolchainsOnPath(t *testing.T) {
	t.Parallel()
	const goBin = "/usr/local/go/bin"
	hostVersion, err := exec.Command(goBin+"/go", "version").Output()
	if err != nil {
		t.Skipf("no Go toolchain at %s on the host: %v", goBin, err)
	}
	d := newDriver(t, Config{})
	session := uuid.New()
	res := bash(t, d, session, `echo "$PATH"; command -v go; go version`)
	lines := strings.SplitN(res.Output, "\n", 2)
	if res.IsError || !strings.HasPrefix(lines[0], goBin+":") {
		t.Fatalf("PATH = %+v, want it to start with %s", res, goBin)
	}
	if want := goBin + "/go\n" + string(hostVersion); len(lines) < 2 || lines[1] != want {
		t.Errorf("go in the sandbox = %+v, want output %q after PATH", res, want)
	}

	res = bash(t, d, session, `printf 'module hello\n\ngo 1.21\n' > go.mod && printf 'package main\n\nfunc main() { println("hello") }\n' > main.go && go build -o hello . && ./hello && test -n "$(ls -A ~/.cache/go-build)" && echo cached`)
	if want := "hello\ncached\n"; res.IsError || res.Output != want {
		t.Fatalf("go build = %+v, want output %q", res, want)
	}
	entries, err := os.ReadDir(d.Workspace(tenant, session))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if want := []string{"go.mod", "hello", "main.go"}; !slices.Equal(names, want) {
		t.Errorf("workspace on the host holds %q after go build, want %q", names, want)
	}
}

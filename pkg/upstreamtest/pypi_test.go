package upstreamtest_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"corral.dev/pkg/upstreamtest"
)

// newPyPI starts an index with two projects, one of them in two versions,
// and returns it, the CA's file and an environment for pip.
func newPyPI(t *testing.T) (*upstreamtest.Upstream, string, []string) {
	t.Helper()
	ca := upstreamtest.NewCA(t)
	py := upstreamtest.PyPI(t, ca, "pypi.example.test",
		upstreamtest.Package{Name: "Hello.World", Version: "1.0", Content: "GREETING = 'hi'\n"},
		upstreamtest.Package{Name: "tiny", Version: "1.0", Content: "V = 1\n"},
		upstreamtest.Package{Name: "tiny", Version: "2.0", Content: "V = 2\n"},
	)
	env := clientEnv(t,
		"PIP_CONFIG_FILE=/dev/null",
		"PIP_DISABLE_PIP_VERSION_CHECK=1",
		"PIP_NO_CACHE_DIR=1",
		"PIP_ROOT_USER_ACTION=ignore",
		"PYTHONDONTWRITEBYTECODE=1",
	)
	return py, ca.WriteFile(t, t.TempDir()), env
}

func TestPyPIDownload(t *testing.T) {
	t.Parallel()
	pip := upstreamtest.Pip(t)
	py, caFile, env := newPyPI(t)
	for _, tc := range []struct {
		name string
		env  []string
		args []string
	}{
		{"cert flag", env, []string{"--cert", caFile}},
		{"PIP_CERT", append(slices.Clip(env), "PIP_CERT="+caFile), nil},
		{"REQUESTS_CA_BUNDLE", append(slices.Clip(env), "REQUESTS_CA_BUNDLE="+caFile), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dest := t.TempDir()
			args := append(slices.Clip(pip), "download", "--index-url", py.DirectURL+"/simple",
				"--no-deps", "--dest", dest, "hello-world", "tiny")
			mustRun(t, "", tc.env, append(args, tc.args...)...)
			entries, err := os.ReadDir(dest)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, e := range entries {
				got = append(got, e.Name())
			}
			want := []string{"hello_world-1.0-py3-none-any.whl", "tiny-2.0-py3-none-any.whl"}
			if !slices.Equal(got, want) {
				t.Errorf("downloaded %q, want %q", got, want)
			}
		})
	}
	if !slices.Contains(py.Requests(), "GET /simple/hello-world/") {
		t.Errorf("Requests() = %q, want the normalized project page among them", py.Requests())
	}
}

func TestPyPIInstall(t *testing.T) {
	t.Parallel()
	pip := upstreamtest.Pip(t)
	py, caFile, env := newPyPI(t)
	target := t.TempDir()
	mustRun(t, "", env, append(slices.Clip(pip), "install", "--cert", caFile,
		"--index-url", py.DirectURL+"/simple", "--no-deps", "--target", target, "Hello_World", "tiny==1.0")...)

	if got, want := readFile(t, filepath.Join(target, "hello_world.py")), "GREETING = 'hi'\n"; got != want {
		t.Errorf("installed hello_world.py = %q, want %q", got, want)
	}
	out := mustRun(t, "", append(env, "PYTHONPATH="+target),
		pip[0], "-c", "import hello_world, tiny; print(hello_world.GREETING, tiny.V)")
	if got, want := strings.TrimSpace(out), "hi 1"; got != want {
		t.Errorf("imported modules say %q, want %q", got, want)
	}
}

func TestPyPINotFound(t *testing.T) {
	t.Parallel()
	pip := upstreamtest.Pip(t)
	py, caFile, env := newPyPI(t)
	out, err := run(t, "", env, append(slices.Clip(pip), "download", "--cert", caFile,
		"--index-url", py.DirectURL+"/simple", "--no-deps", "--dest", t.TempDir(), "absent")...)
	if err == nil {
		t.Fatalf("pip downloaded a package the index does not have:\n%s", out)
	}
	if !strings.Contains(out, "No matching distribution found for absent") {
		t.Errorf("pip failed, but not for the missing package:\n%s", out)
	}
}

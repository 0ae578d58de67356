package upstreamtest_test

import (
	"net"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"corral.dev/pkg/upstreamtest"
)

const gitToken = "s3cret-token"

// newGit starts a git host with one repository, team/project, and returns
// it, the repository's path and an environment for the git client.
func newGit(t *testing.T) (*upstreamtest.GitServer, string, []string) {
	t.Helper()
	ca := upstreamtest.NewCA(t)
	gs := upstreamtest.Git(t, ca, "git.example.test", gitToken)
	path := gs.NewRepo(t, "team/project", map[string]string{
		"README.md":   "hello\n",
		"src/main.go": "package main\n",
	})
	env := clientEnv(t,
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_TERMINAL_PROMPT=0",
		"GIT_SSL_CAINFO="+ca.WriteFile(t, t.TempDir()),
		"GIT_AUTHOR_NAME=agent", "GIT_AUTHOR_EMAIL=agent@example.test",
		"GIT_COMMITTER_NAME=agent", "GIT_COMMITTER_EMAIL=agent@example.test",
	)
	return gs, path, env
}

func TestGitCloneBearer(t *testing.T) {
	t.Parallel()
	gs, path, env := newGit(t)
	dir := filepath.Join(t.TempDir(), "project")
	mustRun(t, "", env, "git", "-c", "http.extraHeader=Authorization: Bearer "+gitToken,
		"clone", "--quiet", gs.DirectURL+path, dir)

	if got, want := readFile(t, filepath.Join(dir, "src", "main.go")), "package main\n"; got != want {
		t.Errorf("cloned src/main.go = %q, want %q", got, want)
	}
	if got := strings.TrimSpace(mustRun(t, dir, env, "git", "rev-parse", "--abbrev-ref", "HEAD")); got != "main" {
		t.Errorf("cloned branch = %q, want main", got)
	}
	if !slices.Contains(gs.Authorizations(), "Bearer "+gitToken) {
		t.Errorf("Authorizations() = %q, want the bearer token among them", gs.Authorizations())
	}
	if !slices.Contains(gs.Requests(), "GET /team/project.git/info/refs?service=git-upload-pack") {
		t.Errorf("Requests() = %q, want the upload-pack advertisement among them", gs.Requests())
	}
}

// TestGitPushResolved clones and pushes with the token as the password in
// the URL, which names the host's DNS name, resolved by git to 127.0.0.1.
func TestGitPushResolved(t *testing.T) {
	t.Parallel()
	gs, path, env := newGit(t)
	_, port, err := net.SplitHostPort(gs.Addr)
	if err != nil {
		t.Fatal(err)
	}
	resolve := "http.curloptResolve=" + gs.Host + ":" + port + ":127.0.0.1"
	url := "https://x-access-token:" + gitToken + "@" + gs.Host + ":" + port + path
	dir := filepath.Join(t.TempDir(), "project")
	mustRun(t, "", env, "git", "-c", resolve, "clone", "--quiet", url, dir)

	before := gs.Refs(t, "team/project")
	if got, want := before["refs/heads/main"], strings.TrimSpace(mustRun(t, dir, env, "git", "rev-parse", "HEAD")); got != want {
		t.Fatalf("server main = %q, cloned HEAD = %q", got, want)
	}
	mustRun(t, dir, env, "git", "commit", "--quiet", "--allow-empty", "-m", "agent was here")
	mustRun(t, dir, env, "git", "-c", resolve, "push", "--quiet", "origin", "main", "main:refs/heads/feature")

	head := strings.TrimSpace(mustRun(t, dir, env, "git", "rev-parse", "HEAD"))
	after := gs.Refs(t, "team/project")
	if after["refs/heads/main"] != head || after["refs/heads/feature"] != head {
		t.Errorf("refs after push = %v, want main and feature at %s", after, head)
	}
	if head == before["refs/heads/main"] {
		t.Errorf("HEAD did not move: %s", head)
	}
	if !slices.Contains(gs.Requests(), "POST /team/project.git/git-receive-pack") {
		t.Errorf("Requests() = %q, want a receive-pack among them", gs.Requests())
	}
}

func TestGitRefusesWithoutToken(t *testing.T) {
	t.Parallel()
	gs, path, env := newGit(t)
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"no token", []string{"git", "clone", gs.DirectURL + path}},
		{"wrong bearer", []string{"git", "-c", "http.extraHeader=Authorization: Bearer nope", "clone", gs.DirectURL + path}},
		{"wrong password", []string{"git", "clone", strings.Replace(gs.DirectURL, "https://", "https://u:nope@", 1) + path}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := run(t, "", env, append(tc.args, filepath.Join(t.TempDir(), "project"))...)
			if err == nil {
				t.Fatalf("clone succeeded without the token:\n%s", out)
			}
			// git asks for a user name after a 401, and gives up after a
			// second 401 to the credentials it was given.
			if !strings.Contains(out, "could not read Username") && !strings.Contains(out, "Authentication failed") {
				t.Errorf("clone failed, but not for authentication:\n%s", out)
			}
		})
	}
	if got := gs.Refs(t, "team/project"); len(got) != 1 {
		t.Errorf("refs = %v, want main alone", got)
	}
}

package upstreamtest

import (
	"crypto/subtle"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// GitServer is a git host speaking smart HTTP over HTTPS, with fetch and
// push, served by git's own http-backend from bare repositories in a
// temporary directory. Create it with [Git]. Its [Upstream] records every
// request, so [Upstream.Authorizations] shows whether the token arrived.
type GitServer struct {
	*Upstream
	git   string // the git program
	root  string // GIT_PROJECT_ROOT: the bare repositories
	home  string // HOME for every git the server runs
	token string
}

// Git starts a git host for host, with a certificate from ca, that stops
// when the test ends. Every request must carry token, as the password of
// HTTP basic authentication (with any user name, as git sends a token) or
// as "Authorization: Bearer <token>"; any other is answered 401 with
// `WWW-Authenticate: Basic realm="git"`. An empty token lets every request
// in. Git needs the git program and its git-http-backend: it skips the
// test without them, or fails it when CI=true.
func Git(t testing.TB, ca *CA, host, token string) *GitServer {
	t.Helper()
	g := &GitServer{git: LookPath(t, "git"), root: t.TempDir(), home: t.TempDir(), token: token}
	execPath, err := exec.Command(g.git, "--exec-path").Output()
	if err != nil {
		missing(t, "git --exec-path", err)
	}
	backend := filepath.Join(strings.TrimSpace(string(execPath)), "git-http-backend")
	if _, err := os.Stat(backend); err != nil {
		missing(t, "git-http-backend", err)
	}
	cgiHandler := &cgi.Handler{
		Path: backend,
		Dir:  g.root,
		Env: append(g.env(),
			"GIT_PROJECT_ROOT="+g.root,
			"GIT_HTTP_EXPORT_ALL=1",
		),
	}
	g.Upstream = Start(t, ca, host, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !g.authorized(r) {
			w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
			http.Error(w, "authentication required", http.StatusUnauthorized)
			return
		}
		cgiHandler.ServeHTTP(w, r)
	}))
	return g
}

// NewRepo creates the bare repository name.git, with push enabled and one
// commit on its branch main (also its HEAD) holding files, which map
// slash-separated paths to contents. It returns the repository's path on
// the server, "/name.git", to append to [Upstream.URL] or
// [Upstream.DirectURL]. The commit's author and dates are fixed, so the
// same files always make the same commit. It fails the test if it cannot.
func (g *GitServer) NewRepo(t testing.TB, name string, files map[string]string) string {
	t.Helper()
	bare := filepath.Join(g.root, filepath.FromSlash(name)+".git")
	work, index := t.TempDir(), filepath.Join(t.TempDir(), "index")
	for path, content := range files {
		if !filepath.IsLocal(filepath.FromSlash(path)) {
			t.Fatalf("new repo %s: file path %q is not local", name, path)
		}
		file := filepath.Join(work, filepath.FromSlash(path))
		if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
			t.Fatalf("new repo %s: %v", name, err)
		}
		if err := os.WriteFile(file, []byte(content), 0o644); err != nil {
			t.Fatalf("new repo %s: %v", name, err)
		}
	}
	g.run(t, nil, "init", "--quiet", "--bare", "--initial-branch=main", bare)
	g.run(t, nil, "--git-dir", bare, "config", "http.receivepack", "true")
	tree := []string{"GIT_DIR=" + bare, "GIT_WORK_TREE=" + work, "GIT_INDEX_FILE=" + index}
	g.run(t, tree, "add", "--all")
	g.run(t, tree, "commit", "--quiet", "--allow-empty", "--message", "initial")
	return "/" + name + ".git"
}

// Refs returns the refs of the repository name.git, each mapped to the
// object it names, as git for-each-ref reads them on the server: what a
// push changed. It fails the test if it cannot read them.
func (g *GitServer) Refs(t testing.TB, name string) map[string]string {
	t.Helper()
	bare := filepath.Join(g.root, filepath.FromSlash(name)+".git")
	out := g.run(t, nil, "--git-dir", bare, "for-each-ref", "--format=%(refname) %(objectname)")
	refs := make(map[string]string)
	for line := range strings.Lines(out) {
		ref, sha, ok := strings.Cut(strings.TrimSpace(line), " ")
		if ok {
			refs[ref] = sha
		}
	}
	return refs
}

func (g *GitServer) authorized(r *http.Request) bool {
	if g.token == "" {
		return true
	}
	got, ok := "", false
	if _, pass, basic := r.BasicAuth(); basic {
		got, ok = pass, true
	} else if bearer, found := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); found {
		got, ok = bearer, true
	}
	return ok && subtle.ConstantTimeCompare([]byte(got), []byte(g.token)) == 1
}

// env is the environment of every git the server runs: no user or system
// configuration, and a fixed identity and date for commits.
func (g *GitServer) env() []string {
	return []string{
		"HOME=" + g.home,
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_AUTHOR_NAME=upstreamtest", "GIT_AUTHOR_EMAIL=upstreamtest@example.test",
		"GIT_COMMITTER_NAME=upstreamtest", "GIT_COMMITTER_EMAIL=upstreamtest@example.test",
		"GIT_AUTHOR_DATE=2025-01-01T00:00:00Z", "GIT_COMMITTER_DATE=2025-01-01T00:00:00Z",
	}
}

// run runs git with args and extra environment, returning its output and
// failing the test if it fails.
func (g *GitServer) run(t testing.TB, extra []string, args ...string) string {
	t.Helper()
	cmd := exec.Command(g.git, args...)
	cmd.Env = append(append(cleanEnv(), g.env()...), extra...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// cleanEnv returns the process's environment without the GIT_ variables a
// caller (a git hook running the tests, say) may have set.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GIT_") {
			env = append(env, kv)
		}
	}
	return env
}

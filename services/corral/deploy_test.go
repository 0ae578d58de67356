package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/dotenv"
	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/linter"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"
	"github.com/nats-io/nats-server/v2/server"
	"golang.org/x/mod/modfile"

	"corral.dev/pkg/credential"
	"corral.dev/pkg/event"
	"corral.dev/pkg/seal"
	"corral.dev/services/approval"
	"corral.dev/services/auth"
	"corral.dev/services/egress"
	"corral.dev/services/gateway"
	"corral.dev/services/harness"
	"corral.dev/services/memory"
	sandboxmanager "corral.dev/services/sandbox-manager"
	slackbridge "corral.dev/services/slack-bridge"
)

// repoRoot is the repository's root, seen from this package.
const repoRoot = "../.."

// loadConfigs are the configuration loaders of the service binaries, by
// binary name.
var loadConfigs = map[string]func(getenv func(string) string) error{
	"harness":         func(g func(string) string) error { _, err := harness.LoadConfig(g); return err },
	"sandbox-manager": func(g func(string) string) error { _, err := sandboxmanager.LoadConfig(g); return err },
	"egress":          func(g func(string) string) error { _, err := egress.LoadConfig(g); return err },
	"gateway":         func(g func(string) string) error { _, err := gateway.LoadConfig(g); return err },
	"memory":          func(g func(string) string) error { _, err := memory.LoadConfig(g); return err },
	"approval":        func(g func(string) string) error { _, err := approval.LoadConfig(g); return err },
	"auth":            func(g func(string) string) error { _, err := auth.LoadConfig(g); return err },
	"slack-bridge":    func(g func(string) string) error { _, err := slackbridge.LoadConfig(g); return err },
}

// deployEnv is deploy/.env.example with its secrets filled in, as an
// operator would: the example leaves them empty.
func deployEnv(t *testing.T) map[string]string {
	t.Helper()
	env, err := dotenv.Read(filepath.Join(repoRoot, "deploy/.env.example"))
	if err != nil {
		t.Fatal(err)
	}
	pub, key, _ := ed25519.GenerateKey(nil)
	callPub, callKey, _ := ed25519.GenerateKey(nil)
	seed, issuer, err := credential.NewIssuer()
	if err != nil {
		t.Fatal(err)
	}
	vaultKey := make([]byte, 32)
	rand.Read(vaultKey)
	fill := map[string]string{
		"CORRAL_AUTH_ISSUER":          issuer,
		"CORRAL_AUTH_ISSUER_SEED":     seed,
		"POSTGRES_PASSWORD":           rand.Text(),
		"OPENAI_API_KEY":              "sk-" + rand.Text(),
		"CORRAL_APPROVAL_SIGNING_KEY": event.EncodeKey(key),
		"CORRAL_APPROVAL_PUBLIC_KEY":  event.EncodeKey(pub),
		"CORRAL_CALL_SIGNING_KEY":     event.EncodeKey(callKey),
		"CORRAL_CALL_PUBLIC_KEY":      event.EncodeKey(callPub),
		"CORRAL_EGRESS_VAULT_KEY":     base64.StdEncoding.EncodeToString(vaultKey),
		"CORRAL_GATEWAY_WEBHOOK_KEY":  seal.NewKey(),
		"CORRAL_REVIEWER_TOKENS":      "grace=" + rand.Text(),
		"CORRAL_SLACK_SIGNING_SECRET": rand.Text(),
		"CORRAL_SLACK_BOT_TOKEN":      "xoxb-" + rand.Text(),
		"CORRAL_SLACK_CREDENTIALS":    "default=c-" + strings.Repeat("0", 32) + ":" + rand.Text(),
	}
	for name := range env {
		if strings.HasPrefix(name, "CORRAL_NATS_PASSWORD_") {
			fill[name] = rand.Text()
		}
	}
	for name, v := range fill {
		if _, ok := env[name]; !ok {
			t.Errorf("deploy/.env.example lacks %s", name)
		}
		env[name] = v
	}
	return env
}

// loadCompose loads the compose files with every profile on.
func loadCompose(t *testing.T, env map[string]string, files ...string) *types.Project {
	t.Helper()
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	details := types.ConfigDetails{WorkingDir: root, Environment: env}
	for _, f := range files {
		details.ConfigFiles = append(details.ConfigFiles, types.ConfigFile{Filename: filepath.Join(root, f)})
	}
	p, err := loader.LoadWithContext(context.Background(), details, func(o *loader.Options) {
		o.SetProjectName("corral", true)
		o.Profiles = []string{"*"}
		o.ResolvePaths = true
	})
	if err != nil {
		t.Fatalf("load %v: %v", files, err)
	}
	return p
}

// TestDeployFiles checks that docker-compose.yml and the Dockerfile it
// builds parse and refer only to what exists: build contexts, Dockerfiles
// and their targets, every COPY source (inside the build context after
// its ignore file), the Go packages built, every file mounted, every
// service depended on; that each service's binary is in its image; that
// the variables compose interpolates are the ones deploy/.env.example
// lists; that each service's configuration loads from the environment
// compose gives it; and that each service signs in to NATS as a user of
// the mounted server configuration, with that user's password.
func TestDeployFiles(t *testing.T) {
	env := deployEnv(t)
	checkEnvExample(t, env)
	p := loadCompose(t, env, "docker-compose.yml")
	all := map[string]types.ServiceConfig{}
	for name, s := range p.Services {
		all[name] = s
	}
	for name, s := range p.DisabledServices {
		all[name] = s
	}
	for _, want := range []string{"nats", "setup", "postgres", "harness", "sandbox-manager", "egress", "memory", "approval", "auth", "gateway", "slack-bridge"} {
		if _, ok := all[want]; !ok {
			t.Errorf("docker-compose.yml has no %s service", want)
		}
	}

	images := map[string]image{}
	builds := map[string]*types.BuildConfig{}
	for name, s := range all {
		for dep, d := range s.DependsOn {
			target, ok := all[dep]
			switch {
			case !ok:
				t.Errorf("%s depends on %s, which is no service", name, dep)
			case d.Condition == types.ServiceConditionHealthy && target.HealthCheck == nil:
				t.Errorf("%s waits for %s to be healthy, which has no health check", name, dep)
			case d.Condition == types.ServiceConditionCompletedSuccessfully && target.Restart != "no":
				t.Errorf("%s waits for %s to complete, which restarts (%q)", name, dep, target.Restart)
			}
		}
		for _, v := range s.Volumes {
			if v.Type != types.VolumeTypeBind {
				continue
			}
			if _, err := os.Stat(v.Source); err != nil {
				t.Errorf("%s mounts %s: %v", name, v.Source, err)
			}
		}
		if s.Build == nil {
			continue
		}
		if prev, ok := builds[s.Image]; ok {
			if prev.Context != s.Build.Context || prev.Dockerfile != s.Build.Dockerfile || prev.Target != s.Build.Target {
				t.Errorf("%s builds image %s differently from another service", name, s.Image)
			}
			continue
		}
		builds[s.Image] = s.Build
		images[s.Image] = checkBuild(t, name, s.Build)
	}

	serverUsers := natsServerUsers(t, all["nats"])
	for name, s := range all {
		img, ours := images[s.Image]
		if !ours {
			continue
		}
		senv := containerEnv(s)
		cmd, entrypoint := img.cmd, img.entrypoint
		if len(s.Command) > 0 {
			cmd = s.Command
		}
		if len(s.Entrypoint) > 0 {
			entrypoint = s.Entrypoint
		}
		// An entry point here is a wrapper that runs the command.
		progs := slices.Clone(entrypoint)
		if len(cmd) > 0 {
			progs = append(progs, cmd[0])
		}
		bin := ""
		for _, prog := range progs {
			if !img.bins[prog] {
				t.Errorf("%s runs %q, which its image %s does not have (it has %v)", name, prog, s.Image, img.bins)
			}
			bin = prog
		}
		if load, ok := loadConfigs[bin]; ok {
			if err := load(func(k string) string { return senv[k] }); err != nil {
				t.Errorf("%s: its configuration does not load from its environment: %v", name, err)
			}
		}
		if bin == "nats-server" {
			continue
		}
		if bin == "slack-bridge" {
			// A client: it signs in with its tenants' credentials,
			// which LoadConfig checks above, not as a user of the
			// server's configuration.
			if user := senv["CORRAL_NATS_USER"]; user != "" {
				t.Errorf("%s signs in to NATS as %q: it signs in with CORRAL_SLACK_CREDENTIALS alone", name, user)
			}
			if senv["CORRAL_SLACK_CREDENTIALS"] == "" {
				t.Errorf("%s is given no CORRAL_SLACK_CREDENTIALS", name)
			}
		}
		u, err := url.Parse(senv["CORRAL_NATS_URL"])
		if err != nil || u.Scheme != "nats" {
			t.Errorf("%s: CORRAL_NATS_URL=%q: want nats://nats:4222", name, senv["CORRAL_NATS_URL"])
		} else if _, ok := all[u.Hostname()]; !ok {
			t.Errorf("%s: CORRAL_NATS_URL names %s, which is no service", name, u.Hostname())
		}
		user := senv["CORRAL_NATS_USER"]
		pw, ok := serverUsers[user]
		switch {
		case bin == "slack-bridge":
		case !ok:
			t.Errorf("%s signs in to NATS as %q, which deploy/nats.conf does not know", name, user)
		case pw != senv["CORRAL_NATS_PASSWORD"]:
			t.Errorf("%s signs in as %s with a password that is not %s's in the NATS server's environment", name, user, user)
		}
	}

	checkEgress(t, all)

	// The override for pids cgroups applies on top of it.
	o := loadCompose(t, env, "docker-compose.yml", "deploy/compose.cgroups.yml")
	if sm := o.Services["sandbox-manager"]; !sm.Privileged || sm.User != "root" {
		t.Errorf("with deploy/compose.cgroups.yml the sandbox-manager is privileged=%v user=%q, want a privileged root", sm.Privileged, sm.User)
	}
}

// checkEgress checks that the sandbox-manager can open its sandboxes' way
// out: its CORRAL_EGRESS_SOCKET is the control socket in the egress
// service's directory, which the two mount from the same volume at the
// same path (the sandbox-manager binds the directories egress names, by
// their paths, into the sandboxes), the sandbox-manager read-only; the
// socket's mode lets the sandbox-manager open it when the two run as
// different users; the sandbox-manager waits for egress to be healthy;
// and egress publishes no port: nothing reaches it but through its
// sockets.
func checkEgress(t *testing.T, all map[string]types.ServiceConfig) {
	t.Helper()
	sm, eg := all["sandbox-manager"], all["egress"]
	egEnv := containerEnv(eg)
	cfg, err := egress.LoadConfig(func(k string) string { return egEnv[k] })
	if err != nil {
		return // TestDeployFiles said why
	}
	// The control socket's name in the directory (services/egress).
	if got, want := containerEnv(sm)["CORRAL_EGRESS_SOCKET"], path.Join(cfg.Dir, "control.sock"); got != want {
		t.Errorf("the sandbox-manager's CORRAL_EGRESS_SOCKET is %q, want %s", got, want)
	}
	mounted := func(s types.ServiceConfig) (types.ServiceVolumeConfig, bool) {
		for _, v := range s.Volumes {
			if v.Type == types.VolumeTypeVolume && (v.Target == cfg.Dir || strings.HasPrefix(cfg.Dir, v.Target+"/")) {
				return v, true
			}
		}
		return types.ServiceVolumeConfig{}, false
	}
	ev, ok := mounted(eg)
	sv, sok := mounted(sm)
	switch {
	case !ok:
		t.Errorf("egress keeps CORRAL_EGRESS_DIR=%s in no named volume", cfg.Dir)
	case !sok:
		t.Errorf("the sandbox-manager does not mount egress's directory %s", cfg.Dir)
	case sv.Source != ev.Source || sv.Target != ev.Target:
		t.Errorf("the sandbox-manager mounts %s at %s, egress %s at %s: want the same volume at the same path", sv.Source, sv.Target, ev.Source, ev.Target)
	case !sv.ReadOnly:
		// It only connects to sockets there and binds directories from
		// it; run as root (deploy/compose.cgroups.yml) it could otherwise
		// change what egress keeps there.
		t.Errorf("the sandbox-manager mounts egress's directory writable")
	}
	if sm.User != eg.User && cfg.ControlMode&0o060 != 0o060 {
		t.Errorf("egress runs as %q and the sandbox-manager as %q, with the control socket %#o: only egress may open it", eg.User, sm.User, cfg.ControlMode)
	}
	if d, ok := sm.DependsOn["egress"]; !ok || d.Condition != types.ServiceConditionHealthy {
		t.Errorf("the sandbox-manager does not wait for egress to be healthy (%+v)", d)
	}
	if len(eg.Ports) > 0 {
		t.Errorf("egress publishes ports %v", eg.Ports)
	}
}

// checkEnvExample checks that the variables docker-compose.yml
// interpolates are exactly those deploy/.env.example lists.
func checkEnvExample(t *testing.T, env map[string]string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	used := map[string]bool{}
	for _, m := range regexp.MustCompile(`\$\{([A-Z0-9_]+)`).FindAllStringSubmatch(string(b), -1) {
		used[m[1]] = true
	}
	for name := range used {
		if _, ok := env[name]; !ok {
			t.Errorf("docker-compose.yml uses ${%s}, which deploy/.env.example does not list", name)
		}
	}
	for name := range env {
		if !used[name] {
			t.Errorf("deploy/.env.example lists %s, which docker-compose.yml does not use", name)
		}
	}
}

// containerEnv is a service's environment, with the container paths of
// files it mounts replaced by the files' paths here.
func containerEnv(s types.ServiceConfig) map[string]string {
	env := map[string]string{}
	for k, v := range s.Environment {
		if v != nil {
			env[k] = hostPath(s, *v)
		}
	}
	return env
}

// hostPath returns the file here that s mounts at p, or p.
func hostPath(s types.ServiceConfig, p string) string {
	for _, vol := range s.Volumes {
		if vol.Type == types.VolumeTypeBind && p == vol.Target {
			return vol.Source
		}
	}
	return p
}

// natsServerUsers reads the NATS server configuration the nats service
// mounts, in the environment compose gives it, and returns its users'
// passwords.
func natsServerUsers(t *testing.T, s types.ServiceConfig) map[string]string {
	t.Helper()
	i := slices.Index(s.Command, "--config")
	if i < 0 || i+1 >= len(s.Command) {
		t.Fatalf("the nats service's command %v has no --config", s.Command)
	}
	file := hostPath(s, s.Command[i+1])
	if file == s.Command[i+1] {
		t.Fatalf("the nats service's config %s is not a mounted file", file)
	}
	for k, v := range s.Environment {
		if v != nil {
			t.Setenv(k, *v)
		}
	}
	opts, err := server.ProcessConfigFile(file)
	if err != nil {
		t.Fatalf("the nats service's config: %v", err)
	}
	users := map[string]string{}
	for _, u := range opts.Users {
		users[u.Username] = u.Password
	}
	return users
}

// image is what a service's image runs: its programs in /usr/local/bin,
// and its default entry point and command.
type image struct {
	bins            map[string]bool
	entrypoint, cmd []string
}

// checkBuild checks one service's build and returns its image.
func checkBuild(t *testing.T, service string, b *types.BuildConfig) image {
	t.Helper()
	dockerfile := b.Dockerfile
	if !filepath.IsAbs(dockerfile) {
		dockerfile = filepath.Join(b.Context, dockerfile)
	}
	f, err := os.Open(dockerfile)
	if err != nil {
		t.Fatalf("%s: Dockerfile: %v", service, err)
	}
	defer f.Close()
	ast, err := parser.Parse(f)
	if err != nil {
		t.Fatalf("%s: parse %s: %v", service, dockerfile, err)
	}
	stages, _, err := instructions.Parse(ast.AST, linter.New(&linter.Config{}))
	if err != nil {
		t.Fatalf("%s: parse %s: %v", service, dockerfile, err)
	}
	byName := map[string]*instructions.Stage{}
	for i := range stages {
		byName[stages[i].Name] = &stages[i]
	}
	if _, ok := byName[b.Target]; !ok {
		t.Fatalf("%s: target %q is no stage of %s", service, b.Target, dockerfile)
	}
	ignored := ignoreMatcher(t, b.Context, dockerfile)
	built := map[string]bool{} // what go build writes, as /out/<name>
	for _, st := range stages {
		for _, c := range st.Commands {
			switch c := c.(type) {
			case *instructions.CopyCommand:
				if c.From != "" {
					if _, ok := byName[c.From]; !ok {
						t.Errorf("%s: COPY --from=%s: no such stage", dockerfile, c.From)
					}
					continue
				}
				for _, src := range c.SourcePaths {
					checkCopySource(t, dockerfile, b.Context, src, ignored)
				}
			case *instructions.RunCommand:
				for name := range goBuilt(t, dockerfile, b.Context, strings.Join(c.CmdLine, " ")) {
					built[name] = true
				}
			}
		}
	}
	// Follow the target back to its first stage, collecting the programs
	// copied into /usr/local/bin, and the last entry point and command.
	img := image{bins: map[string]bool{}}
	for st := byName[b.Target]; st != nil; st = byName[st.BaseName] {
		for _, c := range slices.Backward(st.Commands) {
			switch c := c.(type) {
			case *instructions.CmdCommand:
				if img.cmd == nil {
					img.cmd = c.CmdLine
				}
			case *instructions.EntrypointCommand:
				if img.entrypoint == nil {
					img.entrypoint = c.CmdLine
				}
			}
		}
		for _, c := range st.Commands {
			cp, ok := c.(*instructions.CopyCommand)
			if !ok || !strings.HasPrefix(cp.DestPath, "/usr/local/bin/") {
				continue
			}
			for _, src := range cp.SourcePaths {
				name := path.Base(src)
				if !strings.HasSuffix(cp.DestPath, "/") {
					name = path.Base(cp.DestPath)
				}
				if cp.From != "" && !built[path.Base(src)] {
					t.Errorf("%s: COPY --from=%s %s: the build makes no such program", dockerfile, cp.From, src)
				}
				img.bins[name] = true
			}
		}
	}
	return img
}

// goBuilt checks the Go packages a RUN line builds exist, and returns the
// names of the programs it writes to /out.
func goBuilt(t *testing.T, dockerfile, context, run string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	if !strings.Contains(run, "go build") {
		return out
	}
	fields := strings.Fields(run)
	for i, f := range fields {
		switch {
		case strings.HasPrefix(f, "./services/") || strings.HasPrefix(f, "./pkg/"):
			if fi, err := os.Stat(filepath.Join(context, f)); err != nil || !fi.IsDir() {
				t.Errorf("%s: go build %s: no such package", dockerfile, f)
			}
			out[path.Base(f)] = true
		case f == "-o" && i+1 < len(fields) && fields[i+1] != "/out/":
			out[path.Base(fields[i+1])] = true
		}
	}
	return out
}

// ignoreMatcher reads the build's ignore file: the Dockerfile's own
// (<Dockerfile>.dockerignore) or the context's .dockerignore.
func ignoreMatcher(t *testing.T, context, dockerfile string) *patternmatcher.PatternMatcher {
	t.Helper()
	var patterns []string
	for _, f := range []string{dockerfile + ".dockerignore", filepath.Join(context, ".dockerignore")} {
		r, err := os.Open(f)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		patterns, err = ignorefile.ReadAll(r)
		r.Close()
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		break
	}
	pm, err := patternmatcher.New(patterns)
	if err != nil {
		t.Fatal(err)
	}
	return pm
}

// checkCopySource checks that src exists in the build context and that the
// ignore file leaves it in, with every file under it but tests.
func checkCopySource(t *testing.T, dockerfile, context, src string, ignored *patternmatcher.PatternMatcher) {
	t.Helper()
	excluded := func(rel string) bool {
		m, err := ignored.MatchesOrParentMatches(rel)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	root := filepath.Join(context, src)
	if _, err := os.Stat(root); err != nil {
		t.Errorf("%s: COPY %s: %v", dockerfile, src, err)
		return
	}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(context, p)
		rel = filepath.ToSlash(rel)
		test := strings.HasSuffix(rel, "_test.go") || strings.Contains("/"+rel, "/testdata/")
		if excluded(rel) && !test {
			t.Errorf("%s: COPY %s: %s is left out of the build context by the ignore file", dockerfile, src, rel)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
	// Every module of the workspace is built from what is copied.
	if src == "go.work" {
		b, err := os.ReadFile(root)
		if err != nil {
			t.Fatal(err)
		}
		wf, err := modfile.ParseWork(root, b, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range wf.Use {
			if excluded(path.Join(path.Clean(u.Path), "go.mod")) {
				t.Errorf("%s: the workspace module %s is left out of the build context", dockerfile, u.Path)
			}
		}
	}
}

// TestClusterConfigs checks deploy/cluster: three servers with distinct
// names, each routing to all three, with JetStream and the users of
// deploy/nats.conf.
func TestClusterConfigs(t *testing.T) {
	setDeployedServerEnv(t)
	single, err := server.ProcessConfigFile(deployedConfig)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for i := 1; i <= 3; i++ {
		file := filepath.Join(repoRoot, "deploy/cluster", "nats-"+string(rune('0'+i))+".conf")
		opts, err := server.ProcessConfigFile(file)
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		names[opts.ServerName] = true
		if !opts.JetStream || opts.Cluster.Name == "" || opts.Cluster.Port == 0 {
			t.Errorf("%s: jetstream=%v cluster=%q port %d", file, opts.JetStream, opts.Cluster.Name, opts.Cluster.Port)
		}
		var routes []string
		for _, r := range opts.Routes {
			routes = append(routes, r.Hostname())
		}
		slices.Sort(routes)
		if want := []string{"nats-1", "nats-2", "nats-3"}; !slices.Equal(routes, want) {
			t.Errorf("%s: routes to %v, want %v", file, routes, want)
		}
		if len(opts.Users) != len(single.Users) {
			t.Errorf("%s: %d users, deploy/nats.conf %d", file, len(opts.Users), len(single.Users))
		}
	}
	if len(names) != 3 {
		t.Errorf("server names %v, want three distinct", names)
	}
}

// TestDeployedUsersAreTheTestedOnes checks that deploy/nats.conf gives each
// service exactly the permissions of credential.Services, which corral dev
// runs with, and that every other user signs in through the auth callout.
func TestDeployedUsersAreTheTestedOnes(t *testing.T) {
	env, _ := setDeployedServerEnv(t)
	issuer := env["CORRAL_AUTH_ISSUER"]
	opts, err := server.ProcessConfigFile(deployedConfig)
	if err != nil {
		t.Fatal(err)
	}
	users := map[string]*server.User{}
	for _, u := range opts.Users {
		users[u.Username] = u
	}
	for _, s := range credential.Services() {
		got, ok := users[s.User]
		if !ok {
			t.Errorf("deploy/nats.conf has no user %s", s.User)
			continue
		}
		want := s.ServerUser("").Permissions
		if got.Permissions == nil {
			t.Errorf("%s: no permissions in deploy/nats.conf", s.User)
			continue
		}
		for _, c := range []struct {
			what      string
			got, want []string
		}{
			{"publish allow", got.Permissions.Publish.Allow, want.Publish.Allow},
			{"publish deny", got.Permissions.Publish.Deny, want.Publish.Deny},
			{"subscribe allow", got.Permissions.Subscribe.Allow, want.Subscribe.Allow},
		} {
			g, w := slices.Sorted(slices.Values(c.got)), slices.Sorted(slices.Values(c.want))
			if !slices.Equal(g, w) {
				t.Errorf("%s %s:\n deploy/nats.conf %q\n credential.Services %q", s.User, c.what, g, w)
			}
		}
		if (got.Permissions.Response != nil) != s.Responds {
			t.Errorf("%s: allow_responses %v, want %v", s.User, got.Permissions.Response != nil, s.Responds)
		}
	}
	if len(users) != len(credential.AuthUsers()) {
		t.Errorf("deploy/nats.conf has %d users, want %v", len(users), credential.AuthUsers())
	}
	if opts.AuthCallout == nil || opts.AuthCallout.Issuer != issuer {
		t.Fatalf("deploy/nats.conf: auth callout %+v, want issuer %s", opts.AuthCallout, issuer)
	}
	if !slices.Equal(slices.Sorted(slices.Values(opts.AuthCallout.AuthUsers)), slices.Sorted(slices.Values(credential.AuthUsers()))) {
		t.Errorf("deploy/nats.conf: auth_users %v, want %v", opts.AuthCallout.AuthUsers, credential.AuthUsers())
	}
}

package upstreamtest_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"corral.dev/pkg/upstreamtest"
)

func TestNPMInstall(t *testing.T) {
	t.Parallel()
	npm := upstreamtest.LookPath(t, "npm")
	node := upstreamtest.LookPath(t, "node")
	ca := upstreamtest.NewCA(t)
	reg := upstreamtest.NPM(t, ca, "npm.example.test",
		upstreamtest.Package{Name: "hello", Version: "1.0.0", Content: "module.exports = 'hello 1';\n"},
		upstreamtest.Package{Name: "hello", Version: "1.1.0", Content: "module.exports = 'hello 1.1';\n"},
		upstreamtest.Package{Name: "@corral/tiny", Version: "0.1.0", Content: "module.exports = 'tiny';\n"},
	)
	home := t.TempDir()
	env := clientEnv(t,
		"NODE_EXTRA_CA_CERTS="+ca.WriteFile(t, t.TempDir()),
		"npm_config_userconfig="+filepath.Join(home, "npmrc"),
		"npm_config_globalconfig="+filepath.Join(home, "global-npmrc"),
		"npm_config_cache="+filepath.Join(home, "cache"),
		"npm_config_update_notifier=false",
	)
	project := t.TempDir()
	if err := os.WriteFile(filepath.Join(project, "package.json"), []byte(`{"name":"project","version":"0.0.0","private":true}`), 0o644); err != nil {
		t.Fatal(err)
	}
	mustRun(t, project, env, npm, "install", "--registry", reg.DirectURL+"/",
		"--no-audit", "--no-fund", "--prefer-online", "hello", "@corral/tiny")

	if got, want := readFile(t, filepath.Join(project, "node_modules", "hello", "index.js")), "module.exports = 'hello 1.1';\n"; got != want {
		t.Errorf("installed hello/index.js = %q, want %q", got, want)
	}
	out := mustRun(t, project, env, node, "-e", "console.log(require('hello'), require('@corral/tiny'))")
	if got, want := strings.TrimSpace(out), "hello 1.1 tiny"; got != want {
		t.Errorf("required modules say %q, want %q", got, want)
	}
	for _, want := range []string{"GET /hello", "GET /hello/-/hello-1.1.0.tgz", "GET /@corral%2ftiny", "GET /@corral/tiny/-/tiny-0.1.0.tgz"} {
		if !slices.Contains(reg.Requests(), want) {
			t.Errorf("Requests() = %q, want %q among them", reg.Requests(), want)
		}
	}
}

package main

import (
	"bytes"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// composers are the CLI's files that may import a service's packages, and
// why each must: between them they are corral dev, the one process that
// runs the services themselves, and corral setup. Every other client
// reaches a service through its contract in pkg/ (pkg/memoryapi,
// pkg/approvalapi, pkg/credential, pkg/bus). The CLI's tests may import
// services too: they are the platform's end-to-end suite, which starts
// the services as corral dev does.
var composers = map[string]string{
	"dev.go":     "corral dev constructs and runs every service",
	"devauth.go": "corral dev's credentials and server configuration, kept in the sandbox-manager's data directory",
	"main.go":    "the binary is a sandbox's executor when corral dev's sandbox-manager starts one",
	"setup.go":   "corral setup creates the Slack bridge's bucket, which the bridge's credentials may not, and moves its old keys, and the gateway's buckets, which its user may not",
}

// cli is the module whose files [composers] names.
const cli = "corral.dev/services/corral"

// TestLayoutServicesImportNoService checks the layout README describes:
// no package of one service (its tests included) imports another
// service's packages, nor does pkg/ or schemas/ import any, so that each
// service builds, ships and changes alone and shares only pkg/; in the
// CLI only the [composers] do. It reads the imports of every module of
// go.work with go list, and the CLI's file by file.
func TestLayoutServicesImportNoService(t *testing.T) {
	t.Parallel()
	root := goOut(t, "env", "GOWORK")
	if root == "" || root == "off" {
		t.Fatal("not in the go.work workspace (GOWORK is off): run the test from the repository")
	}
	root = filepath.Dir(root)

	// The workspace's modules, and which are services: those under
	// services/.
	var patterns []string
	services := map[string]bool{}
	var cliDir string
	for line := range strings.Lines(goOut(t, "list", "-m", "-f", "{{.Path}}\t{{.Dir}}")) {
		path, dir, _ := strings.Cut(strings.TrimSpace(line), "\t")
		patterns = append(patterns, path+"/...")
		if path == cli {
			cliDir = dir
		}
		if rel, err := filepath.Rel(root, dir); err == nil && strings.HasPrefix(rel, "services"+string(filepath.Separator)) {
			services[path] = true
		}
	}
	if !services[cli] || len(services) < 2 {
		t.Fatalf("found services %v in %s, want the CLI (%s) and the others", services, root, cli)
	}

	type pkg struct {
		path, module, dir           string
		files, imports, testImports []string
	}
	var pkgs []pkg
	moduleOf := map[string]string{} // by import path
	out := goOut(t, append([]string{"list", "-f", "{{.ImportPath}}\t{{.Module.Path}}\t{{.Dir}}\t{{join .GoFiles \" \"}}\t{{join .Imports \" \"}}\t{{join .TestImports \" \"}} {{join .XTestImports \" \"}}"}, patterns...)...)
	for line := range strings.Lines(out) {
		f := strings.Split(strings.TrimRight(line, "\n"), "\t")
		if len(f) != 6 {
			t.Fatalf("go list printed %q, want 6 fields", line)
		}
		p := pkg{path: f[0], module: f[1], dir: f[2], files: strings.Fields(f[3]), imports: strings.Fields(f[4]), testImports: strings.Fields(f[5])}
		pkgs = append(pkgs, p)
		moduleOf[p.path] = p.module
	}
	// service returns the service that import path imp belongs to, or ""
	// for anything else.
	service := func(imp string) string {
		if m := moduleOf[imp]; services[m] {
			return m
		}
		return ""
	}

	used := map[string]bool{} // composers found importing a service
	for _, p := range pkgs {
		if p.module != cli {
			why := "a service shares only pkg/ with the others: put the contract it needs there (as pkg/memoryapi, pkg/approvalapi)"
			if !services[p.module] {
				why = "pkg/ and schemas/ are what the services share, and import none of them"
			}
			for _, imp := range p.imports {
				if s := service(imp); s != "" && s != p.module {
					t.Errorf("%s imports %s: %s", p.path, imp, why)
				}
			}
			for _, imp := range p.testImports {
				if s := service(imp); s != "" && s != p.module {
					t.Errorf("the tests of %s import %s: %s", p.path, imp, why)
				}
			}
			continue
		}
		// The CLI: only its composers, and its tests (which go list's
		// GoFiles leaves out), may import a service.
		for _, name := range p.files {
			file := filepath.Join(p.dir, name)
			rel, err := filepath.Rel(cliDir, file)
			if err != nil {
				t.Fatal(err)
			}
			rel = filepath.ToSlash(rel)
			for _, imp := range fileImports(t, file) {
				if service(imp) == "" || service(imp) == cli {
					continue
				}
				if _, ok := composers[rel]; ok {
					used[rel] = true
					continue
				}
				t.Errorf("services/corral/%s imports %s: a client command reaches a service through its contract in pkg/ (pkg/memoryapi, pkg/approvalapi); only corral dev's composition (composers in layout_test.go) runs services", rel, imp)
			}
		}
	}
	for name := range composers {
		if !used[name] {
			t.Errorf("composers names services/corral/%s, which imports no service: take it off the list", name)
		}
	}
}

// fileImports returns the import paths of the Go file file.
func fileImports(t *testing.T, file string) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.ImportsOnly)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, spec := range f.Imports {
		p, err := strconv.Unquote(spec.Path.Value)
		if err != nil {
			t.Fatalf("%s: import %s: %v", file, spec.Path.Value, err)
		}
		out = append(out, p)
	}
	return slices.Compact(slices.Sorted(slices.Values(out)))
}

// goOut runs the go command with args and returns what it printed, less
// its last newline.
func goOut(t *testing.T, args ...string) string {
	t.Helper()
	var stderr bytes.Buffer
	cmd := exec.Command("go", args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	return strings.TrimSuffix(string(out), "\n")
}

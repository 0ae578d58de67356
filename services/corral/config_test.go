package main

import (
	"os"
	"path/filepath"
	"testing"
)

// Loading a service's configuration writes nothing: what a service keeps
// on disk (a node's name, say) it makes when it starts.
func TestLoadingAConfigWritesNothing(t *testing.T) {
	env := deployEnv(t)
	root := t.TempDir()
	env["CORRAL_DATA_DIR"] = filepath.Join(root, "data")
	t.Setenv("XDG_STATE_HOME", filepath.Join(root, "state"))
	t.Setenv("HOME", filepath.Join(root, "home"))
	for name, load := range loadConfigs {
		if err := load(func(k string) string { return env[k] }); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if made, _ := os.ReadDir(root); len(made) != 0 {
			t.Fatalf("%s's configuration loaded, and %s holds %v: want nothing written", name, root, made)
		}
	}
}

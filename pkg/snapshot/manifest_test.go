package snapshot

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"path"
	"strings"
	"testing"
)

// FuzzDecodeManifest checks that a manifest DecodeManifest accepts only
// names places inside the workspace, each once and after its directory,
// and reads back the same once written again.
func FuzzDecodeManifest(f *testing.F) {
	hash := strings.Repeat("ab", 32)
	for _, m := range []Manifest{
		{Seq: 3, Files: []File{{Path: "src", Mode: fs.ModeDir | 0o755}, {Path: "src/a.go", Mode: 0o644, Hash: hash}, {Path: "link", Mode: fs.ModeSymlink | 0o777, Link: "src/a.go"}}},
		{Seq: 1, Files: []File{{Path: "../escape", Mode: 0o644, Hash: hash}}},
		{Seq: 1, Files: []File{{Path: "/etc/passwd", Mode: 0o644, Hash: hash}}},
		{Seq: 1, Files: []File{{Path: "a/b", Mode: 0o644, Hash: hash}}},
		{Seq: 1, Files: []File{{Path: "a", Mode: 0o644, Hash: "../../m.acme.x"}}},
		{Seq: 1, Files: []File{{Path: "p", Mode: fs.ModeNamedPipe | 0o644}}},
		{Seq: 1, Files: []File{{Path: "l", Mode: fs.ModeSymlink, Link: "/etc"}, {Path: "l/x", Mode: 0o644, Hash: hash}}},
	} {
		data, err := json.Marshal(&m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := DecodeManifest(data)
		if err != nil {
			return
		}
		dirs := map[string]bool{".": true}
		for _, e := range m.Files {
			if !fs.ValidPath(e.Path) || e.Path == "." || !dirs[path.Dir(e.Path)] {
				t.Fatalf("manifest %q: accepted %+v", data, e)
			}
			if e.Mode.IsDir() {
				dirs[e.Path] = true
			}
			if !e.Mode.IsDir() && e.Mode.Type() != fs.ModeSymlink && !e.Mode.IsRegular() {
				t.Fatalf("manifest %q: accepted mode %v", data, e.Mode)
			}
		}
		once, err := json.Marshal(&m)
		if err != nil {
			t.Fatal(err)
		}
		again, err := DecodeManifest(once)
		if err != nil {
			t.Fatalf("manifest %q written again as %s is refused: %v", data, once, err)
		}
		twice, _ := json.Marshal(&again)
		if !bytes.Equal(once, twice) {
			t.Fatalf("manifest %q: written as %s, then as %s", data, once, twice)
		}
	})
}

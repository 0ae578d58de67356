package memory

import (
	"path"
	"strings"
	"testing"

	"corral.dev/pkg/tool"
)

// FuzzKeyFor checks the key a path names: under /memories or /skills,
// clean, and a file under /memories/private its user's own, no one else's,
// stored under a key no other file's shares.
func FuzzKeyFor(f *testing.F) {
	for _, p := range []string{"/memories/notes.md", "/memories/private", "/memories/private/me.md", "/memories/privatex/a",
		"/skills/pdf/SKILL.md", "/memories/private/../notes.md", "/memories//a", "/skills/../memories/private/x"} {
		f.Add("alice", p)
		f.Add("", p)
	}
	f.Fuzz(func(t *testing.T, user, p string) {
		k, err := keyFor("acme", user, p)
		if err != nil {
			return
		}
		if !tool.IsMemoryPath(k.Path) || path.Clean(k.Path) != k.Path || k.Tenant != "acme" {
			t.Fatalf("keyFor(%q, %q) = %+v", user, p, k)
		}
		private := k.Path == tool.Private || strings.HasPrefix(k.Path, tool.Private+"/")
		switch {
		case private && (k.Owner != user || user == ""):
			t.Fatalf("keyFor(%q, %q) = %+v: a private file of another", user, p, k)
		case !private && k.Owner != "":
			t.Fatalf("keyFor(%q, %q) = %+v: a shared file with an owner", user, p, k)
		}
		if other, err := keyFor("acme", user+"x", p); err == nil && private && kvKey(other) == kvKey(k) {
			t.Fatalf("keyFor(%q, %q) and keyFor(%q, %q) are both %s", user, p, user+"x", p, kvKey(k))
		}
	})
}

// FuzzParseSkill checks that a SKILL.md parseSkill accepts names its own
// folder and says what the skill does.
func FuzzParseSkill(f *testing.F) {
	f.Add("pdf", "---\nname: pdf\ndescription: Fill in PDF forms\n---\n# PDF\n")
	f.Add("pdf", "---\nname: other\ndescription: x\n---\n")
	f.Add("pdf", "---\nname: pdf\n")
	f.Add("pdf", "---\nname: [pdf]\ndescription: {a: b}\n---\n")
	f.Add("pdf", "---\n&a [*a, *a]\n---\n")
	f.Add("pdf", "# no front matter\n")
	f.Fuzz(func(t *testing.T, folder, content string) {
		fm, err := parseSkill(folder, content)
		if err != nil {
			return
		}
		if fm.Name != folder || fm.Name == "" || fm.Description == "" ||
			fm.Name != strings.TrimSpace(fm.Name) || fm.Description != strings.TrimSpace(fm.Description) {
			t.Fatalf("parseSkill(%q, %q) = %+v", folder, content, fm)
		}
	})
}

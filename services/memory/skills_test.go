package memory_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/services/memory"
)

// skillSet returns what the skills store holds of tenant under name
// (bus.SkillsIndex or bus.SkillsFiles), or nil if nothing.
func (s *service) skillSet(t *testing.T, name string) *event.SkillSet {
	t.Helper()
	ctx := context.Background()
	obs, err := s.js.ObjectStore(ctx, bus.BucketSkills)
	if err != nil {
		t.Fatal(err)
	}
	data, err := obs.GetBytes(ctx, name)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var set event.SkillSet
	if err := json.Unmarshal(data, &set); err != nil {
		t.Fatal(err)
	}
	return &set
}

// files returns the files of a skill set, by path.
func files(set *event.SkillSet) map[string]string {
	out := map[string]string{}
	if set != nil {
		for _, f := range set.Files {
			out[f.Path] = f.Content
		}
	}
	return out
}

// Every change to a tenant's /skills, by a session's calls or through the
// API, publishes its skills to the skills store: the list (name,
// description, SKILL.md) for system prompts, and every file for
// sandboxes. Another tenant's skills are its own.
func TestSkillsArePublished(t *testing.T) {
	s := startService(t, "postgres", memory.Config{})
	ada := newSession("acme", "ada")
	const skill = "---\nname: deploy\ndescription: How we ship services to production\n---\nRun scripts/ship.sh.\n"
	s.ok(t, ada, "Write", writeArgs("/skills/deploy/SKILL.md", skill))
	s.apiOK(t, "acme", "ada", memory.OpPut, memory.APIRequest{Path: "/skills/deploy/scripts/ship.sh", Content: "echo shipping\n"})
	// A folder whose SKILL.md does not parse is not listed, though its
	// files are there (it was written before the check, or by hand).
	s.apiOK(t, "acme", "ada", memory.OpPut, memory.APIRequest{Path: "/skills/notes/README.md", Content: "not a skill\n"})

	index := s.skillSet(t, bus.SkillsIndex("acme"))
	if index == nil || len(index.Skills) != 1 || index.Tenant != "acme" || len(index.Files) != 0 {
		t.Fatalf("acme's skills index = %+v, want deploy alone, without files", index)
	}
	if sk := index.Skills[0]; sk.Name != "deploy" || sk.Description != "How we ship services to production" || sk.Path != "/skills/deploy/SKILL.md" {
		t.Errorf("skill = %+v", sk)
	}
	fs := files(s.skillSet(t, bus.SkillsFiles("acme")))
	if len(fs) != 3 || fs["/skills/deploy/SKILL.md"] != skill || fs["/skills/deploy/scripts/ship.sh"] != "echo shipping\n" {
		t.Errorf("acme's skill files = %v", fs)
	}
	if other := s.skillSet(t, bus.SkillsIndex("initech")); other != nil && len(other.Skills) != 0 {
		t.Errorf("initech's skills = %+v, want none", other.Skills)
	}

	// An Edit changes the list; a private file is no skill.
	s.ok(t, ada, "Edit", editArgs("/skills/deploy/SKILL.md", "How we ship", "How we roll out"))
	s.ok(t, ada, "Write", writeArgs("/memories/private/skills.md", "mine"))
	if index := s.skillSet(t, bus.SkillsIndex("acme")); len(index.Skills) != 1 || index.Skills[0].Description != "How we roll out services to production" {
		t.Errorf("skills after the Edit = %+v", index.Skills)
	}

	// Removing the folder removes the skill.
	if rm := s.apiOK(t, "acme", "ada", memory.OpRemove, memory.APIRequest{Path: "/skills/deploy", Recursive: true}); rm.Removed != 2 {
		t.Errorf("rm -r /skills/deploy removed %d files, want 2", rm.Removed)
	}
	if index := s.skillSet(t, bus.SkillsIndex("acme")); len(index.Skills) != 0 {
		t.Errorf("skills after rm = %+v, want none", index.Skills)
	}
	if fs := files(s.skillSet(t, bus.SkillsFiles("acme"))); len(fs) != 1 {
		t.Errorf("skill files after rm = %v, want the README alone", fs)
	}
}

package memory

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/tool"
)

// frontMatter is what a SKILL.md must declare.
type frontMatter struct {
	Name        string `yaml:"name"`
	Description string `yaml:"description"`
}

// parseSkill reads the YAML front matter of the SKILL.md of the skill
// folder named folder, and says in words the model (or a person pushing a
// skill) can act on what is missing.
func parseSkill(folder, content string) (frontMatter, error) {
	const want = "SKILL.md must start with YAML front matter between --- lines giving name and description"
	rest, ok := strings.CutPrefix(content, "---\n")
	if !ok {
		return frontMatter{}, errors.New(want)
	}
	yml, _, ok := strings.Cut(rest, "\n---")
	if !ok {
		return frontMatter{}, errors.New(want + " (no closing ---)")
	}
	var fm frontMatter
	if err := yaml.Unmarshal([]byte(yml), &fm); err != nil {
		return frontMatter{}, fmt.Errorf("%s: %v", want, err)
	}
	fm.Name, fm.Description = strings.TrimSpace(fm.Name), strings.TrimSpace(fm.Description)
	switch {
	case fm.Name == "" || fm.Description == "":
		return frontMatter{}, errors.New(want + " (both are required)")
	case fm.Name != folder:
		return frontMatter{}, fmt.Errorf("the skill's name %q must be its folder's name, %q", fm.Name, folder)
	}
	return fm, nil
}

// publishSkills writes the tenant's skills to the skills object store: the
// list for system prompts, and every file for sandboxes.
//
// Publishing is serialised per tenant and lists the skills only once it
// holds the tenant's turn, so the last set published is the newest.
func (s *Service) publishSkills(ctx context.Context, tenant string) error {
	unlock, err := s.publishing.Lock(ctx, tenant)
	if err != nil {
		return err
	}
	defer unlock()
	fs, err := s.store.List(ctx, tenant, "", tool.Skills+"/")
	if err != nil {
		return err
	}
	set := event.SkillSet{Type: event.TypeSkillSet, Tenant: tenant, Time: time.Now().UTC(), Skills: []event.Skill{}}
	for _, f := range fs {
		full, err := s.store.Get(ctx, f.Key)
		if errors.Is(err, ErrNotFound) {
			continue // removed meanwhile
		}
		if err != nil {
			return err
		}
		set.Files = append(set.Files, event.SkillFile{Path: f.Path, Content: full.Content})
		if path.Base(f.Path) != "SKILL.md" || path.Dir(path.Dir(f.Path)) != tool.Skills {
			continue
		}
		fm, err := parseSkill(path.Base(path.Dir(f.Path)), full.Content)
		if err != nil {
			continue // written before it was checked, or by hand: not listed
		}
		set.Skills = append(set.Skills, event.Skill{Name: fm.Name, Description: fm.Description, Path: f.Path})
	}
	files, err := json.Marshal(&set)
	if err != nil {
		return err
	}
	set.Files = nil
	index, err := json.Marshal(&set)
	if err != nil {
		return err
	}
	if _, err := s.skills.PutBytes(ctx, bus.SkillsFiles(tenant), files); err != nil {
		return fmt.Errorf("publish skills of %s: %w", tenant, err)
	}
	if _, err := s.skills.PutBytes(ctx, bus.SkillsIndex(tenant), index); err != nil {
		return fmt.Errorf("publish skills of %s: %w", tenant, err)
	}
	return nil
}

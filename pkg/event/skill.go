package event

import "time"

// SkillSet is a tenant's skills as the memory service publishes them to
// the skills object store whenever they change: the list the harness puts
// in each session's system prompt and, in the <tenant>.files object only,
// every skill file, which the sandbox-manager lays out read-only at /skills.
// Schema: schemas/skill/v1/set.json.
type SkillSet struct {
	Type   string      `json:"type"`
	Tenant string      `json:"tenant"`
	Time   time.Time   `json:"time"`
	Skills []Skill     `json:"skills"`
	Files  []SkillFile `json:"files,omitempty"`
}

// Skill is one skill: a folder /skills/<name>/ whose SKILL.md front
// matter gives its name and description.
type Skill struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	Path        string `json:"path"`
}

// SkillFile is one file of a skill, by its path under /skills.
type SkillFile struct {
	Path    string `json:"path"`
	Content string `json:"content"`
}

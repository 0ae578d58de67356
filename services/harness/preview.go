package harness

import (
	"context"
	"encoding/json"
	"path"
	"strings"

	"github.com/aymanbagabas/go-udiff"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/tool"
)

// preview is what an Edit of a skill file would change, for its
// reviewer: a unified diff of the file as the memory service last
// published it to the skills store, or "" when there is none to make (not
// an Edit of a skill, the file or the text to replace not found there, or
// the store unreadable). It is informational: the approval service signs
// the call's tool and input, never the preview, and the memory service
// runs the Edit against the version the session read, refusing it if the
// file changed since.
func (x *skillIndex) preview(ctx context.Context, tenant, name string, input json.RawMessage) string {
	if name != tool.Edit {
		return ""
	}
	args, err := tool.Parse(name, input)
	if err != nil {
		return ""
	}
	e := args.(*tool.EditArgs)
	p := path.Clean(e.FilePath)
	if !strings.HasPrefix(p, tool.Skills+"/") {
		return ""
	}
	rctx, cancel := bus.Bound(ctx)
	defer cancel()
	data, err := x.store.GetBytes(rctx, bus.SkillsFiles(tenant))
	if err != nil {
		return ""
	}
	var set event.SkillSet
	if json.Unmarshal(data, &set) != nil {
		return ""
	}
	for _, f := range set.Files {
		if f.Path != p {
			continue
		}
		n := strings.Count(f.Content, e.OldString)
		switch {
		case e.OldString == "" || n == 0 || (n > 1 && !e.ReplaceAll):
			return "" // the memory service refuses it, saying why
		case e.ReplaceAll:
			return udiff.Unified("a"+p, "b"+p, f.Content, strings.ReplaceAll(f.Content, e.OldString, e.NewString))
		}
		return udiff.Unified("a"+p, "b"+p, f.Content, strings.Replace(f.Content, e.OldString, e.NewString, 1))
	}
	return ""
}

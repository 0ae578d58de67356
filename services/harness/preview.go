package harness

import (
	"context"
	"encoding/json"
	"path"
	"strings"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/preview"
	"corral.dev/pkg/tool"
)

// preview is what a held call would change, for its reviewer: for an Edit,
// a unified diff of its file with context, or a line saying why there is
// none; "" when there is nothing to show, or no answer in time. It is
// informational: the approval service signs the call's tool and input,
// never the preview, and the service that runs the call checks it afresh
// (the memory service refuses an Edit of a file changed since the session
// read it).
//
// An Edit of a skill is diffed here, against the skills store; any other
// is diffed by the service that would run it, the only one that can read
// the file (the memory service its store, the sandbox-manager the
// session's workspace), asked with the very call it would be queued as,
// signed for a preview only ([event.ToolCall.SignPreview]).
func (s *Service) preview(ctx context.Context, st *state, c event.Call, service, memPath string) string {
	if c.Name != tool.Edit {
		return ""
	}
	if strings.HasPrefix(memPath, tool.Skills+"/") {
		return s.skills.preview(ctx, st.Tenant, c.Name, st.Pending.Input(c))
	}
	call := s.toolCall(st, c, memPath)
	call.ResultID = "" // a preview records nothing
	if s.cfg.CallKey != nil {
		call.SignPreview(s.cfg.CallKey, service)
	}
	text, err := preview.Ask(ctx, s.js.Conn(), service, &call)
	if err != nil {
		s.log.DebugContext(ctx, "no preview", "session", st.Session, "call", c.ID, "service", service, "err", err)
		return ""
	}
	return text
}

// preview diffs an Edit of a skill file against the file as the memory
// service last published it to the skills store, or returns "" when there
// is none to make (not an Edit of a skill, the file or the text to
// replace not found there, or the store unreadable): the store's copy may
// lag behind the memory service's, which checks the Edit when it runs it.
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
		if f.Path == p {
			d, err := preview.Edit(p, f.Content, e)
			if err != nil {
				return "" // the memory service refuses it, saying why
			}
			return d
		}
	}
	return ""
}

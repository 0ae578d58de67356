package memory

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/glob"
	"corral.dev/pkg/metrics"
	"corral.dev/pkg/tool"
)

// Output limits, matching the sandbox's file tools.
const (
	readDefaultLimit = 2000
	maxLineLen       = 2000
	maxGlobResults   = 100
	maxGrepMatches   = 500
)

// handleCall runs one call on /memories or /skills and records its result.
// The call's tenant and session are its subject's ([bus.DecodeToolCall]
// refuses a body naming others). Its user is the body's: only the harness
// may publish calls, and it names the session's user.
func (s *Service) handleCall(ctx context.Context, m bus.Msg) error {
	c, err := bus.DecodeToolCall(m, s.cfg.CallKey)
	if err != nil {
		return err // rejected: dead-lettered
	}
	start := time.Now()
	res := event.ToolCompleted{
		Header:  event.NewHeader(event.TypeToolCompleted, c.Tenant, c.Session),
		Call:    c.Call,
		Name:    c.Name,
		Service: bus.ServiceMemory,
		User:    c.User,
	}
	out, err := s.run(ctx, c)
	if err != nil {
		return fmt.Errorf("%s call %s: %w", c.Name, c.Call, err)
	}
	res.Output, res.IsError, res.Path, res.Version = out.text, out.isError, out.path, out.version
	res.DurationMS = time.Since(start).Milliseconds()
	outcome := "ok"
	if out.isError {
		outcome = "error"
	}
	s.calls.WithLabelValues(metrics.Tool(c.Name), outcome).Observe(time.Since(start).Seconds())
	s.log.DebugContext(ctx, "toolcall finished", "call", c.Call, "tool", c.Name, "is_error", out.isError)
	return s.logs.RecordResult(ctx, &res, c)
}

// result is what a call tells the model, and the file version it saw.
type result struct {
	text    string
	isError bool
	path    string
	version int64
}

func failf(format string, args ...any) result {
	return result{text: "Error: " + fmt.Sprintf(format, args...), isError: true}
}

// errCallTimeout is the cause of a call's context ending at its deadline,
// [Config.CallTimeout].
var errCallTimeout = errors.New("memory call timed out")

// run carries out one call, within [Config.CallTimeout]. An error return
// is a failure of the store (to be retried); everything the model did
// wrong, and a call that reached its time limit, is a result.
func (s *Service) run(ctx context.Context, c *event.ToolCall) (result, error) {
	args, err := tool.Parse(c.Name, c.Input)
	if err != nil {
		return failf("%v", err), nil
	}
	timeout := cmp.Or(s.cfg.CallTimeout, DefaultCallTimeout)
	cctx, cancel := context.WithTimeoutCause(ctx, timeout, errCallTimeout)
	defer cancel()
	r, err := s.runArgs(cctx, c, args)
	if err != nil && ctx.Err() == nil && errors.Is(context.Cause(cctx), errCallTimeout) {
		switch args.(type) {
		case *tool.WriteArgs, *tool.EditArgs:
			return failf("%s stopped at its time limit of %s, and may or may not have been saved: Read the file to see", c.Name, timeout), nil
		}
		return failf("%s stopped at its time limit of %s: narrow the pattern or path", c.Name, timeout), nil
	}
	return r, err
}

func (s *Service) runArgs(ctx context.Context, c *event.ToolCall, args any) (result, error) {
	if !tool.ForMemory(args) {
		return failf("%s is not a call on /memories or /skills", c.Name), nil
	}
	switch a := args.(type) {
	case *tool.ReadArgs:
		return s.read(ctx, c, a)
	case *tool.WriteArgs:
		return s.write(ctx, c, a.FilePath, func(string) (string, *result) { return a.Content, nil }, true)
	case *tool.EditArgs:
		return s.write(ctx, c, a.FilePath, func(old string) (string, *result) { return edit(old, a, s.cfg.MaxFileBytes) }, false)
	case *tool.GlobArgs:
		return s.glob(ctx, c, a)
	case *tool.GrepArgs:
		return s.grep(ctx, c, a)
	}
	return failf("%s cannot be used on /memories or /skills", c.Name), nil
}

// keyOf checks a path and returns the key it names for the call's user.
func keyOf(c *event.ToolCall, p string) (Key, *result) {
	k, err := keyFor(c.Tenant, c.User, p)
	if err != nil {
		r := failf("%v", err)
		return Key{}, &r
	}
	return k, nil
}

// keyFor checks a path and returns the key it names for user: under
// /memories/private it is the user's own file.
func keyFor(tenant, user, p string) (Key, error) {
	p, err := tool.MemoryPath(p)
	if err != nil {
		return Key{}, err
	}
	k := Key{Tenant: tenant, Path: p}
	if p == tool.Private || strings.HasPrefix(p, tool.Private+"/") {
		if user == "" {
			return Key{}, fmt.Errorf("%s is for each user's own memories, and there is no user", tool.Private)
		}
		k.Owner = user
	}
	return k, nil
}

func (s *Service) read(ctx context.Context, c *event.ToolCall, a *tool.ReadArgs) (result, error) {
	k, bad := keyOf(c, a.FilePath)
	if bad != nil {
		return *bad, nil
	}
	f, err := s.store.Get(ctx, k)
	if errors.Is(err, ErrNotFound) {
		if fs, lerr := s.store.List(ctx, c.Tenant, c.User, k.Path+"/"); lerr == nil && len(fs) > 0 {
			return failf("%s is a directory: use Glob to list it", k.Path), nil
		}
		return failf("%s does not exist", k.Path), nil
	}
	if err != nil {
		return result{}, err
	}
	r := result{path: k.Path, version: f.Version}
	if f.Content == "" {
		r.text = fmt.Sprintf("(%s exists but is empty)", k.Path)
		return r, nil
	}
	lines := strings.SplitAfter(f.Content, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	offset := max(a.Offset, 1)
	limit := a.Limit
	if limit == 0 {
		limit = readDefaultLimit
	}
	if offset > len(lines) {
		r.text = fmt.Sprintf("(%s has %d lines; offset %d is past the end)", k.Path, len(lines), offset)
		return r, nil
	}
	var b strings.Builder
	end := min(offset-1+limit, len(lines))
	for i := offset - 1; i < end; i++ {
		line := strings.TrimSuffix(lines[i], "\n")
		if len(line) > maxLineLen {
			line = strings.ToValidUTF8(line[:maxLineLen], "") + " [line cut]"
		}
		fmt.Fprintf(&b, "%6d\t%s\n", i+1, line)
	}
	if end < len(lines) {
		fmt.Fprintf(&b, "[more lines follow: read on with offset=%d]\n", end+1)
	}
	r.text = b.String()
	return r, nil
}

// write makes a Write (whole new content) or an Edit (change computes the
// new content from the current one). Either is refused if the file exists
// and this session has not read it, or it changed since the session last
// read or wrote it: c.ExpectVersion is the version the session saw.
func (s *Service) write(ctx context.Context, c *event.ToolCall, p string, change func(old string) (string, *result), create bool) (result, error) {
	k, bad := keyOf(c, p)
	if bad != nil {
		return *bad, nil
	}
	if r := checkPlace(k.Path); r != nil {
		return *r, nil
	}
	cur, err := s.store.Get(ctx, k)
	switch {
	case errors.Is(err, ErrNotFound):
		if !create {
			return failf("%s does not exist: use Write to create it", k.Path), nil
		}
		cur = File{}
	case err != nil:
		return result{}, err
	}
	if cur.Version != 0 && cur.Version != c.ExpectVersion {
		if s.ownOp(ctx, k, c.Call) { // redelivered after its write went through
			// The first delivery may have failed to publish the skills.
			if err := s.skillsChanged(ctx, k); err != nil {
				return result{}, err
			}
			return result{text: fmt.Sprintf("Wrote %s (version %d)", k.Path, cur.Version), path: k.Path, version: cur.Version}, nil
		}
		return staleRead(k.Path, c.ExpectVersion), nil
	}
	content, r := change(cur.Content)
	if r != nil {
		return *r, nil
	}
	if r := s.checkContent(k.Path, content); r != nil {
		return *r, nil
	}
	f, err := s.store.Put(ctx, s.writeOf(k, content, cur.Version, byOf(c), c.Call))
	switch {
	case errors.Is(err, ErrConflict):
		return staleRead(k.Path, c.ExpectVersion), nil
	case errors.Is(err, ErrTooMany), errors.Is(err, ErrFull):
		return failf("%v: remove files you no longer need first", errors.Unwrap(err)), nil
	case err != nil:
		return result{}, err
	}
	if err := s.skillsChanged(ctx, k); err != nil {
		return result{}, err
	}
	verb := fmt.Sprintf("Wrote %d bytes to %s", len(content), k.Path)
	if !create {
		verb = fmt.Sprintf("Edited %s", k.Path)
	}
	return result{text: fmt.Sprintf("%s (version %d)", verb, f.Version), path: k.Path, version: f.Version}, nil
}

// writeOf is the write of content to k, expecting version expect, with
// the service's bounds.
func (s *Service) writeOf(k Key, content string, expect int64, by string, op uuid.UUID) Write {
	return Write{Key: k, Content: content, Expect: expect, By: by, Op: op, MaxFiles: s.cfg.MaxFiles, MaxBytes: int64(s.cfg.MaxTenantBytes)}
}

// ownOp reports whether the file's current version was made by call op: a
// redelivered call whose write went through before its result was recorded.
func (s *Service) ownOp(ctx context.Context, k Key, op uuid.UUID) bool {
	h, err := s.store.History(ctx, k)
	return err == nil && len(h) > 0 && h[len(h)-1].Op == op
}

func staleRead(p string, seen int64) result {
	if seen == 0 {
		return failf("%s already exists and this session has not read it: Read it first, then make your change", p)
	}
	return failf("%s has changed since this session last read it: Read it again, then make your change", p)
}

func byOf(c *event.ToolCall) string {
	if c.User == "" {
		return "session " + c.Session.String()
	}
	return c.User
}

// checkPlace refuses writes where no file may be: the roots themselves,
// and files directly in /skills (a skill is a folder).
func checkPlace(p string) *result {
	switch {
	case p == tool.Memories || p == tool.Skills || p == tool.Private:
		r := failf("%s is a directory: write a file inside it", p)
		return &r
	case path.Dir(p) == tool.Skills:
		r := failf("a skill is a folder: write %s/SKILL.md and the skill's other files inside it", p)
		return &r
	}
	return nil
}

// checkContent refuses content the store must not hold.
func (s *Service) checkContent(p, content string) *result {
	var r result
	switch {
	case len(content) > s.cfg.MaxFileBytes:
		r = failf("%s would be %d bytes; memory and skill files may hold at most %d", p, len(content), s.cfg.MaxFileBytes)
	case !utf8.ValidString(content) || strings.ContainsRune(content, 0):
		r = failf("%s: memory and skill files hold text only (valid UTF-8, no NUL bytes)", p)
	case path.Base(p) == "SKILL.md" && path.Dir(path.Dir(p)) == tool.Skills:
		if _, err := parseSkill(path.Base(path.Dir(p)), content); err != nil {
			r = failf("%s: %v", p, err)
		} else {
			return nil
		}
	default:
		return nil
	}
	return &r
}

// edit applies an Edit to content ([tool.ApplyEdit]). limit is the
// largest file it may make.
func edit(content string, a *tool.EditArgs, limit int) (string, *result) {
	out, _, err := tool.ApplyEdit(a.FilePath, content, a, limit)
	var e *tool.EditError
	switch {
	case errors.As(err, &e) && e.Kind == tool.EditTooLarge:
		r := failf("%v; memory and skill files may hold at most %d", err, limit)
		return "", &r
	case err != nil:
		r := failf("%v", err)
		return "", &r
	}
	return out, nil
}

func (s *Service) glob(ctx context.Context, c *event.ToolCall, a *tool.GlobArgs) (result, error) {
	k, bad := keyOf(c, a.Path)
	if bad != nil {
		return *bad, nil
	}
	g, err := glob.Compile(a.Pattern)
	if err != nil {
		return failf("%v", err), nil
	}
	// The files listed are at most the tenant's bound on files; each is
	// matched in time linear in its path, however many ** the pattern has.
	fs, err := s.store.List(ctx, c.Tenant, c.User, k.Path+"/")
	if err != nil {
		return result{}, err
	}
	var hits []File
	for i, f := range fs {
		if i%256 == 0 && ctx.Err() != nil {
			return result{}, fmt.Errorf("glob %s: %w", k.Path, ctx.Err())
		}
		if g.Match(strings.TrimPrefix(f.Path, k.Path+"/")) {
			hits = append(hits, f)
		}
	}
	if len(hits) == 0 {
		return result{text: "No files found"}, nil
	}
	sort.SliceStable(hits, func(i, j int) bool { return hits[i].UpdatedAt.After(hits[j].UpdatedAt) })
	var b strings.Builder
	for i, f := range hits {
		if i == maxGlobResults {
			fmt.Fprintf(&b, "[showing the newest %d of %d files: narrow the pattern or path]\n", maxGlobResults, len(hits))
			break
		}
		b.WriteString(f.Path + "\n")
	}
	return result{text: b.String()}, nil
}

func (s *Service) grep(ctx context.Context, c *event.ToolCall, a *tool.GrepArgs) (result, error) {
	k, bad := keyOf(c, a.Path)
	if bad != nil {
		return *bad, nil
	}
	var filter *glob.Pattern
	if a.Glob != "" {
		var err error
		if filter, err = glob.Compile(a.Glob); err != nil {
			return failf("glob filter: %v", err), nil
		}
	}
	prefix, only := k.Path+"/", ""
	if f, err := s.store.Get(ctx, k); err == nil {
		prefix, only = f.Path, f.Path // a single file
	}
	ms, err := s.store.Grep(ctx, c.Tenant, c.User, prefix, a.Pattern, maxGrepMatches+1)
	if errors.Is(err, ErrBadPattern) {
		return failf("%v", err), nil
	}
	if err != nil {
		return result{}, err
	}
	var b strings.Builder
	n := 0
	for _, m := range ms {
		if only != "" && m.Path != only {
			continue // a file whose name merely starts with it
		}
		if filter != nil && !filter.Match(path.Base(m.Path)) && !filter.Match(strings.TrimPrefix(m.Path, k.Path+"/")) {
			continue
		}
		if n == maxGrepMatches {
			fmt.Fprintf(&b, "[stopped at %d matching lines: narrow the pattern or path]\n", maxGrepMatches)
			break
		}
		n++
		text := m.Text
		if len(text) > maxLineLen {
			text = strings.ToValidUTF8(text[:maxLineLen], "") + " [line cut]"
		}
		fmt.Fprintf(&b, "%s:%d:%s\n", m.Path, m.Line, text)
	}
	if n == 0 {
		return result{text: "No matches found"}, nil
	}
	return result{text: b.String()}, nil
}

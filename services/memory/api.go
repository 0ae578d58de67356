package memory

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/micro"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/memoryapi"
	"corral.dev/pkg/tool"
)

// Subject, the operations, APIRequest, APIResponse, APIFile, APIVersion
// and the error codes are the API's contract, kept in package memoryapi.
var Subject = memoryapi.Subject

// Operations of the API.
const (
	OpList    = memoryapi.OpList
	OpGet     = memoryapi.OpGet
	OpPut     = memoryapi.OpPut
	OpRemove  = memoryapi.OpRemove
	OpLog     = memoryapi.OpLog
	OpRestore = memoryapi.OpRestore
)

type (
	APIRequest  = memoryapi.APIRequest
	APIFile     = memoryapi.APIFile
	APIVersion  = memoryapi.APIVersion
	APIResponse = memoryapi.APIResponse
)

// Error codes of the API.
const (
	CodeBadRequest = memoryapi.CodeBadRequest
	CodeInternal   = memoryapi.CodeInternal
)

func (s *Service) serveAPI(ctx context.Context) error {
	svc, err := micro.AddService(s.nc, micro.Config{
		Name:        "corral-memory",
		Version:     "1.0.0",
		Description: "memories and skills, for the corral CLI",
	})
	if err != nil {
		return fmt.Errorf("memory api: %w", err)
	}
	for op, fn := range map[string]func(context.Context, caller, *APIRequest) (*APIResponse, error){
		OpList:    s.apiList,
		OpGet:     s.apiGet,
		OpPut:     s.apiPut,
		OpRemove:  s.apiRemove,
		OpLog:     s.apiLog,
		OpRestore: s.apiRestore,
	} {
		err := svc.AddEndpoint(op, micro.HandlerFunc(func(r micro.Request) {
			// Only the server's record says a request came from a
			// client: one published in this service's own account could
			// be a compromised service's, or the server's answer to one
			// on a subject it chose, which no permission stops.
			if err := bus.Admit(r, s.cfg.Clients); err != nil {
				s.log.WarnContext(ctx, "memory api: refused", "subject", r.Subject(), "err", err)
				return
			}
			var req APIRequest
			if err := json.Unmarshal(r.Data(), &req); err != nil {
				_ = r.Error(CodeBadRequest, "malformed request: "+err.Error(), nil)
				return
			}
			c, err := callerOf(r.Subject(), &req)
			if err != nil {
				_ = r.Error(CodeBadRequest, err.Error(), nil)
				return
			}
			rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			resp, err := fn(rctx, c, &req)
			if err != nil {
				code := CodeInternal
				var bad *badRequest
				if errors.As(err, &bad) || errors.Is(err, ErrNotFound) || errors.Is(err, ErrConflict) || errors.Is(err, ErrTooMany) || errors.Is(err, ErrFull) {
					code = CodeBadRequest
				} else {
					s.log.WarnContext(rctx, "memory api", "subject", r.Subject(), "err", err)
				}
				_ = r.Error(code, asWritten(c, req.Path, err), nil)
				return
			}
			_ = r.RespondJSON(resp)
		}), micro.WithEndpointSubject(bus.MemoryAPI("*", "*", op)))
		if err != nil {
			return fmt.Errorf("memory api: %w", err)
		}
	}
	<-ctx.Done()
	return svc.Stop()
}

// asWritten is err's message with the file named by path, as the request
// wrote it, instead of by the store's key (tenant, owner and path).
func asWritten(c caller, path string, err error) string {
	k, kerr := keyFor(c.tenant, c.user, path)
	if path == "" || kerr != nil {
		return err.Error()
	}
	return strings.ReplaceAll(err.Error(), k.String(), path)
}

// caller is whom a request comes from: the tenant and user its subject
// names, which the NATS permissions vouch for.
type caller struct{ tenant, user string }

// callerOf returns the caller of a request on subject (see [Subject]). A
// request whose body names another tenant or user is refused: it asks for
// what its sender may not have, and answering it as the subject's would
// hide that.
func callerOf(subject string, req *APIRequest) (caller, error) {
	tok := strings.Split(subject, ".")
	if len(tok) != 5 {
		return caller{}, badf("%s is not a subject of the memory API", subject)
	}
	c := caller{tenant: tok[2]}
	if err := event.CheckTenant(c.tenant); err != nil {
		return caller{}, badf("subject %s: %v", subject, err)
	}
	user, err := bus.ParseUserToken(tok[3])
	if err != nil {
		return caller{}, badf("subject %s: %v", subject, err)
	}
	c.user = user
	if req.Tenant != "" && req.Tenant != c.tenant {
		return caller{}, badf("the request names tenant %q, but its subject is tenant %q's: a client asks only for its own tenant", req.Tenant, c.tenant)
	}
	if req.User != "" && req.User != c.user {
		return caller{}, badf("the request names user %q, but its subject is user %q's: a client asks only as its own user", req.User, c.user)
	}
	return c, nil
}

// badRequest is a request the API refuses as written.
type badRequest struct{ msg string }

func (e *badRequest) Error() string { return e.msg }

func badf(format string, args ...any) error { return &badRequest{fmt.Sprintf(format, args...)} }

func apiFile(f File) APIFile {
	return APIFile{Path: f.Path, Owner: f.Owner, Size: f.Size, Version: f.Version, UpdatedBy: f.UpdatedBy, UpdatedAt: f.UpdatedAt, Content: f.Content}
}

func (s *Service) apiList(ctx context.Context, c caller, req *APIRequest) (*APIResponse, error) {
	p := req.Path
	if p == "" || p == "/" {
		p = "/"
	} else {
		k, err := keyFor(c.tenant, c.user, p)
		if err != nil {
			return nil, badf("%v", err)
		}
		p = k.Path
		if f, err := s.store.Get(ctx, k); err == nil {
			return &APIResponse{Files: []APIFile{apiFile(File{Key: f.Key, Size: f.Size, Version: f.Version, UpdatedBy: f.UpdatedBy, UpdatedAt: f.UpdatedAt})}}, nil
		}
		p += "/"
	}
	fs, err := s.store.List(ctx, c.tenant, c.user, p)
	if err != nil {
		return nil, err
	}
	resp := &APIResponse{Files: []APIFile{}}
	for _, f := range fs {
		resp.Files = append(resp.Files, apiFile(f))
	}
	return resp, nil
}

func (s *Service) apiGet(ctx context.Context, c caller, req *APIRequest) (*APIResponse, error) {
	k, err := keyFor(c.tenant, c.user, req.Path)
	if err != nil {
		return nil, badf("%v", err)
	}
	f, err := s.store.Get(ctx, k)
	if err != nil {
		return nil, err
	}
	return &APIResponse{Files: []APIFile{apiFile(f)}}, nil
}

// apiPut writes a file over whatever version is there when it is read: a
// person's put replaces the file, but a change made between that read and
// the write is still not overwritten silently.
func (s *Service) apiPut(ctx context.Context, c caller, req *APIRequest) (*APIResponse, error) {
	k, err := keyFor(c.tenant, c.user, req.Path)
	if err != nil {
		return nil, badf("%v", err)
	}
	if r := checkPlace(k.Path); r != nil {
		return nil, badf("%s", strings.TrimPrefix(r.text, "Error: "))
	}
	if r := s.checkContent(k.Path, req.Content); r != nil {
		return nil, badf("%s", strings.TrimPrefix(r.text, "Error: "))
	}
	if req.Op == uuid.Nil {
		return nil, badf("op is required")
	}
	return s.putOver(ctx, k, req.Content, c.user, req.Op)
}

func (s *Service) apiRemove(ctx context.Context, c caller, req *APIRequest) (*APIResponse, error) {
	k, err := keyFor(c.tenant, c.user, req.Path)
	if err != nil {
		return nil, badf("%v", err)
	}
	if req.Op == uuid.Nil {
		return nil, badf("op is required")
	}
	keys := []Key{k}
	if req.Recursive {
		fs, err := s.store.List(ctx, c.tenant, c.user, k.Path+"/")
		if err != nil {
			return nil, err
		}
		keys = keys[:0]
		for _, f := range fs {
			keys = append(keys, f.Key)
		}
	}
	removed := 0
	for _, key := range keys {
		cur, err := s.store.Get(ctx, key)
		if errors.Is(err, ErrNotFound) {
			if req.Recursive {
				continue
			}
			// Gone: maybe by this very request, retried after its
			// skills failed to publish; publish them again.
			if perr := s.skillsChanged(ctx, k); perr != nil {
				return nil, perr
			}
			return nil, err
		}
		if err != nil {
			return nil, err
		}
		// One op per file, derived from the request's, so a retried
		// request removes each file once.
		op := uuid.NewSHA1(req.Op, []byte(key.Path))
		if err := s.store.Delete(ctx, Write{Key: key, Expect: cur.Version, By: c.user, Op: op}); err != nil {
			return nil, err
		}
		removed++
	}
	if err := s.skillsChanged(ctx, k); err != nil {
		return nil, err
	}
	if req.Recursive && removed == 0 {
		return nil, fmt.Errorf("%s: %w", k.Path, ErrNotFound)
	}
	return &APIResponse{Removed: removed}, nil
}

// apiLog lists the versions kept of a file, oldest first.
func (s *Service) apiLog(ctx context.Context, c caller, req *APIRequest) (*APIResponse, error) {
	k, err := keyFor(c.tenant, c.user, req.Path)
	if err != nil {
		return nil, badf("%v", err)
	}
	h, err := s.store.History(ctx, k)
	if err != nil {
		return nil, err
	}
	resp := &APIResponse{Versions: make([]APIVersion, 0, len(h))}
	for _, ch := range h {
		resp.Versions = append(resp.Versions, APIVersion{Version: ch.Version, Removed: ch.Deleted, Size: ch.Size, ChangedBy: ch.ChangedBy, ChangedAt: ch.ChangedAt})
	}
	return resp, nil
}

// apiRestore writes a kept version of a file back as its newest version,
// over whatever version is there when it is read, as put does; a file
// removed since is created again.
func (s *Service) apiRestore(ctx context.Context, c caller, req *APIRequest) (*APIResponse, error) {
	k, err := keyFor(c.tenant, c.user, req.Path)
	if err != nil {
		return nil, badf("%v", err)
	}
	if req.Op == uuid.Nil {
		return nil, badf("op is required")
	}
	if req.Version <= 0 {
		return nil, badf("version is required: a version number that log lists")
	}
	old, err := s.store.Version(ctx, k, req.Version)
	if errors.Is(err, ErrNotFound) {
		return nil, badf("%s has no version %d with content to restore (a removal has none, and only the last %d versions are kept): list them with log", k.Path, req.Version, Versions)
	}
	if err != nil {
		return nil, err
	}
	if r := s.checkContent(k.Path, old.Content); r != nil {
		return nil, badf("%s", strings.TrimPrefix(r.text, "Error: "))
	}
	return s.putOver(ctx, k, old.Content, c.user, req.Op)
}

// putOver writes content as k's next version, over whichever is current,
// as user, for the request op.
func (s *Service) putOver(ctx context.Context, k Key, content, user string, op uuid.UUID) (*APIResponse, error) {
	var expect int64
	if cur, err := s.store.Get(ctx, k); err == nil {
		expect = cur.Version
	} else if !errors.Is(err, ErrNotFound) {
		return nil, err
	}
	f, err := s.store.Put(ctx, s.writeOf(k, content, expect, user, op))
	if err != nil {
		return nil, err
	}
	if err := s.skillsChanged(ctx, k); err != nil {
		return nil, err
	}
	f.Content = ""
	return &APIResponse{Files: []APIFile{apiFile(f)}}, nil
}

func (s *Service) skillsChanged(ctx context.Context, k Key) error {
	if k.Path == tool.Skills || strings.HasPrefix(k.Path, tool.Skills+"/") {
		return s.publishSkills(ctx, k.Tenant)
	}
	return nil
}

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

	"corral.dev/pkg/event"
	"corral.dev/pkg/tool"
)

// Subjects of the memory service's API, for people managing memories and
// skills with the CLI. Each takes and returns JSON.
const (
	SubjectList   = "corral.memory.ls"
	SubjectGet    = "corral.memory.cat"
	SubjectPut    = "corral.memory.put"
	SubjectRemove = "corral.memory.rm"
)

// APIRequest is a request to the API.
type APIRequest struct {
	Tenant string `json:"tenant"`
	User   string `json:"user,omitempty"`
	Path   string `json:"path"`
	// Content is what put writes.
	Content string `json:"content,omitempty"`
	// Op identifies the operation, so that a retried put or rm is applied
	// once.
	Op uuid.UUID `json:"op"`
	// Recursive makes rm remove every file under Path.
	Recursive bool `json:"recursive,omitempty"`
}

// APIFile is a file as the API returns it.
type APIFile struct {
	Path      string    `json:"path"`
	Owner     string    `json:"owner,omitempty"`
	Size      int       `json:"size"`
	Version   int64     `json:"version"`
	UpdatedBy string    `json:"updated_by"`
	UpdatedAt time.Time `json:"updated_at"`
	Content   string    `json:"content,omitempty"`
}

// APIResponse is the answer to an API request.
type APIResponse struct {
	Files   []APIFile `json:"files,omitempty"`
	Removed int       `json:"removed,omitempty"`
}

func (s *Service) serveAPI(ctx context.Context) error {
	svc, err := micro.AddService(s.nc, micro.Config{
		Name:        "corral-memory",
		Version:     "1.0.0",
		Description: "memories and skills, for the corral CLI",
	})
	if err != nil {
		return fmt.Errorf("memory api: %w", err)
	}
	for subject, fn := range map[string]func(context.Context, *APIRequest) (*APIResponse, error){
		SubjectList:   s.apiList,
		SubjectGet:    s.apiGet,
		SubjectPut:    s.apiPut,
		SubjectRemove: s.apiRemove,
	} {
		name := subject[strings.LastIndexByte(subject, '.')+1:]
		err := svc.AddEndpoint(name, micro.HandlerFunc(func(r micro.Request) {
			var req APIRequest
			if err := json.Unmarshal(r.Data(), &req); err != nil {
				_ = r.Error("400", "malformed request: "+err.Error(), nil)
				return
			}
			if err := event.CheckTenant(req.Tenant); err != nil {
				_ = r.Error("400", err.Error(), nil)
				return
			}
			rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			resp, err := fn(rctx, &req)
			if err != nil {
				code := "500"
				var bad *badRequest
				if errors.As(err, &bad) || errors.Is(err, ErrNotFound) || errors.Is(err, ErrConflict) || errors.Is(err, ErrTooMany) {
					code = "400"
				} else {
					s.log.WarnContext(rctx, "memory api", "subject", subject, "err", err)
				}
				_ = r.Error(code, err.Error(), nil)
				return
			}
			_ = r.RespondJSON(resp)
		}), micro.WithEndpointSubject(subject))
		if err != nil {
			return fmt.Errorf("memory api: %w", err)
		}
	}
	<-ctx.Done()
	return svc.Stop()
}

// badRequest is a request the API refuses as written.
type badRequest struct{ msg string }

func (e *badRequest) Error() string { return e.msg }

func badf(format string, args ...any) error { return &badRequest{fmt.Sprintf(format, args...)} }

func apiFile(f File) APIFile {
	return APIFile{Path: f.Path, Owner: f.Owner, Size: f.Size, Version: f.Version, UpdatedBy: f.UpdatedBy, UpdatedAt: f.UpdatedAt, Content: f.Content}
}

func (s *Service) apiList(ctx context.Context, req *APIRequest) (*APIResponse, error) {
	p := req.Path
	if p == "" || p == "/" {
		p = "/"
	} else {
		k, err := keyFor(req.Tenant, req.User, p)
		if err != nil {
			return nil, badf("%v", err)
		}
		p = k.Path
		if f, err := s.store.Get(ctx, k); err == nil {
			return &APIResponse{Files: []APIFile{apiFile(File{Key: f.Key, Size: f.Size, Version: f.Version, UpdatedBy: f.UpdatedBy, UpdatedAt: f.UpdatedAt})}}, nil
		}
		p += "/"
	}
	fs, err := s.store.List(ctx, req.Tenant, req.User, p)
	if err != nil {
		return nil, err
	}
	resp := &APIResponse{Files: []APIFile{}}
	for _, f := range fs {
		resp.Files = append(resp.Files, apiFile(f))
	}
	return resp, nil
}

func (s *Service) apiGet(ctx context.Context, req *APIRequest) (*APIResponse, error) {
	k, err := keyFor(req.Tenant, req.User, req.Path)
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
func (s *Service) apiPut(ctx context.Context, req *APIRequest) (*APIResponse, error) {
	k, err := keyFor(req.Tenant, req.User, req.Path)
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
	var expect int64
	if cur, err := s.store.Get(ctx, k); err == nil {
		expect = cur.Version
	} else if !errors.Is(err, ErrNotFound) {
		return nil, err
	}
	f, err := s.store.Put(ctx, Write{Key: k, Content: req.Content, Expect: expect, By: byUser(req), Op: req.Op, MaxFiles: s.cfg.MaxFiles})
	if err != nil {
		return nil, err
	}
	if err := s.skillsChanged(ctx, k); err != nil {
		return nil, err
	}
	f.Content = ""
	return &APIResponse{Files: []APIFile{apiFile(f)}}, nil
}

func (s *Service) apiRemove(ctx context.Context, req *APIRequest) (*APIResponse, error) {
	k, err := keyFor(req.Tenant, req.User, req.Path)
	if err != nil {
		return nil, badf("%v", err)
	}
	if req.Op == uuid.Nil {
		return nil, badf("op is required")
	}
	keys := []Key{k}
	if req.Recursive {
		fs, err := s.store.List(ctx, req.Tenant, req.User, k.Path+"/")
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
		if err := s.store.Delete(ctx, Write{Key: key, Expect: cur.Version, By: byUser(req), Op: op}); err != nil {
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

func (s *Service) skillsChanged(ctx context.Context, k Key) error {
	if k.Path == tool.Skills || strings.HasPrefix(k.Path, tool.Skills+"/") {
		return s.publishSkills(ctx, k.Tenant)
	}
	return nil
}

func byUser(req *APIRequest) string {
	if req.User == "" {
		return "cli"
	}
	return req.User
}

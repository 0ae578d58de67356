package proxy

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"corral.dev/pkg/egressapi"
)

// Holder keeps requests the policy holds for a reviewer. It must be safe
// for concurrent use.
type Holder interface {
	// Check is asked about a request the policy sends for approval. It
	// returns pass=true when a reviewer approved exactly this request and
	// the approval is now used up (it passes once); otherwise the
	// approval it waits on (a new one the first time). ctx is the
	// request's.
	Check(ctx context.Context, id egressapi.Identity, h Held) (pass bool, approval uuid.UUID, err error)
}

// Held is a request held for approval, as far as an approval binds it.
type Held struct {
	// Method and URL (scheme://host[:port]/path?query, the path as sent)
	// say what it asks for.
	Method, URL string
	// Refs are, for a git push (a POST to .../git-receive-pack), the ref
	// updates its body starts with; its pack is not read.
	Refs []RefUpdate
	// BodySHA256 is, for any other request, the hex SHA-256 of its body.
	BodySHA256 string
	// Capabilities is what a push asks of the server with its first ref
	// update; ContentType is the request's.
	Capabilities, ContentType string
	// Rule and Reason are the rule that holds it and why.
	Rule, Reason string
}

// RefUpdate is one ref a git push updates: from Old to New, each a hex
// object ID, all zeros for a ref created (Old) or deleted (New).
type RefUpdate struct {
	Old, New, Ref string
}

// hold asks the holder about r, which the policy holds for approval, and
// reports whether r may go on, its body intact. When it may not, hold has
// answered it and noted why in e.
func (s *session) hold(w http.ResponseWriter, r *http.Request, e *Entry) bool {
	v := e.Verdict
	if s.p.holder == nil {
		discard(r, false)
		refuse(w, e, v.Rule, "needs a reviewer's approval, and none can be asked here")
		return false
	}
	// What a reviewer approves goes out and nothing else: the headers
	// that could change what the request does (a method override, say)
	// do not.
	for k := range r.Header {
		if !heldHeaders[k] {
			delete(r.Header, k)
		}
	}
	// A held body is read before anything is asked; one that stalls, or
	// many at once, must not hold the service's memory.
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(heldBodyTimeout))
	defer rc.SetReadDeadline(time.Time{})
	if !s.p.heldBytes.TryAcquire(s.p.maxHeld) {
		discard(r, false)
		fail(w, e, http.StatusServiceUnavailable, "too many requests wait for a reviewer's approval on this node; retry later")
		return false
	}
	defer s.p.heldBytes.Release(s.p.maxHeld)
	h := Held{Method: r.Method, URL: heldURL(e.Target, r), Rule: v.Rule, Reason: v.Reason}
	if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/git-receive-pack") {
		gzipped := strings.EqualFold(r.Header.Get("Content-Encoding"), "gzip")
		refs, caps, prefix, err := readPush(r.Body, gzipped, min(s.p.maxHeld, maxPushCommands))
		if err == nil && slices.Contains(strings.Fields(caps), "push-options") {
			err = errors.New("it carries push options (git push -o), which a reviewer would not see: push without them")
		}
		if err != nil {
			discard(r, true)
			refuse(w, e, v.Rule, fmt.Sprintf("cannot read the ref updates of the push to hold it for approval: %v", err))
			return false
		}
		r.Body = &joined{Reader: io.MultiReader(bytes.NewReader(prefix), r.Body), Closer: r.Body}
		// Even a push that updates nothing (git's probe before a big
		// one) waits: it would go to a host no rule allows.
		h.Refs, h.Capabilities = refs, caps
	} else {
		body, err := io.ReadAll(io.LimitReader(r.Body, s.p.maxHeld+1))
		if err != nil {
			fail(w, e, http.StatusBadRequest, "read request body: "+err.Error())
			return false
		}
		if int64(len(body)) > s.p.maxHeld {
			discard(r, true)
			refuse(w, e, v.Rule, fmt.Sprintf("needs a reviewer's approval, and a body over %d bytes cannot be held", s.p.maxHeld))
			return false
		}
		sum := sha256.Sum256(body)
		h.BodySHA256 = hex.EncodeToString(sum[:])
		r.Body, r.ContentLength, r.TransferEncoding = io.NopCloser(bytes.NewReader(body)), int64(len(body)), nil
		if len(body) == 0 {
			r.Body = http.NoBody
		}
	}
	h.ContentType = r.Header.Get("Content-Type")
	pass, approval, err := s.p.holder.Check(r.Context(), s.id, h)
	e.Approval = approval
	if err != nil || !pass {
		discard(r, true)
	}
	switch {
	case err != nil:
		s.p.log.WarnContext(r.Context(), "hold for approval failed", "url", h.URL, "err", err)
		fail(w, e, http.StatusServiceUnavailable, "hold for approval: "+err.Error())
		return false
	case !pass:
		holding(w, e)
		return false
	}
	return true
}

// heldHeaders are the request headers a held request keeps: what git and
// ordinary clients need, none of which changes what the request does.
var heldHeaders = map[string]bool{
	"Accept": true, "Accept-Encoding": true, "Accept-Language": true, "Content-Type": true,
	"Content-Encoding": true, "Content-Length": true, "User-Agent": true, "Git-Protocol": true,
	"Pragma": true, "Cache-Control": true, "Expect": true,
}

// heldBodyTimeout bounds how long a held request's body may take to
// arrive.
const heldBodyTimeout = time.Minute

// maxPushCommands bounds the ref updates (and shallow lines) a held push
// may start with.
const maxPushCommands = 1 << 20

// heldURL is the URL of r, a request to t, as [Held] has it.
func heldURL(t Target, r *http.Request) string {
	path := r.URL.EscapedPath()
	if path == "" {
		path = "/"
	}
	u := t.Scheme + "://" + t.authority() + path
	if r.URL.RawQuery != "" {
		u += "?" + r.URL.RawQuery
	}
	return u
}

// joined reads a body whose start was read already, then the rest.
type joined struct {
	io.Reader
	io.Closer
}

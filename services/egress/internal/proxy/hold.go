package proxy

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"strings"

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
	h := Held{Method: r.Method, URL: heldURL(e.Target, r), Rule: v.Rule, Reason: v.Reason}
	if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/git-receive-pack") {
		gzipped := strings.EqualFold(r.Header.Get("Content-Encoding"), "gzip")
		refs, prefix, err := readPush(r.Body, gzipped, s.p.maxHeld)
		if err != nil {
			discard(r, true)
			refuse(w, e, v.Rule, fmt.Sprintf("cannot read the ref updates of the push to hold it for approval: %v", err))
			return false
		}
		r.Body = &joined{Reader: io.MultiReader(bytes.NewReader(prefix), r.Body), Closer: r.Body}
		if len(refs) == 0 {
			return true // git's probe before a big push: it updates nothing
		}
		h.Refs = refs
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

package proxy

import (
	"io"
	"net/http"
	"strings"

	"github.com/google/uuid"
)

// Headers of the proxy's refusals, for programs (and people) that read
// more than the body.
const (
	RuleHeader     = "X-Corral-Egress-Rule"
	ReasonHeader   = "X-Corral-Egress-Reason"
	ApprovalHeader = "X-Corral-Egress-Approval"
)

// maxDiscard bounds how much of a refused request's body is read and
// dropped.
const maxDiscard = 1 << 30

// discard reads and drops what remains of the body of r, which is about
// to be refused, so that a client still sending it reads the refusal
// rather than a broken pipe. A client that waits for "100 Continue"
// before sending its body is left waiting, unless the body was started
// on: it then reads the refusal instead.
func discard(r *http.Request, started bool) {
	if r.Body == nil || r.Body == http.NoBody || !started && strings.EqualFold(r.Header.Get("Expect"), "100-continue") {
		return
	}
	io.CopyN(io.Discard, r.Body, maxDiscard)
}

// denial says why v denies t, when v does not.
func denial(v Verdict, t Target) string {
	switch {
	case v.Reason != "":
		return v.Reason
	case v.Rule != "":
		return "denied"
	}
	return "no egress rule allows " + t.hostPort()
}

// refusalText is the body of a refusal by rule ("" for none) for reason.
func refusalText(rule, reason string) string {
	if rule == "" {
		return "corral egress: refused: " + reason + "\n"
	}
	return "corral egress: refused by rule " + rule + ": " + reason + "\n"
}

// refuse answers 403 to a request refused by rule ("" for none) for
// reason, and notes it in e.
func refuse(w http.ResponseWriter, e *Entry, rule, reason string) {
	e.Status, e.Refused, e.Reason = http.StatusForbidden, true, reason
	h := w.Header()
	if rule != "" {
		h.Set(RuleHeader, rule)
	}
	h.Set(ReasonHeader, reason)
	writeText(w, http.StatusForbidden, refusalText(rule, reason))
}

// holding answers 403 to a request held for approval e.Approval, and
// notes it in e.
func holding(w http.ResponseWriter, e *Entry) {
	v := e.Verdict
	e.Status, e.Refused, e.Reason = http.StatusForbidden, true, v.Reason
	h := w.Header()
	h.Set(ApprovalHeader, e.Approval.String())
	h.Set(RuleHeader, v.Rule)
	h.Set(ReasonHeader, v.Reason)
	writeText(w, http.StatusForbidden, heldText(e.Approval, v.Rule, v.Reason))
}

// heldText is the body of the answer to a request held for approval.
func heldText(approval uuid.UUID, rule, reason string) string {
	return "corral egress: held for approval " + approval.String() + " by rule " + rule +
		" (" + reason + "): retry the same request once a reviewer approves it\n"
}

// fail answers status to a request the proxy could not carry out (not a
// refusal: the policy let it go), and notes it in e.
func fail(w http.ResponseWriter, e *Entry, status int, reason string) {
	e.Status, e.Reason = status, reason
	writeText(w, status, "corral egress: "+reason+"\n")
}

func writeText(w http.ResponseWriter, status int, text string) {
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	io.WriteString(w, text)
}

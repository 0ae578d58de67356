package approval

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"al.essio.dev/pkg/shellescape"
	"github.com/google/uuid"

	"corral.dev/pkg/callview"
	"corral.dev/pkg/credential"
	"corral.dev/pkg/event"
	"corral.dev/pkg/tool"
)

//go:embed web/*.html
var webFiles embed.FS

var pages = template.Must(template.New("").Funcs(template.FuncMap{
	"args":    args,
	"pieces":  callview.Split,
	"change":  change,
	"summary": summary,
	"ago": func(t time.Time) string {
		return time.Since(t).Round(time.Second).String()
	},
	"when":      func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 UTC") },
	"difflines": difflines,
	// shellword is s as a shell reads it back as one word, for a command
	// the page suggests: a path the model chose is not the page's to run.
	"shellword": shellescape.Quote,
	"stepView": func(s *step, v sessionView) stepView {
		return stepView{Step: s, CSRF: v.CSRF, Decides: v.Decides, Path: v.Path}
	},
}).ParseFS(webFiles, "web/*.html"))

// cookieName holds a signed-in reviewer's session.
const cookieName = "corral_reviewer"

// signInFor is how long a sign-in lasts.
const signInFor = 12 * time.Hour

// web serves the reviewers' page.
type web struct {
	s *Service
	// key signs the sign-in cookie and the CSRF tokens; derived from the
	// signing key, so that sign-ins survive a restart.
	key []byte
	// signedOut holds the nonces of sign-ins ended by signing out, until
	// they would have expired anyway.
	mu        sync.Mutex
	signedOut map[string]time.Time
}

// reviewer is who a request comes from, and the nonce of their sign-in,
// which their CSRF token is bound to. A reviewer signed in with a
// credential sees and decides only its tenant's approvals (tenant), and
// is signed out when the credential is revoked; one signed in with a
// reviewer token or by the proxy, and an operator's credential, sees
// every tenant's (tenant ""). A user signed in with a user's credential
// (user set) sees only its own sessions in the console, and decides
// nothing.
type reviewer struct {
	name, nonce string
	tenant      string
	credential  string
	user        bool
}

// mayDecide reports whether rv may decide approvals: anyone signed in but
// a user.
func (rv reviewer) mayDecide() bool { return !rv.user }

func (s *Service) serveWeb(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.cfg.Listen)
	if err != nil {
		return fmt.Errorf("approval page: %w", err)
	}
	srv := &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		// Live updates end with the service.
		BaseContext: func(net.Listener) context.Context { return ctx },
	}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	s.log.InfoContext(ctx, "reviewers' page", "url", "http://"+ln.Addr().String())
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Handler returns the reviewers' page.
func (s *Service) Handler() http.Handler {
	mac := hmac.New(sha256.New, s.cfg.SigningKey.Seed())
	mac.Write([]byte("corral approval page"))
	w := &web{s: s, key: mac.Sum(nil), signedOut: make(map[string]time.Time)}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", w.signedIn(w.index))
	mux.HandleFunc("GET /live", w.signedIn(w.reviewers(w.live)))
	mux.HandleFunc("POST /decide", w.signedIn(w.checkCSRF(w.reviewers(w.decide))))
	w.console(mux)
	mux.HandleFunc("POST /signout", w.signedIn(w.checkCSRF(w.signOut)))
	mux.HandleFunc("GET /signin", w.signInPage)
	mux.HandleFunc("POST /signin", w.signIn)
	// Cross-origin form posts are refused before any handler sees them;
	// the CSRF tokens also refuse same-site forgeries.
	return http.NewCrossOriginProtection().Handler(securityHeaders(mux))
}

func securityHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", "default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'unsafe-inline'; frame-ancestors 'none'")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Referrer-Policy", "same-origin")
		h.ServeHTTP(w, r)
	})
}

func (w *web) sign(parts ...string) string {
	mac := hmac.New(sha256.New, w.key)
	mac.Write([]byte(strings.Join(parts, "\x00")))
	return base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// who returns the signed-in reviewer of r, if any.
func (w *web) who(r *http.Request) (reviewer, bool) {
	if h := w.s.cfg.ReviewerHeader; h != "" {
		if name := strings.TrimSpace(r.Header.Get(h)); name != "" {
			return reviewer{name: name}, true
		}
	}
	c, err := r.Cookie(cookieName)
	if err != nil {
		return reviewer{}, false
	}
	payload, sig, ok := strings.Cut(c.Value, ".")
	if !ok || !hmac.Equal([]byte(sig), []byte(w.sign("cookie", payload))) {
		return reviewer{}, false
	}
	raw, err := base64.RawURLEncoding.DecodeString(payload)
	if err != nil {
		return reviewer{}, false
	}
	parts := strings.Split(string(raw), "\x00")
	if len(parts) != 6 {
		return reviewer{}, false
	}
	exp, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil || time.Now().Unix() > exp {
		return reviewer{}, false
	}
	rv := reviewer{name: parts[0], nonce: parts[2], tenant: parts[3], credential: parts[4], user: parts[5] == roleUser}
	// A reviewer whose token was withdrawn or whose credential was
	// revoked, or who signed out, is signed out.
	if w.isSignedOut(rv.nonce) {
		return reviewer{}, false
	}
	if rv.credential == "" && !w.known(rv.name) {
		return reviewer{}, false
	}
	if rv.credential != "" && !w.stillReviews(r.Context(), rv) {
		return reviewer{}, false
	}
	return rv, true
}

// roleUser marks, in the sign-in cookie, a sign-in with a user's
// credential.
const roleUser = "user"

// stillReviews reports whether the credential rv signed in with is still
// kept, as the same reviewer or operator of the same tenant (or, for a
// user, as the same user of the same tenant).
func (w *web) stillReviews(ctx context.Context, rv reviewer) bool {
	e, err := w.s.creds.Get(ctx, rv.credential)
	if err != nil {
		return false
	}
	var c credential.Credential
	if json.Unmarshal(e.Value(), &c) != nil || c.ID != rv.credential || c.User != rv.name {
		return false
	}
	switch c.Role {
	case credential.RoleOperator:
		return rv.tenant == "" && !rv.user
	case credential.RoleReviewer:
		return rv.tenant == c.Tenant && !rv.user
	case credential.RoleUser:
		return rv.tenant == c.Tenant && rv.user
	}
	return false
}

func (w *web) isSignedOut(nonce string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, ok := w.signedOut[nonce]
	return ok
}

func (w *web) known(name string) bool {
	for _, n := range w.s.cfg.Reviewers {
		if n == name {
			return true
		}
	}
	return false
}

func (w *web) csrf(rv reviewer) string {
	user := ""
	if rv.user {
		user = roleUser
	}
	return w.sign("csrf", rv.name, rv.nonce, rv.tenant, rv.credential, user)
}

type handler func(http.ResponseWriter, *http.Request, reviewer)

func (w *web) signedIn(h handler) http.HandlerFunc {
	return func(rw http.ResponseWriter, r *http.Request) {
		rv, ok := w.who(r)
		if !ok {
			if r.Method == http.MethodGet && r.URL.Path == "/" {
				http.Redirect(rw, r, "/signin", http.StatusSeeOther)
				return
			}
			http.Error(rw, "sign in first", http.StatusUnauthorized)
			return
		}
		h(rw, r, rv)
	}
}

// reviewers refuses users, who may sign in to the console but never see
// the approvals page nor decide.
func (w *web) reviewers(h handler) handler {
	return func(rw http.ResponseWriter, r *http.Request, rv reviewer) {
		if !rv.mayDecide() {
			http.Error(rw, "a user's credential does not decide approvals: sign in with a reviewer's", http.StatusForbidden)
			return
		}
		h(rw, r, rv)
	}
}

func (w *web) checkCSRF(h handler) handler {
	return func(rw http.ResponseWriter, r *http.Request, rv reviewer) {
		got := r.PostFormValue("csrf")
		if got == "" || !hmac.Equal([]byte(got), []byte(w.csrf(rv))) {
			http.Error(rw, "this form is out of date or was not sent by this page (bad CSRF token): reload the page and try again", http.StatusForbidden)
			return
		}
		h(rw, r, rv)
	}
}

// reviewer returns the name of the reviewer whose sign-in token this is,
// or "".
func (s *Service) reviewer(token string) string {
	var name string
	for t, n := range s.cfg.Reviewers {
		if subtle.ConstantTimeCompare([]byte(t), []byte(token)) == 1 {
			name = n
		}
	}
	return name
}

func (w *web) signInPage(rw http.ResponseWriter, r *http.Request) {
	w.render(rw, http.StatusOK, "signin.html", map[string]any{"Header": w.s.cfg.ReviewerHeader})
}

func (w *web) signIn(rw http.ResponseWriter, r *http.Request) {
	var rv reviewer
	if id := strings.TrimSpace(r.PostFormValue("credential")); id != "" {
		// A reviewer's credential, as corral credentials issue --reviewer
		// prints it: the reviewer is its user, for its tenant. A user's
		// credential signs in to the sessions console only, as its user.
		cred, err := credential.Find(r.Context(), w.s.creds, id, r.PostFormValue("secret"))
		if errors.Is(err, credential.ErrLookup) {
			w.s.log.Error("reviewer sign-in", "err", err)
			w.render(rw, http.StatusServiceUnavailable, "signin.html", map[string]any{"Error": "Credentials cannot be checked now; try again."})
			return
		}
		if err != nil || (cred.Role != credential.RoleReviewer && cred.Role != credential.RoleOperator && cred.Role != credential.RoleUser) {
			w.render(rw, http.StatusUnauthorized, "signin.html", map[string]any{"Error": "That credential is not a reviewer's or a user's (a bot's credential does not sign in here), or the secret is wrong."})
			return
		}
		rv = reviewer{name: cred.User, tenant: cred.Tenant, credential: cred.ID, user: cred.Role == credential.RoleUser}
		if cred.Tenant == credential.AllTenants {
			rv.tenant = ""
		}
	} else if rv.name = w.s.reviewer(r.PostFormValue("token")); rv.name == "" {
		w.render(rw, http.StatusUnauthorized, "signin.html", map[string]any{"Error": "That token is not a reviewer's."})
		return
	}
	nonce := make([]byte, 16)
	_, _ = rand.Read(nonce)
	exp := time.Now().Add(signInFor)
	role := ""
	if rv.user {
		role = roleUser
	}
	payload := base64.RawURLEncoding.EncodeToString([]byte(strings.Join([]string{
		rv.name, strconv.FormatInt(exp.Unix(), 10), base64.RawURLEncoding.EncodeToString(nonce), rv.tenant, rv.credential, role,
	}, "\x00")))
	http.SetCookie(rw, &http.Cookie{
		Name: cookieName, Value: payload + "." + w.sign("cookie", payload), Path: "/",
		Expires: exp, HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: r.TLS != nil || r.Header.Get("X-Forwarded-Proto") == "https",
	})
	if rv.user {
		http.Redirect(rw, r, "/sessions", http.StatusSeeOther)
		return
	}
	http.Redirect(rw, r, "/", http.StatusSeeOther)
}

func (w *web) signOut(rw http.ResponseWriter, r *http.Request, rv reviewer) {
	if rv.nonce != "" {
		w.mu.Lock()
		now := time.Now()
		for n, until := range w.signedOut {
			if now.After(until) {
				delete(w.signedOut, n)
			}
		}
		w.signedOut[rv.nonce] = now.Add(signInFor)
		w.mu.Unlock()
	}
	http.SetCookie(rw, &http.Cookie{Name: cookieName, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	http.Redirect(rw, r, "/signin", http.StatusSeeOther)
}

// view is what the page shows.
type view struct {
	Reviewer string
	// Tenant is the one tenant the reviewer sees, if only one.
	Tenant  string
	CSRF    string
	Pending []*Approval
	History []*Approval
	Message string
	Error   string
}

const historySize = 50

func (w *web) view(rv reviewer) view {
	<-w.s.synced
	pending := w.s.list(rv.tenant, Pending)
	history := w.s.list(rv.tenant, Approved, Denied, Cancelled)
	slices.SortFunc(history, func(a, b *Approval) int { return b.DecidedAt.Compare(a.DecidedAt) })
	if len(history) > historySize {
		history = history[:historySize]
	}
	return view{Reviewer: rv.name, Tenant: rv.tenant, CSRF: w.csrf(rv), Pending: pending, History: history}
}

func (w *web) index(rw http.ResponseWriter, r *http.Request, rv reviewer) {
	if rv.user {
		// A user decides nothing: their page is the console.
		http.Redirect(rw, r, "/sessions", http.StatusSeeOther)
		return
	}
	v := w.view(rv)
	v.Message = r.URL.Query().Get("done")
	w.render(rw, http.StatusOK, "page.html", v)
}

func (w *web) decide(rw http.ResponseWriter, r *http.Request, rv reviewer) {
	id, err := uuid.Parse(r.PostFormValue("id"))
	session, serr := uuid.Parse(r.PostFormValue("session"))
	verdict := r.PostFormValue("verdict")
	if err != nil || serr != nil || (verdict != "approve" && verdict != "deny") {
		v := w.view(rv)
		v.Error = "The form names no approval or no decision."
		w.render(rw, http.StatusBadRequest, "page.html", v)
		return
	}
	// The page names the tenant too (a form from a page loaded before it
	// did may not): find refuses an ID found in more than one tenant.
	tenant := r.PostFormValue("tenant")
	if tenant != "" && event.CheckTenant(tenant) != nil {
		v := w.view(rv)
		v.Error = "The form names no valid tenant."
		w.render(rw, http.StatusBadRequest, "page.html", v)
		return
	}
	if rv.tenant != "" {
		// Another tenant's approval is none of this reviewer's.
		if tenant != "" && tenant != rv.tenant {
			v := w.view(rv)
			v.Error = "There is no such approval."
			w.render(rw, http.StatusNotFound, "page.html", v)
			return
		}
		tenant = rv.tenant
	}
	reason := strings.TrimSpace(r.PostFormValue("reason"))
	a, err := w.s.Decide(r.Context(), Ref{ID: id, Tenant: tenant, Session: session}, verdict == "approve", rv.name, reason)
	var decided *DecidedError
	switch {
	case errors.As(err, &decided):
		v := w.view(rv)
		v.Error = "Not decided: " + err.Error() + "."
		w.render(rw, http.StatusConflict, "page.html", v)
	case errors.Is(err, ErrNotFound):
		v := w.view(rv)
		v.Error = "There is no such approval."
		w.render(rw, http.StatusNotFound, "page.html", v)
	case errors.Is(err, ErrAmbiguous):
		v := w.view(rv)
		v.Error = "Not decided: " + err.Error() + "."
		w.render(rw, http.StatusBadRequest, "page.html", v)
	case err != nil && a == nil:
		http.Error(rw, err.Error(), http.StatusInternalServerError)
	default:
		// The decision is kept; a failed publish is retried by the sweep.
		// Decided from a session's page, the reviewer goes back there.
		if back := r.PostFormValue("back"); back != "" && back == sessionPath(a.Tenant, a.Session) {
			http.Redirect(rw, r, back+"#held-"+a.ID.String(), http.StatusSeeOther)
			return
		}
		http.Redirect(rw, r, "/?done="+a.Status+"+"+a.Tool+"+call", http.StatusSeeOther)
	}
}

// live streams the approvals part of the page as server-sent events,
// whenever anything changes.
func (w *web) live(rw http.ResponseWriter, r *http.Request, rv reviewer) {
	flusher, ok := rw.(http.Flusher)
	if !ok {
		http.Error(rw, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	rw.Header().Set("Content-Type", "text/event-stream")
	rw.Header().Set("Cache-Control", "no-store")
	keepAlive := time.NewTicker(15 * time.Second)
	defer keepAlive.Stop()
	for {
		changed := w.s.updates()
		var buf bytes.Buffer
		if err := pages.ExecuteTemplate(&buf, "approvals", w.view(rv)); err != nil {
			return
		}
		// One JSON string on one line: nothing in the page (a carriage
		// return in a command, say) can end the event early.
		data, err := json.Marshal(buf.String())
		if err != nil {
			return
		}
		fmt.Fprintf(rw, "event: update\ndata: %s\n\n", data)
		flusher.Flush()
		for waiting := true; waiting; {
			select {
			case <-r.Context().Done():
				return
			case <-keepAlive.C:
				fmt.Fprint(rw, ": keep-alive\n\n")
				flusher.Flush()
			case <-changed:
				waiting = false
			}
		}
	}
}

func (w *web) render(rw http.ResponseWriter, code int, name string, data any) {
	var buf bytes.Buffer
	if err := pages.ExecuteTemplate(&buf, name, data); err != nil {
		w.s.log.Error("render page", "page", name, "err", err)
		http.Error(rw, "cannot render the page", http.StatusInternalServerError)
		return
	}
	rw.Header().Set("Content-Type", "text/html; charset=utf-8")
	rw.Header().Set("Cache-Control", "no-store")
	rw.WriteHeader(code)
	_, _ = rw.Write(buf.Bytes())
}

// arg is one argument of a call as the page shows it: in full, its
// hidden code points marked.
type arg struct {
	Name   string
	Pieces []callview.Piece
}

// args is every argument of a's call.
func args(a *Approval) []arg {
	var out []arg
	for _, x := range callview.Args(a.Input) {
		name, _ := callview.Visible(x.Name)
		out = append(out, arg{Name: name, Pieces: callview.Split(x.Value)})
	}
	return out
}

// change is the diff of an Edit's old_string and new_string, for an Edit
// that comes without a preview of the whole file; "" for any
// other call.
func change(a *Approval) string {
	if a.Tool != tool.Edit {
		return ""
	}
	return callDiff(a.Tool, a.Input)
}

// summary is a's call on one line, for the history: cut, and marked so.
func summary(a *Approval) string {
	if a.Tool == event.BudgetTool {
		return "raise the session's caps to " + callview.Plain(a.Input)
	}
	s, _ := callview.Summary(a.Input, 120)
	return s
}

package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"corral.dev/pkg/approvalapi"
	"corral.dev/pkg/bus"
	"corral.dev/pkg/credential"
	"corral.dev/pkg/event"
	"corral.dev/pkg/sessionindex"
)

// minPrefix is the fewest hex digits of an ID a command takes for the
// whole: fewer name too many IDs to be worth looking up.
const minPrefix = 4

// maxCandidates is how many of the IDs an ambiguous prefix names an error
// lists.
const maxCandidates = 10

// idPrefix is an ID, or the start of one, as a command line gives it.
type idPrefix struct {
	// hex is its hex digits, lower case, without dashes.
	hex string
	// full is the whole ID when it is one, uuid.Nil otherwise.
	full uuid.UUID
}

// parseIDPrefix reads arg as a whole ID or its first hex digits, at least
// minPrefix of them, as git takes a commit's: with or without the dashes
// of the printed form, in either case. what names the kind of ID in the
// error.
func parseIDPrefix(what, arg string) (idPrefix, error) {
	if id, err := uuid.Parse(arg); err == nil {
		return idPrefix{hex: strings.ReplaceAll(id.String(), "-", ""), full: id}, nil
	}
	hex := strings.ToLower(strings.ReplaceAll(arg, "-", ""))
	if len(hex) < minPrefix || len(hex) > 32 || strings.Trim(hex, "0123456789abcdef") != "" {
		return idPrefix{}, usageError(fmt.Errorf("%s %q: want a %s ID, or at least its first %d hex digits", what, arg, what, minPrefix))
	}
	return idPrefix{hex: hex}, nil
}

// matches reports whether id starts with p.
func (p idPrefix) matches(id uuid.UUID) bool {
	return strings.HasPrefix(strings.ReplaceAll(id.String(), "-", ""), p.hex)
}

// String is p as given, for messages.
func (p idPrefix) String() string {
	if p.full != uuid.Nil {
		return p.full.String()
	}
	return p.hex
}

// sessionTenant is the --tenant flag of a command that names a session:
// a filter, or an override, of the tenant the session is found in.
type sessionTenant struct {
	value string
	// env is CORRAL_TENANT, which chooses the tenant as the flag does.
	env string
}

func (e *env) sessionTenantFlag(cmd *cobra.Command, t *sessionTenant) {
	t.env = e.getenv("CORRAL_TENANT")
	cmd.Flags().StringVar(&t.value, "tenant", cmp.Or(t.env, "default"),
		"the session's tenant (CORRAL_TENANT; default: the tenant the session is found in, among those the credential may read)")
}

// chosen returns the tenant the command line or the environment chose,
// "" when neither did.
func (t *sessionTenant) chosen(cmd *cobra.Command) string {
	if cmd.Flags().Changed("tenant") || t.env != "" {
		return t.value
	}
	return ""
}

// readerTenant is the tenant whose sessions the connection of js may
// read: its credential's, or [sessionindex.AnyTenant] for an operator's
// and for a server that signs in anyone (whose reader is no credential).
func readerTenant(ctx context.Context, js jetstream.JetStream) string {
	c, err := credential.Whoami(ctx, js.Conn())
	if err != nil || c.Tenant == credential.AllTenants {
		return sessionindex.AnyTenant
	}
	return c.Tenant
}

// findSession returns the tenant and the ID of the session arg names: a
// whole ID, or its first hex digits. The tenant is chosen (the --tenant
// flag or CORRAL_TENANT), or else the tenant the session is found in
// among those the connection's credential may read: one for a credential
// of one tenant, every tenant for an operator's.
//
// A prefix is looked up in the session index, as is a whole ID whose
// tenant is not known; a whole ID the index has not yet (the index
// follows the logs by a moment) is looked up in the session logs. An ID
// or prefix of no session is an error of status 1; a prefix of more than
// one session (or an ID in more than one tenant) a usage error listing
// them.
func findSession(ctx context.Context, js jetstream.JetStream, arg, chosen string) (string, uuid.UUID, error) {
	p, err := parseIDPrefix("session", arg)
	if err != nil {
		return "", uuid.Nil, err
	}
	if chosen != "" {
		if err := event.CheckTenant(chosen); err != nil {
			return "", uuid.Nil, usageError(err)
		}
	}
	scope := cmp.Or(chosen, readerTenant(ctx, js))
	if p.full != uuid.Nil && scope != sessionindex.AnyTenant {
		// Whose it is is known: the command says if it is there.
		return scope, p.full, nil
	}
	entries, err := sessionindex.List(ctx, js, scope)
	if err != nil && (p.full == uuid.Nil || !errors.Is(err, sessionindex.ErrNoIndex)) {
		if errors.Is(err, sessionindex.ErrNoIndex) {
			return "", uuid.Nil, &exitError{exitFailed, fmt.Errorf("session %s: a prefix is looked up in the session index, and %w: give the whole ID", p, err)}
		}
		return "", uuid.Nil, fmt.Errorf("look up session %s: %w", p, err)
	}
	var found []sessionindex.Entry
	for _, en := range entries {
		if p.matches(en.Session) {
			found = append(found, en)
		}
	}
	switch {
	case len(found) == 1:
		return found[0].Tenant, found[0].Session, nil
	case len(found) > 1:
		return "", uuid.Nil, usageError(ambiguousSession(p, found))
	case p.full != uuid.Nil:
		return sessionFromLog(ctx, js, p.full)
	}
	return "", uuid.Nil, &exitError{exitFailed, fmt.Errorf("no session starting with %s in %s", p, tenantText(scope))}
}

// sessionFromLog returns the tenant of session as its log's subjects
// name it, among every tenant the reader may read.
func sessionFromLog(ctx context.Context, js jetstream.JetStream, session uuid.UUID) (string, uuid.UUID, error) {
	m, err := bus.LastBySubject(ctx, js, bus.StreamEvents, bus.SessionEvents(sessionindex.AnyTenant, session))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return "", uuid.Nil, &exitError{exitFailed, fmt.Errorf("no session %s in %s", session, tenantText(sessionindex.AnyTenant))}
	}
	if err != nil {
		return "", uuid.Nil, fmt.Errorf("look up session %s: %w", session, err)
	}
	// events.<tenant>.<session>.…
	tok := strings.SplitN(m.Subject, ".", 3)
	if len(tok) < 3 || event.CheckTenant(tok[1]) != nil {
		return "", uuid.Nil, fmt.Errorf("look up session %s: an event on %q", session, m.Subject)
	}
	return tok[1], session, nil
}

// tenantText names scope in a message.
func tenantText(scope string) string {
	if scope == sessionindex.AnyTenant {
		return "any tenant this credential may read (--tenant names one)"
	}
	return "tenant " + scope
}

// ambiguousSession says which sessions p names, the latest first.
func ambiguousSession(p idPrefix, found []sessionindex.Entry) error {
	var b strings.Builder
	fmt.Fprintf(&b, "session %s is ambiguous: it starts %d sessions; give more of its digits:", p, len(found))
	for i, en := range found {
		if i == maxCandidates {
			fmt.Fprintf(&b, "\n  … and %d more", len(found)-i)
			break
		}
		fmt.Fprintf(&b, "\n  %s  tenant %s  %s  started %s  %s", en.Session, en.Tenant, en.Status, when(en.Started), printable(oneLine(en.Title, 60)))
	}
	return errors.New(b.String())
}

// findSessionAt returns the ID of the session of tenant that arg names
// (see [findSession]), looked up on the platform at url.
func (e *env) findSessionAt(ctx context.Context, url, tenant, arg string) (uuid.UUID, error) {
	if _, err := parseIDPrefix("session", arg); err != nil {
		return uuid.Nil, err
	}
	nc, js, err := e.connect(url)
	if err != nil {
		return uuid.Nil, err
	}
	defer nc.Close()
	_, id, err := findSession(ctx, js, arg, tenant)
	return id, err
}

// findApproval returns the ID of the approval of tenant, as user sees
// them, that arg names: a whole ID, or its first hex digits, looked up in
// the approval service's list, decided ones too (see [matchApproval]).
func (e *env) findApproval(ctx context.Context, url, tenant, user, arg string) (uuid.UUID, error) {
	p, err := parseIDPrefix("approval", arg)
	if err != nil {
		return uuid.Nil, err
	}
	if p.full != uuid.Nil {
		return p.full, nil
	}
	var resp approvalapi.Response
	if err := e.request(ctx, url, "approval service", approvalapi.Subject(tenant, user, bus.OpList), approvalapi.ListRequest{All: true}, &resp); err != nil {
		return uuid.Nil, err
	}
	return matchApproval(p, tenant, resp.Approvals)
}

// matchApproval returns the ID of the one approval of listed, tenant's,
// that p names. None is an error of status 1; more than one a usage
// error listing them. An ID in more than one session (a raise's, which
// its asker picks) is one approval here: --session says which.
func matchApproval(p idPrefix, tenant string, listed []*approvalapi.Approval) (uuid.UUID, error) {
	var found []*approvalapi.Approval
	for _, a := range listed {
		if p.matches(a.ID) && !slices.ContainsFunc(found, func(f *approvalapi.Approval) bool { return f.ID == a.ID }) {
			found = append(found, a)
		}
	}
	switch len(found) {
	case 0:
		what := "starting with "
		if p.full != uuid.Nil {
			what = ""
		}
		return uuid.Nil, &exitError{exitFailed, fmt.Errorf("no approval %s%s in tenant %s (corral approvals --all lists them)", what, p, tenant)}
	case 1:
		return found[0].ID, nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "approval %s is ambiguous: it starts %d approvals; give more of its digits:", p, len(found))
	for i, a := range found {
		if i == maxCandidates {
			fmt.Fprintf(&b, "\n  … and %d more", len(found)-i)
			break
		}
		fmt.Fprintf(&b, "\n  %s  %s  %s of session %s", a.ID, a.Status, printable(a.Tool), a.Session)
	}
	return uuid.Nil, usageError(errors.New(b.String()))
}

// checkIDs checks --session and --fork before anything is asked of the
// platform.
func (o *runOpts) checkIDs() error {
	for flag, arg := range map[string]string{"--session": o.session, "--fork": o.fork} {
		if arg == "" {
			continue
		}
		if _, err := parseIDPrefix("session", arg); err != nil {
			return flagged(flag, err)
		}
	}
	return nil
}

// findSessions returns the session o continues (--session) or a new one's
// ID, and the session it forks (--fork; uuid.Nil for none), each named by
// its ID or a prefix of it. Unless a tenant was chosen, o's tenant becomes
// theirs.
func (o *runOpts) findSessions(ctx context.Context, js jetstream.JetStream) (session, fork uuid.UUID, err error) {
	if o.fork != "" && o.session != "" {
		return uuid.Nil, uuid.Nil, usageError(errors.New("--fork starts a new session: it cannot go with --session"))
	}
	chosen := o.tenant
	if o.findTenant {
		chosen = ""
	}
	switch {
	case o.session != "":
		o.tenant, session, err = findSession(ctx, js, o.session, chosen)
		return session, uuid.Nil, flagged("--session", err)
	case o.fork != "":
		o.tenant, fork, err = findSession(ctx, js, o.fork, chosen)
		if err != nil {
			return uuid.Nil, uuid.Nil, flagged("--fork", err)
		}
	}
	return uuid.Must(uuid.NewV7()), fork, nil
}

// flagged says err is about flag's value.
func flagged(flag string, err error) error {
	var ee *exitError
	if errors.As(err, &ee) && ee.err != nil {
		return &exitError{ee.code, fmt.Errorf("%s: %w", flag, ee.err)}
	}
	if err != nil {
		return fmt.Errorf("%s: %w", flag, err)
	}
	return nil
}

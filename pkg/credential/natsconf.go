package credential

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"corral.dev/pkg/bus"
)

// The server's accounts. The services, the streams and buckets live in
// AccountServices; every client is placed in AccountClients, which holds
// nothing and reaches the services' account only through the subjects
// [ClientImports] names.
//
// The split is what keeps a client's replies in its own account. The
// server checks no permission on a reply subject: had clients shared the
// services' account, a client could have the JetStream API, or a service
// answering its request, publish the answer on any subject, a stream's
// included (another tenant's requests or session log). Across accounts an
// answer goes back only to the account that asked, and is never passed on
// through that account's imports.
const (
	AccountServices = "CORRAL"
	AccountClients  = "CLIENTS"
)

// AuthTimeout is how long the server waits for a connection to sign in,
// the auth service's answer included.
const AuthTimeout = 5 * time.Second

// ClientImports are the subjects the services' account exports to the
// clients' account, as services (each publish is answered in the client's
// account): everything a client credential of any tenant may publish, with
// the tenant and user tokens as wildcards (a bot's and an operator's
// credentials of tenant "*" may publish what every role may). A client's
// own permissions then narrow them to its tenant and user.
func ClientImports() []string {
	// JetStream's account info too, which no client may ask: an account
	// without JetStream that imports it from nowhere has the server answer
	// every JetStream request of its own, beside the imports, that
	// JetStream is not enabled.
	out := []string{"$JS.API.INFO"}
	for _, r := range []Role{RoleBot, RoleOperator} {
		c := Credential{Tenant: "*", Role: r}
		for _, s := range c.Permissions().Publish {
			// The server answers who a client is in the client's own
			// account.
			if s != UserInfoSubject && !slices.Contains(out, s) {
				out = append(out, s)
			}
		}
	}
	return out
}

// ClientStreams are the subjects the services' account exports to the
// clients' account as streams: messages the services publish that clients
// hear, which no client answers. A client's subscribe permissions then
// narrow them to its tenant ([bus.LiveFilter]). Nothing a client
// publishes goes the other way.
func ClientStreams() []string { return []string{bus.LiveFilter("*")} }

// exported returns the subject the services' account exports for a
// client's subject: itself, but for the creation of a consumer, which goes
// to the auth service's gate ([bus.ConsumerGate]) under the same tokens.
// The gate creates the consumer if the client may have one more, and only
// a pull consumer: a push consumer's deliveries go to a subject its
// creator chose, in the services' account. The import shares who asked
// (the server's Nats-Request-Info names the credential), which the gate
// counts consumers by.
func exported(subject string) string {
	if rest, ok := strings.CutPrefix(subject, bus.ConsumerCreate); ok {
		return bus.ConsumerGate + rest
	}
	return subject
}

// streamed reports whether the answer to a publish on subject may be
// several messages: a pull's.
func streamed(subject string) bool {
	return strings.HasPrefix(subject, "$JS.API.CONSUMER.MSG.NEXT.")
}

// NATSConfig renders the part of a NATS server's configuration that says
// who may do what: the two accounts, the services' users with their
// permissions, the exports and imports between the accounts (services
// clients call, streams they hear), and the auth
// callout through which every other connection signs in. password returns
// a user's password as the configuration spells it (a quoted literal or a
// $VARIABLE); issuer likewise the auth service's public signing key.
// deploy/nats.conf holds it with variables; corral dev writes it with the
// passwords it made.
func NATSConfig(w io.Writer, password func(user string) string, issuer string) error {
	p := &printer{w: w}
	p.line(0, "accounts {")
	p.line(1, "%s {", AccountServices)
	p.line(2, "jetstream: enabled")
	p.line(2, "users = [")
	for _, s := range Services() {
		p.line(3, "{")
		p.line(4, "user: %s, password: %s", s.User, password(s.User))
		p.line(4, "permissions: {")
		p.line(5, "publish: {")
		p.list(6, "allow", s.Permissions.Publish)
		if len(s.Permissions.Deny) > 0 {
			p.list(6, "deny", s.Permissions.Deny)
		}
		p.line(5, "}")
		p.line(5, "subscribe: { allow: [%s] }", quoted(s.Permissions.Subscribe))
		if s.Responds {
			p.line(5, "allow_responses: true")
		}
		p.line(4, "}")
		p.line(3, "}")
	}
	p.line(3, "# Administrators: corral setup, which creates and updates the")
	p.line(3, "# streams and buckets, corral credentials, and operations by hand.")
	p.line(3, "{ user: %s, password: %s }", UserAdmin, password(UserAdmin))
	p.line(2, "]")
	p.line(2, "# What clients may reach from their account.")
	p.line(2, "exports = [")
	for _, s := range ClientImports() {
		if streamed(s) {
			p.line(3, "{ service: %q, response_type: stream, accounts: [%s] }", s, AccountClients)
		} else {
			p.line(3, "{ service: %q, accounts: [%s] }", exported(s), AccountClients)
		}
	}
	for _, s := range ClientStreams() {
		p.line(3, "{ stream: %q, accounts: [%s] }", s, AccountClients)
	}
	p.line(2, "]")
	p.line(1, "}")
	p.line(1, "# Every client, placed here by the auth service. No JetStream of its own.")
	p.line(1, "%s {", AccountClients)
	p.line(2, "imports = [")
	for _, s := range ClientImports() {
		if e := exported(s); e != s {
			p.line(3, "{ service: { account: %s, subject: %q }, to: %q, share: true }", AccountServices, e, s)
		} else {
			p.line(3, "{ service: { account: %s, subject: %q } }", AccountServices, s)
		}
	}
	for _, s := range ClientStreams() {
		p.line(3, "{ stream: { account: %s, subject: %q } }", AccountServices, s)
	}
	p.line(2, "]")
	p.line(1, "}")
	p.line(0, "}")
	p.line(0, "")
	p.line(0, "authorization {")
	p.line(1, "# How long a connection may take to sign in, the auth service's answer")
	p.line(1, "# included (seconds; the server's default, 2, is short for a loaded host).")
	p.line(1, "timeout: %d", int(AuthTimeout.Seconds()))
	p.line(1, "auth_callout {")
	p.line(2, "# The public key of the auth service's signing key (CORRAL_AUTH_ISSUER,")
	p.line(2, "# printed with its seed by corral credentials issuer).")
	p.line(2, "issuer: %s", issuer)
	p.line(2, "account: %s", AccountServices)
	p.line(2, "auth_users: [ %s ]", strings.Join(AuthUsers(), ", "))
	p.line(1, "}")
	p.line(0, "}")
	return p.err
}

// printer writes indented lines, keeping the first error.
type printer struct {
	w   io.Writer
	err error
}

func (p *printer) line(depth int, format string, args ...any) {
	if p.err != nil {
		return
	}
	_, p.err = fmt.Fprintf(p.w, "%s%s\n", strings.Repeat("  ", depth), fmt.Sprintf(format, args...))
}

// list writes name: [ ... ] with four subjects a line.
func (p *printer) list(depth int, name string, subjects []string) {
	p.line(depth, "%s: [", name)
	for i := 0; i < len(subjects); i += 4 {
		line := quoted(subjects[i:min(i+4, len(subjects))])
		if i+4 < len(subjects) {
			line += ","
		}
		p.line(depth+1, "%s", line)
	}
	p.line(depth, "]")
}

func quoted(subjects []string) string {
	q := make([]string, len(subjects))
	for i, s := range subjects {
		q[i] = fmt.Sprintf("%q", s)
	}
	return strings.Join(q, ", ")
}

// ConfigVariable is the variable deploy/nats.conf takes user's password
// from: CORRAL_NATS_PASSWORD_<SERVICE>.
func ConfigVariable(user string) string {
	name := strings.ToUpper(user)
	switch user {
	case UserSandbox:
		name = "SANDBOX"
	}
	return "$CORRAL_NATS_PASSWORD_" + name
}

// WriteConfigFile writes to file a NATS server configuration holding
// NATSConfig with the given passwords (by user) and issuer spelled out:
// corral dev's and the tests' servers start from it.
func WriteConfigFile(file string, passwords map[string]string, issuer string) error {
	var b strings.Builder
	err := NATSConfig(&b, func(user string) string { return strconv.Quote(passwords[user]) }, strconv.Quote(issuer))
	if err != nil {
		return err
	}
	return os.WriteFile(file, []byte(b.String()), 0o600)
}

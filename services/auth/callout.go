package auth

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"

	"corral.dev/pkg/credential"
)

// Why a connection is refused: what the service logs, and tells the
// server, which logs it (the client is told "Authorization Violation"
// alone). None holds a secret.
const (
	reasonNotClient   = "not a client connection"
	reasonNotID       = "user name is not a credential ID"
	reasonUnknown     = "unknown credential"
	reasonWrongSecret = "wrong secret"
	reasonInvalid     = "invalid credential"
	reasonLookup      = "credential lookup failed"
)

// answer answers one question of the server's. A question that cannot be
// decoded has no one to answer to (the answer names the server and the
// connection's key, which are in the question): the server's wait runs out
// and the connection is refused.
func (s *Service) answer(ctx context.Context, m *nats.Msg) {
	ctx, cancel := context.WithTimeout(ctx, answerTimeout)
	defer cancel()
	rc, err := jwt.DecodeAuthorizationRequestClaims(string(m.Data))
	if err != nil {
		s.log.WarnContext(ctx, "undecodable auth request", "subject", m.Subject, "err", err)
		return
	}
	log := s.log.With("client_host", rc.ClientInformation.Host, "client_id", rc.ClientInformation.ID, "server_id", rc.Server.ID)

	cr := jwt.NewAuthorizationResponseClaims(rc.UserNkey)
	cr.Audience = rc.Server.ID
	cred, reason, err := s.decide(ctx, rc)
	if reason == "" {
		if cr.Jwt, err = s.user(cred, rc.UserNkey, time.Now()); err != nil {
			reason, err = "cannot sign user", fmt.Errorf("sign user: %w", err)
		}
	}
	// Counted and logged before the answer, which lets the client in.
	if reason == "" {
		s.decisions.WithLabelValues("allowed").Inc()
		log.DebugContext(ctx, "client allowed", "credential", cred.ID, "tenant", cred.Tenant, "role", cred.Role)
	} else {
		cr.Error = reason
		s.decisions.WithLabelValues("denied").Inc()
		// The user name is logged only when it is a credential ID: a
		// name that is not may be a secret typed in the wrong place.
		args := []any{"reason", reason}
		if id := rc.ConnectOptions.Username; credential.IsID(id) {
			args = append(args, "credential", id)
		}
		if err != nil {
			log.WarnContext(ctx, "client denied", append(args, "err", err)...)
		} else {
			log.InfoContext(ctx, "client denied", args...)
		}
	}
	tok, err := cr.Encode(s.cfg.Issuer.kp)
	if err != nil {
		log.ErrorContext(ctx, "sign auth response", "err", err)
		return
	}
	if err := m.Respond([]byte(tok)); err != nil {
		log.WarnContext(ctx, "answer auth request", "err", err)
	}
}

// decide returns the credential a connection signs in with, or why it
// may not: a non-empty reason, and the error behind it when the
// credential could not be read.
func (s *Service) decide(ctx context.Context, rc *jwt.AuthorizationRequestClaims) (credential.Credential, string, error) {
	// A leaf node's connection is asked about too; a client's
	// permissions are not for it.
	if rc.ClientInformation.Kind != "Client" {
		return credential.Credential{}, reasonNotClient, nil
	}
	id, secret := rc.ConnectOptions.Username, rc.ConnectOptions.Password
	if !credential.IsID(id) {
		return credential.Credential{}, reasonNotID, nil
	}
	cred, err := credential.Find(ctx, s.kv, id, secret)
	switch {
	case err == nil:
		return cred, "", nil
	case errors.Is(err, credential.ErrUnknown):
		// Never issued, or revoked (deleted or purged).
		return credential.Credential{}, reasonUnknown, nil
	case errors.Is(err, credential.ErrWrongSecret):
		return credential.Credential{}, reasonWrongSecret, nil
	case errors.Is(err, credential.ErrInvalid):
		return credential.Credential{}, reasonInvalid, err
	default:
		return credential.Credential{}, reasonLookup, err
	}
}

// user returns the signed user the server lets the connection with key
// userNkey in as, for cred: in the configured account, with cred's
// permissions, until TTL after now.
func (s *Service) user(cred credential.Credential, userNkey string, now time.Time) (string, error) {
	p := cred.Permissions()
	uc := jwt.NewUserClaims(userNkey)
	uc.Audience = s.cfg.Account
	uc.Name = cred.ID
	uc.Expires = now.Add(s.cfg.TTL).Unix()
	uc.Pub.Allow = p.Publish
	uc.Pub.Deny = p.Deny
	uc.Sub.Allow = p.Subscribe
	return uc.Encode(s.cfg.Issuer.kp)
}

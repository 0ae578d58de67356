package auth

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/credential"
	"corral.dev/pkg/event"
	"corral.dev/pkg/natstest"
)

func TestPermissions(t *testing.T) {
	p := start(t, DefaultTTL)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	signIn := func(tenant, user string, role credential.Role) (*client, jetstream.JetStream) {
		t.Helper()
		cred, secret := p.issue(t, tenant, user, role)
		c := p.mustConnect(t, cred.ID, secret, nats.PermissionErrOnSubscribe(true))
		js, err := jetstream.New(c.Conn)
		if err != nil {
			t.Fatal(err)
		}
		return c, js
	}
	ada, adaJS := signIn("acme", "ada", credential.RoleUser)
	bot, _ := signIn("acme", "bridge", credential.RoleBot)
	rita, _ := signIn("acme", "rita", credential.RoleReviewer)
	olga, _ := signIn(credential.AllTenants, "olga", credential.RoleOperator)
	session := uuid.Must(uuid.NewV7())
	tok := bus.UserToken
	blob := strings.Repeat("ab", 32)

	publish := []struct {
		name    string
		c       *client
		subject string
		ok      bool
	}{
		{"user: own request", ada, bus.RequestSubject("acme", session, "ada"), true},
		{"user: another user's request", ada, bus.RequestSubject("acme", session, "bob"), false},
		{"user: another tenant's request", ada, bus.RequestSubject("initech", session, "ada"), false},
		{"user: own memory", ada, bus.MemoryAPI("acme", tok("ada"), "recall"), true},
		{"user: another user's memory", ada, bus.MemoryAPI("acme", tok("bob"), "recall"), false},
		{"user: own workspaces", ada, bus.WorkspaceAPI("acme", tok("ada"), "cat"), true},
		{"user: another tenant's workspaces", ada, bus.WorkspaceAPI("initech", tok("ada"), "cat"), false},
		{"user: own approvals", ada, bus.ApprovalAPI("acme", tok("ada"), bus.OpList), true},
		{"user: decide", ada, bus.ApprovalAPI("acme", tok("ada"), bus.OpDecide), false},
		{"bot: any user's request", bot, bus.RequestSubject("acme", session, "bob"), true},
		{"bot: another tenant's request", bot, bus.RequestSubject("initech", session, "bob"), false},
		{"bot: decide", bot, bus.ApprovalAPI("acme", tok("bob"), bus.OpDecide), false},
		{"reviewer: decide as itself", rita, bus.ApprovalAPI("acme", tok("rita"), bus.OpDecide), true},
		{"reviewer: decide as another", rita, bus.ApprovalAPI("acme", tok("bob"), bus.OpDecide), false},
		{"reviewer: decide for another tenant", rita, bus.ApprovalAPI("initech", tok("bob"), bus.OpDecide), false},
		{"operator: request in any tenant", olga, bus.RequestSubject("initech", session, "bob"), true},
		{"operator: decide in any tenant", olga, bus.ApprovalAPI("initech", tok("bob"), bus.OpDecide), true},
		{"user: events", ada, "events.acme." + session.String() + ".session.stopped.harness", false},
		{"user: tool calls", ada, bus.ToolSubject(bus.ServiceSandbox, "acme", session), false},
		{"user: a service's durable consumer", ada, "$JS.API.CONSUMER.MSG.NEXT.EVENTS." + bus.ConsumerHarnessSteps, false},
		{"user: batched direct get", ada, "$JS.API.DIRECT.GET.EVENTS", false},
		{"user: stream info", ada, "$JS.API.STREAM.INFO.EVENTS", false},
		{"user: the auth callout", ada, Subject, false},
		{"bot: its tenant's Slack threads", bot, "$KV.slack.acme.thread." + session.String(), true},
		{"reviewer: its tenant's Slack threads", rita, "$KV.slack.acme.thread." + session.String(), true},
		{"bot: another tenant's Slack threads", bot, "$KV.slack.initech.thread." + session.String(), false},
		{"bot: Slack threads of no tenant", bot, "$KV.slack.thread.acme." + session.String(), false},
		{"user: Slack threads", ada, "$KV.slack.acme.thread." + session.String(), false},
		{"bot: read another tenant's Slack threads", bot, "$JS.API.DIRECT.GET.KV_slack.$KV.slack.initech.>", false},
		{"bot: a consumer of another tenant's Slack threads", bot, "$JS.API.CONSUMER.CREATE.KV_slack.x.$KV.slack.initech.>", false},
		{"bot: the Slack bucket's stream", bot, "$JS.API.STREAM.PURGE.KV_slack", false},
		{"user: own uploads", ada, bus.UploadSubject("acme", tok("ada"), blob, 0), true},
		{"user: another user's uploads", ada, bus.UploadSubject("acme", tok("bob"), blob, 0), false},
		{"user: another tenant's uploads", ada, bus.UploadSubject("initech", tok("ada"), blob, 0), false},
		{"user: read own uploads", ada, "$JS.API.DIRECT.GET.UPLOADS." + bus.UploadSubject("acme", tok("ada"), blob, 0), true},
		{"user: read another user's uploads", ada, "$JS.API.DIRECT.GET.UPLOADS." + bus.UploadSubject("acme", tok("bob"), blob, 0), false},
		{"user: read another tenant's uploads", ada, "$JS.API.DIRECT.GET.UPLOADS." + bus.UploadSubject("initech", tok("ada"), blob, 0), false},
		{"user: batched read of uploads", ada, "$JS.API.DIRECT.GET.UPLOADS", false},
		{"user: uploads' stream info", ada, "$JS.API.STREAM.INFO.UPLOADS", false},
		{"bot: any user's uploads", bot, bus.UploadSubject("acme", tok("bob"), blob, 0), true},
		{"bot: read any user's uploads", bot, "$JS.API.DIRECT.GET.UPLOADS." + bus.UploadSubject("acme", tok("bob"), blob, 0), true},
		{"bot: another tenant's uploads", bot, bus.UploadSubject("initech", tok("bob"), blob, 0), false},
		{"bot: read another tenant's uploads", bot, "$JS.API.DIRECT.GET.UPLOADS." + bus.UploadSubject("initech", tok("bob"), blob, 0), false},
	}
	for _, tc := range publish {
		t.Run(tc.name, func(t *testing.T) {
			err := p.mayPublish(t, tc.c, tc.subject)
			if got := err == nil; got != tc.ok {
				t.Errorf("publish to %s: %v, want allowed = %v", tc.subject, err, tc.ok)
			}
		})
	}

	t.Run("request acknowledged", func(t *testing.T) {
		if _, err := adaJS.Publish(ctx, bus.RequestSubject("acme", session, "ada"), []byte("{}")); err != nil {
			t.Fatalf("publish own request: %v", err)
		}
	})

	t.Run("inboxes", func(t *testing.T) {
		all, err := ada.SubscribeSync("_INBOX.>")
		if err != nil {
			t.Fatal(err)
		}
		own, err := ada.SubscribeSync(credential.Inbox(ada.Opts.User) + ".>")
		if err != nil {
			t.Fatal(err)
		}
		if err := ada.Flush(); err != nil {
			t.Fatal(err)
		}
		natstest.WaitFor(t, 5*time.Second, func() error {
			if _, err := all.NextMsg(10 * time.Millisecond); !errors.Is(err, nats.ErrPermissionViolation) {
				return fmt.Errorf("subscribe _INBOX.>: %v, want %v", err, nats.ErrPermissionViolation)
			}
			return nil
		})
		// Answers come to its own inbox.
		if err := ada.PublishRequest("$JS.API.DIRECT.GET.EVENTS.events.acme."+uuid.NewString()+".session.requested.harness", credential.Inbox(ada.Opts.User)+".x", nil); err != nil {
			t.Fatal(err)
		}
		if _, err := own.NextMsg(5 * time.Second); err != nil {
			t.Errorf("own inbox: %v", err)
		}
	})

	// A session's log, as the CLI reads it: an ordered consumer whose
	// create subject names its one filter.
	events := "events.acme." + session.String() + ".>"
	if _, err := p.js.Publish(ctx, "events.acme."+session.String()+".session.requested.harness", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	t.Run("own session's log", func(t *testing.T) {
		cons, err := adaJS.OrderedConsumer(ctx, bus.StreamEvents, jetstream.OrderedConsumerConfig{FilterSubjects: []string{events}})
		if err != nil {
			t.Fatalf("ordered consumer: %v", err)
		}
		m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatalf("next: %v", err)
		}
		if got, want := m.Subject(), "events.acme."+session.String()+".session.requested.harness"; got != want {
			t.Errorf("subject = %s, want %s", got, want)
		}
		msgs, err := bus.ReadByConsumer(ctx, adaJS, bus.StreamEvents, events, 0)
		if err != nil || len(msgs) != 1 {
			t.Errorf("read by consumer: %d messages, %v; want 1", len(msgs), err)
		}
	})
	refused := []struct {
		name    string
		filters []string
		subject string // the create subject refused
	}{
		{"another tenant's log", []string{"events.initech.>"}, "$JS.API.CONSUMER.CREATE.EVENTS.*"},
		{"two filters", []string{events, "events.acme.x.>"}, "$JS.API.CONSUMER.CREATE.EVENTS.*"},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			began := time.Now()
			_, err := adaJS.OrderedConsumer(ctx, bus.StreamEvents, jetstream.OrderedConsumerConfig{FilterSubjects: tc.filters})
			t.Logf("ordered consumer on %v: %v after %s", tc.filters, err, time.Since(began).Round(time.Millisecond))
			if err == nil {
				t.Fatal("created")
			}
			if err := ada.refusal(tc.subject, 5*time.Second); err != nil {
				t.Error(err)
			}
		})
	}
	t.Run("stream info", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		began := time.Now()
		_, err := adaJS.Stream(ctx, bus.StreamEvents)
		t.Logf("stream info: %v after %s", err, time.Since(began).Round(time.Millisecond))
		if err == nil {
			t.Fatal("stream info given")
		}
	})
}

// TestRepliesStayInTheirTenant checks that a client cannot have the
// server publish, as the answer to a request of its own, on a subject of
// another tenant's: the server checks no permission on a reply subject,
// and a stream stores whatever is published on its subjects. Clients are
// in an account of their own, importing what they may publish from the
// services' account: an answer goes back to the client's account only,
// where no stream is, and is not passed on through its imports.
func TestRepliesStayInTheirTenant(t *testing.T) {
	p := start(t, DefaultTTL)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cred, secret := p.issue(t, "acme", "ada", credential.RoleUser)
	c := p.mustConnect(t, cred.ID, secret)
	js, err := jetstream.New(c.Conn)
	if err != nil {
		t.Fatal(err)
	}
	session, victim := uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
	own := bus.RequestSubject("acme", session, "ada")
	forged := fmt.Sprintf(`{"type":%q,"id":%q,"tenant":"initech","session":%q,"user":"victim","prompt":"hi"}`, event.TypeRequest, uuid.Must(uuid.NewV7()), victim)
	if _, err := js.Publish(ctx, own, []byte(forged)); err != nil {
		t.Fatal(err)
	}
	events := "events.acme." + session.String() + ".>"

	tests := []struct {
		name, subject string
		data          []byte
		target        string
	}{
		{"direct get to a request", "$JS.API.DIRECT.GET.REQUESTS." + own, nil, bus.RequestSubject("initech", victim, "victim")},
		{"direct get to an event", "$JS.API.DIRECT.GET.REQUESTS." + own, nil, "events.initech." + victim.String() + ".session.completed.harness"},
		{"publish acknowledgement", own, []byte(forged), bus.RequestSubject("initech", victim, "bob")},
		{"consumer created", "$JS.API.CONSUMER.CREATE.EVENTS.x." + events,
			fmt.Appendf(nil, `{"stream_name":"EVENTS","config":{"name":"x","filter_subject":%q,"ack_policy":"none"}}`, events),
			"events.initech." + victim.String() + ".session.failed.harness"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := c.PublishMsg(&nats.Msg{Subject: tc.subject, Reply: tc.target, Data: tc.data}); err != nil {
				t.Fatal(err)
			}
			if err := c.Flush(); err != nil {
				t.Fatal(err)
			}
			stream := bus.StreamRequests
			if strings.HasPrefix(tc.target, "events.") {
				stream = bus.StreamEvents
			}
			s, err := p.js.Stream(ctx, stream)
			if err != nil {
				t.Fatal(err)
			}
			// Absence cannot be awaited: give the answer a while to land.
			for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
				info, err := s.Info(ctx, jetstream.WithSubjectFilter(tc.target))
				if err != nil {
					t.Fatal(err)
				}
				if n := info.State.Subjects[tc.target]; n != 0 {
					t.Fatalf("%d messages stored on %s", n, tc.target)
				}
			}
		})
	}
}

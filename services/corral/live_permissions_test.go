package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/credential"
	"corral.dev/pkg/credentialtest"
	"corral.dev/pkg/natstest"
)

// TestLiveSubjectsPerTenant checks, under deploy/nats.conf, who hears and
// who says a session's live output (core live.<tenant>.<session>): the
// harness and the sandbox-manager publish it, across the accounts, to
// clients of the session's tenant; a client of another tenant may not
// subscribe to it, nor to every tenant's; no client and no other service
// may publish it; and the sandbox-manager still may not publish a session
// event it does not write.
func TestLiveSubjectsPerTenant(t *testing.T) {
	url, seed := startDeployedServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin, _ := connectAs(t, url, credential.UserAdmin)
	if err := bus.Setup(ctx, admin); err != nil {
		t.Fatal(err)
	}
	startAuth(t, url, seed)
	client := func(tenant, user string, role credential.Role) (*nats.Conn, *violations) {
		t.Helper()
		c, secret := credentialtest.Issue(t, admin, tenant, user, role)
		js, v := connectWith(t, url, c.ID, secret)
		return js.Conn(), v
	}
	ada, adaV := client("acme", "ada", credential.RoleUser)
	bot, _ := client("acme", "bridge", credential.RoleBot)
	eve, eveV := client("initech", "eve", credential.RoleUser)
	hjs, hv := connectAs(t, url, credential.UserHarness)
	sjs, sv := connectAs(t, url, credential.UserSandbox)
	mjs, mv := connectAs(t, url, credential.UserMemory)

	subscribe := func(nc *nats.Conn, subject string) *nats.Subscription {
		t.Helper()
		sub, err := nc.SubscribeSync(subject)
		if err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		return sub
	}
	acmeSession, initechSession := uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
	adaHears := subscribe(ada, bus.LiveFilter("acme"))
	botHears := subscribe(bot, bus.LiveSubject("acme", acmeSession))
	eveHears := subscribe(eve, bus.LiveFilter("initech"))
	// Refused: another tenant's session, and every tenant's.
	eveSnoops := subscribe(eve, bus.LiveSubject("acme", acmeSession))
	adaSnoops := subscribe(ada, "live.>")
	natstest.WaitFor(t, 5*time.Second, func() error {
		if !eveV.seen(bus.LiveSubject("acme", acmeSession)) || !adaV.seen("live.>") {
			return fmt.Errorf("no violation reported yet for the subscriptions to another tenant's live output: %v %v", eveV.all(), adaV.all())
		}
		return nil
	})

	publish := func(nc *nats.Conn, subject, text string) {
		t.Helper()
		if err := nc.Publish(subject, []byte(text)); err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	publish(hjs.Conn(), bus.LiveSubject("acme", acmeSession), "acme's text")
	publish(sjs.Conn(), bus.LiveSubject("acme", acmeSession), "acme's output")
	publish(hjs.Conn(), bus.LiveSubject("initech", initechSession), "initech's text")
	// Refused: live output from a service that runs nothing live, and
	// from clients.
	publish(mjs.Conn(), bus.LiveSubject("acme", acmeSession), "forged by memory")
	publish(eve, bus.LiveSubject("acme", acmeSession), "forged by eve")
	publish(ada, bus.LiveSubject("acme", acmeSession), "forged by ada")

	hears := func(who string, sub *nats.Subscription, want ...string) {
		t.Helper()
		for _, w := range want {
			m, err := sub.NextMsg(5 * time.Second)
			if err != nil {
				t.Errorf("%s: waiting for %q: %v", who, w, err)
				return
			}
			if string(m.Data) != w {
				t.Errorf("%s heard %q on %s, want %q", who, m.Data, m.Subject, w)
			}
		}
		if m, err := sub.NextMsg(200 * time.Millisecond); err == nil {
			t.Errorf("%s heard %q on %s, beyond %q", who, m.Data, m.Subject, want)
		}
	}
	hears("ada", adaHears, "acme's text", "acme's output")
	hears("acme's bot", botHears, "acme's text", "acme's output")
	hears("eve", eveHears, "initech's text")
	for who, sub := range map[string]*nats.Subscription{"eve's subscription to acme": eveSnoops, "ada's subscription to every tenant": adaSnoops} {
		if m, err := sub.NextMsg(100 * time.Millisecond); err == nil {
			t.Errorf("%s heard %q on %s", who, m.Data, m.Subject)
		}
	}
	natstest.WaitFor(t, 5*time.Second, func() error {
		if !mv.seen(bus.LiveSubject("acme", acmeSession)) || !eveV.seen("Publish") {
			return fmt.Errorf("no violation reported yet for the forged live output: %v %v", mv.all(), eveV.all())
		}
		return nil
	})
	for who, v := range map[string]*violations{"harness": hv, "sandbox-manager": sv} {
		if errs := v.all(); len(errs) > 0 {
			t.Errorf("%s hit permission violations publishing live output: %v", who, errs)
		}
	}

	// Live output is no session event: the sandbox-manager still may not
	// publish one it does not write.
	pctx, pcancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer pcancel()
	forged := "events.acme." + acmeSession.String() + ".model.responded.harness"
	if _, err := sjs.Publish(pctx, forged, []byte("{}")); err == nil {
		t.Errorf("the sandbox-manager published on %s", forged)
	}
	natstest.WaitFor(t, 5*time.Second, func() error {
		if !sv.seen(forged) {
			return fmt.Errorf("no violation reported for the sandbox-manager's %s", forged)
		}
		return nil
	})
}

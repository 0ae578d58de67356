package main

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/natstest"
)

// Under deploy/nats.conf, the approval service's sessions console hears
// the sessions' output and sends stops on the console's request subject;
// it publishes no request on a user's subject (a prompt as that user),
// reads no one's requests, and writes no stop (nor any other event but its
// decisions) into a session's log itself.
func TestDeployedConsolePermissions(t *testing.T) {
	url, _ := startDeployedServer(t)
	ajs, av := connectAs(t, url, "approval")
	hjs, _ := connectAs(t, url, "harness")
	session := uuid.Must(uuid.NewV7())

	heard := make(chan *nats.Msg, 1)
	sub, err := ajs.Conn().ChanSubscribe(bus.LiveSubject("acme", session), heard)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := ajs.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	if err := hjs.Conn().Publish(bus.LiveSubject("acme", session), []byte(`{"kind":"text","text":"hi"}`)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-heard:
	case <-time.After(5 * time.Second):
		t.Error("the approval service did not hear a session's output")
	}

	stop := bus.ConsoleStopSubject("acme", session)
	if err := ajs.Conn().Publish(stop, []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	forbidden := []string{"events.acme." + session.String() + ".session.stopped.harness", "events.acme." + session.String() + ".session.stopped.approval",
		bus.RequestSubject("acme", session, "ada")}
	for _, subject := range forbidden {
		_ = ajs.Conn().Publish(subject, []byte(`{}`))
	}
	if _, err := ajs.Conn().SubscribeSync("requests.>"); err != nil {
		t.Fatal(err)
	}
	_ = ajs.Conn().Flush()
	for _, subject := range append(forbidden, "requests.>") {
		natstest.WaitFor(t, 5*time.Second, func() error {
			if !av.seen(subject) {
				return fmt.Errorf("no permission violation reported for %s", subject)
			}
			return nil
		})
	}
	if av.seen(stop) || av.seen("live.acme") {
		t.Errorf("the approval service was refused a stop or a session's output: %v", av.all())
	}
}

package natstest

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// Request sends data on subject and returns the reply. A service that
// has not yet added its endpoints has no responders: Request asks again
// for up to 5 seconds. Any other failure fails the test.
func Request(t testing.TB, nc *nats.Conn, subject string, data []byte) *nats.Msg {
	t.Helper()
	var msg *nats.Msg
	var err error
	WaitFor(t, 5*time.Second, func() error {
		msg, err = nc.Request(subject, data, 5*time.Second)
		if errors.Is(err, nats.ErrNoResponders) {
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatalf("request on %s: %v", subject, err)
	}
	return msg
}

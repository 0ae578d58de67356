package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"corral.dev/pkg/bus"
)

// serviceError is an error a service's API answered with: its code
// (Nats-Service-Error-Code) and description.
type serviceError struct {
	code, desc string
}

func (e *serviceError) Error() string { return e.desc }

// callAPI sends req to a service's API at subject on c's connection, as
// the key's client, and decodes the answer into resp. A refusal of the
// server's permissions wraps [bus.ErrRefused]; an error the service
// answers with is a [*serviceError].
func callAPI(ctx context.Context, c *caller, subject string, req, resp any) error {
	data, err := json.Marshal(req)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	ctx, stop := bus.WhilePermitted(ctx, c.nc, subject)
	defer stop()
	msg, err := c.nc.RequestWithContext(ctx, subject, data)
	// A service that is (re)starting answers soon.
	for wait := 100 * time.Millisecond; errors.Is(err, nats.ErrNoResponders) && wait < 5*time.Second; wait *= 2 {
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
		msg, err = c.nc.RequestWithContext(ctx, subject, data)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", subject, bus.Refusal(ctx, err))
	}
	if desc := msg.Header.Get("Nats-Service-Error"); desc != "" {
		return &serviceError{msg.Header.Get("Nats-Service-Error-Code"), desc}
	}
	return json.Unmarshal(msg.Data, resp)
}

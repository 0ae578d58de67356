package bus

import (
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
)

// DrainTimeout bounds how long [Drain] waits for a connection to drain.
const DrainTimeout = 10 * time.Second

// Drain drains nc and waits until it is closed: the messages its
// subscriptions hold handled, and what it published flushed to the
// server. nats.Conn.Drain only starts that; a process that returned then
// would cut it short. A drain that takes longer than timeout is cut
// short by closing nc, and reported. A closed nc drains at once.
func Drain(nc *nats.Conn, timeout time.Duration) error {
	closed := nc.StatusChanged(nats.CLOSED)
	defer nc.RemoveStatusListener(closed)
	if err := nc.Drain(); err != nil {
		if errors.Is(err, nats.ErrConnectionClosed) {
			return nil
		}
		nc.Close()
		return fmt.Errorf("drain %s: %w", nc.Opts.Name, err)
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-closed:
		return nil
	case <-t.C:
		nc.Close()
		return fmt.Errorf("drain %s: not done after %s", nc.Opts.Name, timeout)
	}
}

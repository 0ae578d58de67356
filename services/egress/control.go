package egress

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"corral.dev/pkg/egressapi"
	"corral.dev/pkg/event"
)

// controlTimeout bounds one exchange on the control socket.
const controlTimeout = 10 * time.Second

// settleTimeout bounds how long a drain waits for the sandbox's last
// connections to end and be recorded.
const settleTimeout = time.Second

// serveControl answers the sandbox-manager on the control socket until
// ctx ends. The socket is the sandbox-manager's alone (0600, or 0660 for
// a group both services share, in a directory no sandbox sees): whoever
// may connect to it says whom every sandbox speaks for.
func (s *Service) serveControl(ctx context.Context) error {
	path := filepath.Join(s.cfg.Dir, controlName)
	_ = os.Remove(path)
	l, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("control socket: %w", err)
	}
	if err := os.Chmod(path, s.cfg.ControlMode); err != nil {
		l.Close()
		return err
	}
	stop := context.AfterFunc(ctx, func() { l.Close() })
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("control socket: %w", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(controlTimeout))
			reply := s.control(ctx, c)
			_ = json.NewEncoder(c).Encode(reply)
		}()
	}
}

// control answers the one request read from c.
func (s *Service) control(ctx context.Context, c net.Conn) egressapi.Reply {
	line, err := bufio.NewReaderSize(c, 4<<10).ReadSlice('\n')
	if err != nil {
		return egressapi.Reply{Error: fmt.Sprintf("read request: %v", err)}
	}
	var req egressapi.Request
	if err := json.Unmarshal(line, &req); err != nil {
		return egressapi.Reply{Error: fmt.Sprintf("malformed request: %v", err)}
	}
	id := req.Identity
	if err := event.CheckTenant(id.Tenant); err != nil {
		return egressapi.Reply{Error: err.Error()}
	}
	switch req.Op {
	case egressapi.OpOpen:
		// What its environment allows, read before its socket serves.
		if err := s.envs.load(ctx, id); err != nil {
			return egressapi.Reply{Error: fmt.Sprintf("open sandbox of session %s: %v", id.Session, err)}
		}
		if id.Fetch == "" && !s.cfg.Policy.Networked(id.Tenant) && !s.envs.any(id) {
			return egressapi.Reply{}
		}
		dir, err := s.boxes.openSandbox(id)
		if err != nil {
			return egressapi.Reply{Error: fmt.Sprintf("open sandbox of session %s: %v", id.Session, err)}
		}
		s.log.DebugContext(ctx, "sandbox opened", "tenant", id.Tenant, "session", id.Session, "user", id.User)
		return egressapi.Reply{Network: true, Dir: dir}
	case egressapi.OpDrain:
		s.boxes.settle(id.Tenant, id.Session, settleTimeout)
		return egressapi.Reply{Summary: s.audit.drain(id.Tenant, id.Session)}
	case egressapi.OpClose:
		s.audit.forget(id.Tenant, id.Session)
		s.envs.forget(sessionKey{id.Tenant, id.Session})
		if err := s.boxes.closeSandbox(id.Tenant, id.Session); err != nil {
			return egressapi.Reply{Error: fmt.Sprintf("close sandbox of session %s: %v", id.Session, err)}
		}
		return egressapi.Reply{}
	}
	return egressapi.Reply{Error: fmt.Sprintf("unknown operation %q: want open, drain or close", req.Op)}
}

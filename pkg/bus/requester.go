package bus

import (
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// RequestInfoHeader is the header in which the server records who sent a
// request that came into an account through one of its imports. The
// server writes it, replacing any a client wrote, and JetStream removes it
// from every message it stores, so no stored message can carry one.
const RequestInfoHeader = "Nats-Request-Info"

// FromAccount checks that a request with headers h came into the
// receiver's account through an import from account: that the server, not
// its body, says so. A request without the server's record was published
// in the receiver's own account: either by one of its users, or by the
// server itself answering one of them on a subject it chose (within an
// account the JetStream API answers on any reply subject, with the stored
// messages a user asks for), so a service of that account could have
// written it.
func FromAccount(h nats.Header, account string) error {
	v := h.Values(RequestInfoHeader)
	if len(v) != 1 {
		return fmt.Errorf("the request did not come from account %s: the server recorded no sender", account)
	}
	var info struct {
		Account string `json:"acc"`
	}
	if err := json.Unmarshal([]byte(v[0]), &info); err != nil {
		return fmt.Errorf("the request's %s header: %w", RequestInfoHeader, err)
	}
	if info.Account != account {
		return fmt.Errorf("the request came from account %q, not %s", info.Account, account)
	}
	return nil
}

// Admit answers r with a refusal, and returns why, unless it came from
// account through its imports ([FromAccount]). An empty account admits
// every request: for tests on a server without accounts.
func Admit(r micro.Request, account string) error {
	if account == "" {
		return nil
	}
	err := FromAccount(nats.Header(r.Headers()), account)
	if err != nil {
		_ = r.Error("403", "refused: "+err.Error(), nil)
	}
	return err
}

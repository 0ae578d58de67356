package auth

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
)

// The consumer gate. A client's request to create a consumer
// ($JS.API.CONSUMER.CREATE.<stream>.<name>[.<filter>], which its
// permissions let it send only with a filter of its tenant) reaches the
// services' account on [bus.ConsumerGate]+<stream>.<name>[.<filter>],
// with the server's record of who sent it. The gate creates the consumer
// on the same subject if the client may have one more on that stream,
// and answers with JetStream's answer:
//
//   - only a pull consumer: a push consumer's deliveries go to a subject
//     its creator chose, in the services' account;
//   - one that the server deletes after ConsumerIdle unused at the most;
//   - at most MaxConsumers of a credential's on a stream at once, counted
//     from the stream's consumers, each marked with its credential
//     ([OwnerKey] in its metadata): every instance of the auth service
//     counts the same.
//
// A refusal is a JetStream API error, which every client shows as it
// shows the server's own.

// OwnerKey is the metadata key of a client's consumer naming the
// credential that created it.
const OwnerKey = "corral.credential"

// createRequest is the body of a JetStream request to create a consumer.
type createRequest struct {
	Stream string                   `json:"stream_name"`
	Config jetstream.ConsumerConfig `json:"config"`
	Action string                   `json:"action,omitempty"`
}

// apiError is a JetStream API error as clients decode it.
type apiError struct {
	Type  string `json:"type"`
	Error struct {
		Code        int    `json:"code"`
		ErrCode     int    `json:"err_code,omitempty"`
		Description string `json:"description"`
	} `json:"error"`
}

// gate answers a client's request to create a consumer.
func (s *Service) gate(ctx context.Context, m *nats.Msg) {
	ctx, cancel := context.WithTimeout(ctx, answerTimeout)
	defer cancel()
	tail := strings.TrimPrefix(m.Subject, bus.ConsumerGate)
	stream, name, _ := strings.Cut(tail, ".")
	name, _, _ = strings.Cut(name, ".")
	log := s.log.With("subject", m.Subject)
	req, code, err := s.admit(ctx, m, stream, name)
	if err != nil {
		log.InfoContext(ctx, "consumer refused", "err", err)
		s.gated.WithLabelValues("refused").Inc()
		refuse(m, code, err)
		return
	}
	body, err := json.Marshal(req)
	if err != nil {
		refuse(m, 500, err)
		return
	}
	resp, err := s.nc.RequestWithContext(ctx, bus.ConsumerCreate+tail, body)
	if err != nil {
		log.WarnContext(ctx, "consumer create", "err", err)
		refuse(m, 503, fmt.Errorf("create the consumer: %w", err))
		return
	}
	s.gated.WithLabelValues("created").Inc()
	_ = m.Respond(resp.Data)
}

// admit checks the request in m to create consumer name on stream, and
// returns it bounded, its owner named; or an error, with the API code to
// answer it with, when the client may not have it.
func (s *Service) admit(ctx context.Context, m *nats.Msg, stream, name string) (*createRequest, int, error) {
	owner, err := requester(m.Header, s.cfg.Account)
	if err != nil {
		return nil, 403, err
	}
	var req createRequest
	if err := json.Unmarshal(m.Data, &req); err != nil {
		return nil, 400, fmt.Errorf("malformed request to create a consumer: %w", err)
	}
	c := &req.Config
	switch {
	case req.Stream != "" && req.Stream != stream:
		return nil, 400, fmt.Errorf("the request names stream %q, its subject %q", req.Stream, stream)
	case c.DeliverSubject != "":
		return nil, 403, errors.New("a client may create only pull consumers: this one delivers to a subject (deliver_subject)")
	case c.Durable != "" && c.Durable != name, c.Name != "" && c.Name != name:
		return nil, 400, fmt.Errorf("the request's consumer name differs from its subject's %q", name)
	}
	if c.InactiveThreshold <= 0 || c.InactiveThreshold > s.cfg.ConsumerIdle {
		c.InactiveThreshold = s.cfg.ConsumerIdle
	}
	if c.Metadata == nil {
		c.Metadata = map[string]string{}
	}
	c.Metadata[OwnerKey] = owner
	mine, exists, err := s.consumersOf(ctx, stream, owner, name)
	if err != nil {
		return nil, 503, fmt.Errorf("count this credential's consumers: %w", err)
	}
	if !exists && mine >= s.cfg.MaxConsumers {
		return nil, 429, fmt.Errorf("this credential has %d consumers on %s, the most it may have: delete one, or let one go unused for %s and the server deletes it", mine, stream, s.cfg.ConsumerIdle)
	}
	return &req, 0, nil
}

// consumersOf counts owner's consumers on stream, and reports whether
// one named name is among them (creating it again changes it: it adds
// none). Another's consumer of that name is not owner's to change.
func (s *Service) consumersOf(ctx context.Context, stream, owner, name string) (mine int, exists bool, err error) {
	for offset := 0; ; {
		req, _ := json.Marshal(map[string]int{"offset": offset})
		msg, err := s.nc.RequestWithContext(ctx, "$JS.API.CONSUMER.LIST."+stream, req)
		if err != nil {
			return 0, false, err
		}
		var page struct {
			Total     int `json:"total"`
			Limit     int `json:"limit"`
			Consumers []struct {
				Name   string `json:"name"`
				Config struct {
					Metadata map[string]string `json:"metadata"`
				} `json:"config"`
			} `json:"consumers"`
			Error *struct {
				Description string `json:"description"`
			} `json:"error"`
		}
		if err := json.Unmarshal(msg.Data, &page); err != nil {
			return 0, false, err
		}
		if page.Error != nil {
			return 0, false, errors.New(page.Error.Description)
		}
		for _, c := range page.Consumers {
			if c.Config.Metadata[OwnerKey] != owner {
				if c.Name == name {
					return 0, false, fmt.Errorf("consumer %s is not this credential's", name)
				}
				continue
			}
			mine++
			exists = exists || c.Name == name
		}
		offset += len(page.Consumers)
		if len(page.Consumers) == 0 || offset >= page.Total {
			return mine, exists, nil
		}
	}
}

// requester returns the user who sent a request that came from account
// through an import that shares who asks: the server's record, which no
// client writes.
func requester(h nats.Header, account string) (string, error) {
	if err := bus.FromAccount(h, account); err != nil {
		return "", err
	}
	var info struct {
		User    string `json:"user"`
		NameTag string `json:"name_tag"`
	}
	if err := json.Unmarshal([]byte(h.Get(bus.RequestInfoHeader)), &info); err != nil {
		return "", err
	}
	if u := cmp.Or(info.NameTag, info.User); u != "" {
		return u, nil
	}
	return "", errors.New("the server recorded no user for the request")
}

// refuse answers m with a JetStream API error.
func refuse(m *nats.Msg, code int, err error) {
	var e apiError
	e.Type = "io.nats.jetstream.api.v1.consumer_create_response"
	e.Error.Code, e.Error.Description = code, err.Error()
	b, _ := json.Marshal(&e)
	_ = m.Respond(b)
}

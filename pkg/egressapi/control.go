package egressapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// maxReply bounds one reply line: a drain's summary is the largest.
const maxReply = 16 << 20

// Client speaks the control protocol to the node's egress service: each
// call is one connection to its control socket, carrying one [Request]
// line and one [Reply] line. A Client holds no connection, so it is safe
// for concurrent use and needs no closing; its zero value with Socket set
// is ready.
type Client struct {
	// Socket is the path of the egress service's control socket.
	Socket string
}

// Open makes (or finds) the socket of id's sandbox ([OpOpen]) and returns
// the reply: whether the sandbox gets network and, if so, the directory
// to bind at [SandboxDir]. ctx bounds the whole exchange. An error names
// the operation and session, and carries the reply's Error when the
// service refused.
func (c *Client) Open(ctx context.Context, id Identity) (Reply, error) {
	r, err := c.do(ctx, OpOpen, id)
	if err != nil {
		return Reply{}, err
	}
	if r.Network && r.Dir == "" {
		return Reply{}, fmt.Errorf("egress %s of session %s: network without a directory", OpOpen, id.Session)
	}
	return r, nil
}

// Drain returns what id's sandbox sent since the last drain, and has the
// service forget it ([OpDrain]); nil when the service has nothing to say.
// ctx bounds the exchange; errors are as [Client.Open]'s.
func (c *Client) Drain(ctx context.Context, id Identity) (*Summary, error) {
	r, err := c.do(ctx, OpDrain, id)
	if err != nil {
		return nil, err
	}
	return r.Summary, nil
}

// Close removes the socket and directory of id's sandbox ([OpClose]).
// ctx bounds the exchange; errors are as [Client.Open]'s.
func (c *Client) Close(ctx context.Context, id Identity) error {
	_, err := c.do(ctx, OpClose, id)
	return err
}

// do sends one request and reads its reply; ctx ending (its deadline, or
// cancelling) ends a pending dial, read or write at once.
func (c *Client) do(ctx context.Context, op string, id Identity) (Reply, error) {
	fail := func(err error) (Reply, error) {
		if ctxErr := ctx.Err(); ctxErr != nil {
			err = ctxErr // what broke the exchange
		}
		return Reply{}, fmt.Errorf("egress %s of session %s: %w", op, id.Session, err)
	}
	var dialer net.Dialer
	conn, err := dialer.DialContext(ctx, "unix", c.Socket)
	if err != nil {
		return fail(err)
	}
	defer conn.Close()
	// Once ctx is done, pending reads and writes fail at once, and ctx
	// says why.
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	line, err := json.Marshal(Request{Op: op, Identity: id})
	if err != nil {
		return fail(err)
	}
	if _, err := conn.Write(append(line, '\n')); err != nil {
		return fail(err)
	}
	var r Reply
	dec := json.NewDecoder(io.LimitReader(conn, maxReply))
	if err := dec.Decode(&r); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF // closed without a reply
		}
		return fail(err)
	}
	if r.Error != "" {
		return Reply{}, fmt.Errorf("egress %s of session %s: %s", op, id.Session, r.Error)
	}
	return r, nil
}

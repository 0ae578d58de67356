package egressapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"corral.dev/pkg/egressapi"
	"corral.dev/pkg/natstest"
)

// controlServer serves the control protocol on a Unix socket, answering
// each request with the line answer returns ("" hangs up without one; hold
// keeps the connection open until the test ends), and records the
// requests it read.
type controlServer struct {
	socket string
	answer func(egressapi.Request) (line string, hold bool)
	mu     sync.Mutex
	got    []egressapi.Request
}

// serveControl starts a controlServer, stopped when the test ends.
func serveControl(t *testing.T, answer func(egressapi.Request) (line string, hold bool)) *controlServer {
	t.Helper()
	s := &controlServer{socket: filepath.Join(t.TempDir(), "control.sock"), answer: answer}
	ln, err := net.Listen("unix", s.socket)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	done := make(chan struct{})
	t.Cleanup(func() {
		close(done)
		ln.Close()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer conn.Close()
				var req egressapi.Request
				line, err := bufio.NewReader(conn).ReadBytes('\n')
				if err != nil || json.Unmarshal(line, &req) != nil {
					return
				}
				s.mu.Lock()
				s.got = append(s.got, req)
				s.mu.Unlock()
				answer, hold := s.answer(req)
				if hold {
					<-done
					return
				}
				conn.Write([]byte(answer))
			})
		}
	})
	return s
}

// reply is r as one line.
func reply(r egressapi.Reply) (line string, hold bool) {
	b, _ := json.Marshal(r)
	return string(b) + "\n", false
}

func (s *controlServer) requests() []egressapi.Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]egressapi.Request(nil), s.got...)
}

var who = egressapi.Identity{Tenant: "acme", User: "ada", Session: uuid.MustParse("11111111-1111-7111-8111-111111111111")}

func TestClientOperations(t *testing.T) {
	t.Parallel()
	summary := &egressapi.Summary{Requests: []egressapi.Traffic{{Scheme: "https", Host: "example.com", Port: 443, Method: "GET", Status: 200, Count: 2}}}
	s := serveControl(t, func(req egressapi.Request) (string, bool) {
		switch req.Op {
		case egressapi.OpOpen:
			return reply(egressapi.Reply{Network: true, Dir: "/run/egress/x"})
		case egressapi.OpDrain:
			return reply(egressapi.Reply{Summary: summary})
		}
		return reply(egressapi.Reply{})
	})
	c := &egressapi.Client{Socket: s.socket}
	ctx := t.Context()

	reply, err := c.Open(ctx, who)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if want := (egressapi.Reply{Network: true, Dir: "/run/egress/x"}); !reflect.DeepEqual(reply, want) {
		t.Errorf("Open = %+v, want %+v", reply, want)
	}
	got, err := c.Drain(ctx, who)
	if err != nil {
		t.Fatalf("Drain: %v", err)
	}
	if !reflect.DeepEqual(got, summary) {
		t.Errorf("Drain = %+v, want %+v", got, summary)
	}
	if err := c.Close(ctx, who); err != nil {
		t.Fatalf("Close: %v", err)
	}

	want := []egressapi.Request{{Op: egressapi.OpOpen, Identity: who}, {Op: egressapi.OpDrain, Identity: who}, {Op: egressapi.OpClose, Identity: who}}
	if got := s.requests(); !reflect.DeepEqual(got, want) {
		t.Errorf("server read %+v, want %+v", got, want)
	}
}

func TestClientErrors(t *testing.T) {
	t.Parallel()
	refusing := serveControl(t, func(egressapi.Request) (string, bool) {
		return reply(egressapi.Reply{Error: "unknown tenant acme"})
	})
	holding := serveControl(t, func(egressapi.Request) (string, bool) { return "", true })
	hangingUp := serveControl(t, func(egressapi.Request) (string, bool) { return "", false })
	garbled := serveControl(t, func(egressapi.Request) (string, bool) { return "{\"network\":\n", false })
	noDir := serveControl(t, func(egressapi.Request) (string, bool) { return reply(egressapi.Reply{Network: true}) })

	tests := []struct {
		name    string
		socket  string
		timeout time.Duration
		want    string // in the error
		is      error
	}{
		{"refused", refusing.socket, time.Minute, "egress open of session " + who.Session.String() + ": unknown tenant acme", nil},
		{"no socket", filepath.Join(t.TempDir(), "none.sock"), time.Minute, "no such file", nil},
		{"no answer", holding.socket, 50 * time.Millisecond, "egress open", context.DeadlineExceeded},
		{"hung up", hangingUp.socket, time.Minute, "egress open", io.ErrUnexpectedEOF},
		{"garbled", garbled.socket, time.Minute, "egress open", io.ErrUnexpectedEOF},
		{"network without dir", noDir.socket, time.Minute, "network without a directory", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(t.Context(), tc.timeout)
			defer cancel()
			start := time.Now()
			_, err := (&egressapi.Client{Socket: tc.socket}).Open(ctx, who)
			if err == nil {
				t.Fatal("Open: got nil error")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Open: got %q, want it to contain %q", err, tc.want)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("Open: got %v, want it to wrap %v", err, tc.is)
			}
			if took := time.Since(start); took > 10*time.Second {
				t.Errorf("Open took %s", took)
			}
		})
	}
}

// Cancelling the context ends a pending exchange at once.
func TestClientCancel(t *testing.T) {
	t.Parallel()
	s := serveControl(t, func(egressapi.Request) (string, bool) { return "", true })
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() { errc <- (&egressapi.Client{Socket: s.socket}).Close(ctx, who) }()
	// Cancelled once the server holds the request.
	natstest.WaitFor(t, 10*time.Second, func() error {
		if len(s.requests()) == 0 {
			return errors.New("the server read no request")
		}
		return nil
	})
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Close: got %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return once cancelled")
	}
}

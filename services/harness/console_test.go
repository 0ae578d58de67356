package harness

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/modeltest"
	"corral.dev/pkg/natstest"
)

// The sessions console's subject (requests.<tenant>.<session>.console,
// the approval service's alone) carries stops, recorded as by the person
// each names; a prompt sent there, or a stop naming no one, is refused and
// starts or stops nothing.
func TestConsoleSendsStopsAlone(t *testing.T) {
	asking, release := make(chan struct{}), make(chan struct{})
	_, _, js := natstest.Run(t)
	fake := modeltest.New(t, func(c modeltest.Conversation) (modeltest.Turn, error) {
		if modeltest.Turns(c) == 0 {
			close(asking)
			<-release
		}
		return modeltest.Turn{Text: "should not be seen"}, nil
	})
	runHarness(t, js, fake)
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free)
	ctx := context.Background()
	session := ask(t, js, "acme", "ada", uuid.Must(uuid.NewV7()), "", "go")
	select {
	case <-asking:
	case <-time.After(10 * time.Second):
		t.Fatal("the model was never asked")
	}

	// A prompt on the console's subject starts nothing; nor does a stop
	// that names no one stop anything.
	other := uuid.Must(uuid.NewV7())
	prompt := event.Request{Header: event.NewHeader(event.TypeRequest, "acme", other), User: "ada", Prompt: "as ada"}
	if err := bus.Publish(ctx, js, bus.ConsoleStopSubject("acme", other), prompt.ID.String(), &prompt); err != nil {
		t.Fatal(err)
	}
	anonymous := event.SessionStopped{Header: event.NewHeader(event.TypeSessionStopped, "acme", session)}
	if err := bus.Publish(ctx, js, bus.ConsoleStopSubject("acme", session), anonymous.ID.String(), &anonymous); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		msgs, err := bus.ReadAll(ctx, js, bus.StreamDeadLetter, "deadletter.>")
		if err != nil {
			return err
		}
		if len(msgs) != 2 {
			return fmt.Errorf("%d dead letters, want the prompt's and the anonymous stop's", len(msgs))
		}
		return nil
	})
	// Refused as any bad request is: recorded as the failure of the
	// session it would have started, which nothing started.
	evs := logOf(t, js, "acme", other)
	if len(ofType[*event.SessionRequested](evs)) != 0 {
		t.Errorf("a prompt on the console's subject started session %s", other)
	}
	if f := ofType[*event.SessionFailed](evs); len(f) != 1 || !strings.Contains(f[0].Reason, "the sessions console sends stops alone") {
		t.Errorf("the refused prompt is recorded as %+v, want a failure saying why", f)
	}
	if st := ofType[*event.SessionStopped](logOf(t, js, "acme", session)); len(st) != 0 {
		t.Errorf("a stop naming no one was recorded: %+v", st)
	}

	stop := event.SessionStopped{Header: event.NewHeader(event.TypeSessionStopped, "acme", session), By: "grace", Reason: "from the console"}
	if err := bus.Publish(ctx, js, bus.ConsoleStopSubject("acme", session), stop.ID.String(), &stop); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		st := ofType[*event.SessionStopped](logOf(t, js, "acme", session))
		if len(st) != 1 || st[0].By != "grace" || st[0].Reason != "from the console" {
			return fmt.Errorf("stops = %+v, want grace's", st)
		}
		return nil
	})
	free()
}

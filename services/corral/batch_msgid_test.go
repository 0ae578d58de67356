package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/credential"
	"corral.dev/pkg/credentialtest"
	"corral.dev/pkg/event"
	"corral.dev/pkg/natstest"
)

// A batch job's IDs are worked out from its tenant, batch and id, which
// others may know. A client of another tenant, or another user of the
// job's tenant, that sends first, on a request subject of its own, a
// request carrying the job's request ID as its message ID drops nothing:
// the job runs, once.
func TestBatchJobNotDroppedByAnothersMessageID(t *testing.T) {
	p := startDev(t, echoPrompt, nil)
	admin := p.adminJS(t)
	ctx := context.Background()
	file := writeJobs(t, `{"id": "fix-1", "prompt": "alpha"}`)
	for _, tc := range []struct{ name, tenant, user, batch string }{
		{"another tenant's client", "globex", "eve", "nightly-1"},
		{"another user of the tenant", "default", "mallory", "nightly-2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			session, request := jobSession("default", tc.batch, "fix-1")
			c, secret := credentialtest.Issue(t, admin, tc.tenant, tc.user, credential.RoleUser)
			js, v := connectWith(t, p.url, c.ID, secret)
			own := uuid.Must(uuid.NewV7())
			first := event.Request{Header: event.NewHeader(event.TypeRequest, tc.tenant, own), User: tc.user, Prompt: "first"}
			// The message IDs the job's request was, or could be,
			// published with.
			for _, id := range []string{request.String(), session.String()} {
				if err := bus.Publish(ctx, js, bus.RequestSubject(tc.tenant, own, tc.user), id, &first); err != nil {
					t.Fatalf("%s's request: %v", tc.name, err)
				}
			}
			if errs := v.all(); len(errs) > 0 {
				t.Fatalf("%s was refused: %v", tc.name, errs)
			}

			code, _, stderr := p.corral(t, "batch", "submit", "--no-wait", "--batch", tc.batch, file)
			if code != 0 || !strings.Contains(stderr, "1 jobs: 1 submitted now, 0 before") {
				t.Fatalf("submit: exit %d: %s", code, stderr)
			}
			natstest.WaitFor(t, 30*time.Second, func() error {
				code, stdout, stderr := p.corral(t, "batch", "status", "--batch", tc.batch, file)
				if code != 0 || !strings.Contains(stdout, "1 completed") {
					return fmt.Errorf("status: exit %d: %s%s", code, stdout, stderr)
				}
				return nil
			})
			if got := p.requestsRecorded(t, session)[session]; got != 1 {
				t.Errorf("the job's session recorded %d requests, want 1", got)
			}
			// Submitted again, while the job's session holds its
			// request, it starts nothing.
			code, _, stderr = p.corral(t, "batch", "submit", "--batch", tc.batch, file)
			if code != 0 || !strings.Contains(stderr, "1 jobs: 0 submitted now, 1 before") {
				t.Errorf("submit again: exit %d: %s", code, stderr)
			}
			if got := p.requestsRecorded(t, session)[session]; got != 1 {
				t.Errorf("submitted again, the job's session recorded %d requests, want 1", got)
			}
		})
	}
}

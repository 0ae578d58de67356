package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/credential"
	"corral.dev/pkg/event"
	"corral.dev/pkg/logtest"
	"corral.dev/pkg/modeltest"
	"corral.dev/pkg/natstest"
	"corral.dev/pkg/process"
	slackbridge "corral.dev/services/slack-bridge"
)

const clusterTenant = "cluster"

var sessionPrompt = regexp.MustCompile(`cluster session [0-9]+`)

// TestClusterLosesAServer runs the platform on a three-server NATS cluster
// configured by deploy/cluster (each service signed in as its own user),
// with every stream and bucket set up by `corral setup --replicas 3`. Many
// sessions start; while every one of them waits on the model between its
// two calls, the server leading the session logs is shut down. Every
// session completes, each of its calls having run exactly once.
func TestClusterLosesAServer(t *testing.T) {
	const sessions = 10
	for user, env := range natsUsers {
		t.Setenv(env, password(user))
	}
	_, issuer, err := credential.NewIssuer()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("CORRAL_AUTH_ISSUER", issuer)
	var files []string
	for i := 1; i <= 3; i++ {
		files = append(files, fmt.Sprintf("../../deploy/cluster/nats-%d.conf", i))
	}
	c := natstest.RunCluster(t, 3, files...)
	urls := c.URL()

	as := func(user string, env map[string]string) func(string) string {
		vars := map[string]string{"CORRAL_NATS_USER": user, "CORRAL_NATS_PASSWORD": password(user)}
		for k, v := range env {
			vars[k] = v
		}
		return func(k string) string { return vars[k] }
	}
	var out, errs logtest.Buffer
	if code := run(context.Background(), []string{"setup", "--nats", urls, "--replicas", "3"}, as("admin", nil), &out, &errs); code != 0 {
		t.Errorf("corral setup exited %d: %s", code, errs.String())
		if err := c.Whole(); err != nil {
			t.Logf("the cluster is not whole: %v", err)
		}
		t.FailNow()
	}
	checkReplicas(t, urls, 3)

	// Each session runs one call, waits on the model until the server is
	// gone, runs a second, and answers with what the second printed.
	fake := modeltest.New(t, steps(func(seen []string) string { return "log: " + seen[len(seen)-1] },
		bash("echo one >> log && cat log"), bash("echo two >> log && cat log")))
	var mu sync.Mutex
	waiting := map[string]bool{}
	killed := make(chan struct{})
	target, _ := url.Parse(fake.URL())
	proxy := httputil.NewSingleHostReverseProxy(target)
	gate := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		// The model is asked for the second call.
		if bytes.Contains(body, []byte("echo one")) && !bytes.Contains(body, []byte("echo two")) {
			mu.Lock()
			waiting[sessionPrompt.FindString(string(body))] = true
			mu.Unlock()
			select {
			case <-killed:
			case <-time.After(30 * time.Second):
			}
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(gate.Close)
	data := t.TempDir()
	env := map[string]string{
		"OPENAI_BASE_URL": gate.URL + "/v1", "OPENAI_API_KEY": "sk-test", "CORRAL_MODEL": "openai:gpt-test",
		"CORRAL_DATA_DIR": data, "CORRAL_SHUTDOWN_GRACE": "1s", "CORRAL_SANDBOX_SNAPSHOTS": "off",
	}
	maps.Copy(env, callKeys)
	ctx := context.Background()
	var logs logtest.Buffer
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("services' log:\n%s", logs.String())
		}
	})
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	// Each service takes the list of all three servers, as
	// CORRAL_NATS_URL gives it, and runs as it runs deployed.
	env["CORRAL_NATS_URL"] = urls
	for _, name := range []string{credential.UserHarness, credential.UserSandbox} {
		runComponents(t, process.Standalone(as(name, env), log), name)
	}

	// The test reads every session's log, as the administrator.
	nc, err := nats.Connect(urls, nats.UserInfo("admin", password("admin")), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]uuid.UUID, sessions)
	for i := range ids {
		ids[i] = uuid.Must(uuid.NewV7())
		req := event.Request{Header: event.NewHeader(event.TypeRequest, clusterTenant, ids[i]), User: "ada", Prompt: fmt.Sprintf("cluster session %d", i)}
		if err := bus.Publish(ctx, js, bus.RequestSubject(clusterTenant, ids[i], req.User), req.ID.String(), &req); err != nil {
			t.Fatal(err)
		}
	}
	natstest.WaitFor(t, 30*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(waiting) < sessions {
			return fmt.Errorf("%d of %d sessions wait on the model", len(waiting), sessions)
		}
		return nil
	})
	leader := c.Leader(bus.StreamEvents)
	if leader == nil {
		t.Fatal("the session logs have no leader")
	}
	t.Logf("shutting down %s, which leads the session logs", leader.Name())
	leader.Shutdown()
	leader.WaitForShutdown()
	close(killed)
	killedAt := time.Now()

	ends := map[uuid.UUID]event.Event{}
	natstest.WaitFor(t, 45*time.Second, func() error {
		rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
		defer rcancel()
		msgs, err := bus.ReadAll(rctx, js, bus.StreamEvents, fmt.Sprintf("events.%s.*.session.>", clusterTenant))
		if err != nil {
			return err
		}
		for _, m := range msgs {
			ev, err := event.Parse(m.Data)
			if err != nil {
				return err
			}
			switch ev := ev.(type) {
			case *event.SessionCompleted, *event.SessionFailed:
				ends[ev.(event.Event).Head().Session] = ev.(event.Event)
			}
		}
		if len(ends) < sessions {
			return fmt.Errorf("%d of %d sessions ended", len(ends), sessions)
		}
		return nil
	})
	t.Logf("every session ended %v after the shutdown", time.Since(killedAt).Round(time.Millisecond))
	for i, id := range ids {
		done, ok := ends[id].(*event.SessionCompleted)
		if !ok {
			t.Errorf("session %d: %+v, want it completed", i, ends[id])
			continue
		}
		if want := "log: one\ntwo\n"; done.Answer != want {
			t.Errorf("session %d: answer %q, want %q", i, done.Answer, want)
		}
		b, err := os.ReadFile(filepath.Join(data, "workspaces", clusterTenant, id.String(), "log"))
		if err != nil || string(b) != "one\ntwo\n" {
			t.Errorf("session %d: workspace log %q (%v), want each call run once", i, b, err)
		}
	}
}

// checkReplicas checks that every stream, KV bucket and object store on the
// cluster has n replicas.
func checkReplicas(t *testing.T, urls string, n int) {
	t.Helper()
	nc, err := nats.Connect(urls, nats.UserInfo("admin", password("admin")))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	names := js.StreamNames(ctx)
	var all []string
	for name := range names.Name() {
		all = append(all, name)
	}
	if err := names.Err(); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(all, "KV_"+slackbridge.Bucket) || !slices.Contains(all, bus.StreamEvents) {
		t.Errorf("streams %v lack the session logs or the Slack bridge's bucket", all)
	}
	for _, name := range all {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.CachedInfo().Config.Replicas; got != n {
			t.Errorf("%s: %d replicas, want %d", name, got, n)
		}
	}
}

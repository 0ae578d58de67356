package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/credential"
	"corral.dev/pkg/credentialtest"
	"corral.dev/pkg/event"
	"corral.dev/pkg/modeltest"
	"corral.dev/pkg/natstest"
	"corral.dev/pkg/sessionlog"
)

var (
	chaosSessions = flag.Int("chaos.sessions", 20, "TestChaos: sessions to run")
	chaosKills    = flag.Int("chaos.kills", 10, "TestChaos: processes to kill")
	chaosTimeout  = flag.Duration("chaos.timeout", 4*time.Minute, "TestChaos: how long every session may take to finish")
	chaosSeed     = flag.Uint64("chaos.seed", 0, "TestChaos: seed of the sessions' plans and the order of kills (0 picks one)")
	chaosDir      = flag.String("chaos.dir", "", "TestChaos: keep binaries, logs and state in this directory")
	chaosGolden   = flag.String("chaos.golden", "", "TestChaos: write each session's log to this directory, one event a line, as the session core's golden logs (services/harness/internal/core/testdata/golden)")
)

// The interrupted result of a Bash call the sandbox-manager will not run
// twice (services/sandbox-manager/toolcall.go). It starts the result, or
// a line of it after a note that the workspace was restored.
const interruptedPrefix = "The call was interrupted"

func isInterrupted(output string) bool {
	return strings.HasPrefix(output, interruptedPrefix) || strings.Contains(output, "\n"+interruptedPrefix)
}

// TestChaos runs many sessions against nats-server, a harness and a
// sandbox-manager as separate processes while it SIGKILLs them at random,
// and checks what Corral promises: every session finishes, no tool call is
// lost, none runs twice, and the model is asked again only for a response a
// crash kept from being recorded.
//
// It runs them as a deployment does: the server under deploy/nats.conf,
// its streams and buckets set up by the admin user, each service signed in
// as its own user with that user's permissions, and the sessions published
// by a client signed in with a user's credential of the chaos tenant,
// which the auth service (run in the test process) checks. A permission
// violation reported to anyone, or a service's sign-in refused, fails the
// test.
//
// The short form runs in CI; scripts/chaos.sh runs the long one.
func TestChaos(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		chaosSkip(t, "go is not on PATH: the chaos test builds the binaries")
	}
	if _, err := exec.LookPath("bwrap"); err != nil {
		chaosSkip(t, "bwrap is not on PATH: the sandbox-manager needs it")
	}
	seed := *chaosSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("chaos: seed %d (rerun with -args -chaos.seed=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed>>1))

	dir := *chaosDir
	if dir == "" {
		dir = t.TempDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	built := time.Now()
	bins := buildChaosBinaries(t, goBin, filepath.Join(dir, "bin"))
	t.Logf("chaos: built binaries in %v; state and logs in %s", time.Since(built).Round(time.Millisecond), dir)

	nSessions, nKills := *chaosSessions, *chaosKills
	model := newChaosModel(nSessions, rng)
	fake := modeltest.New(t, model.script)
	modelURL, gate := slowProxy(t, fake.URL())

	// The processes: the server under deploy/nats.conf (listening on a
	// free port, with its store in dir), each service signed in as its own
	// user.
	port := natstest.FreePort(t)
	natsURL := fmt.Sprintf("nats://127.0.0.1:%d", port)
	config := chaosServerConfig(t, dir)
	serverVars, issuerSeed := deployedServerEnv(t)
	serverEnv := os.Environ()
	for k, v := range serverVars {
		serverEnv = append(serverEnv, k+"="+v)
	}
	data := filepath.Join(dir, "data")
	env := append(os.Environ(),
		"CORRAL_NATS_URL="+natsURL,
		"CORRAL_DATA_DIR="+data,
		"OPENAI_BASE_URL="+modelURL+"/v1",
		"OPENAI_API_KEY=x",
		"CORRAL_MODEL=openai:chaos",
		"CORRAL_LOG_LEVEL=debug",
		"CORRAL_SHUTDOWN_GRACE=1s",
	)
	env = append(env, callKeyEnv()...)
	as := func(user string) []string {
		return append(slices.Clip(env), "CORRAL_NATS_USER="+user, "CORRAL_NATS_PASSWORD="+password(user))
	}
	procs := map[string]*chaosProc{
		compNATS: newChaosProc(t, dir, compNATS, bins[compNATS],
			[]string{"-c", config, "-a", "127.0.0.1", "-p", strconv.Itoa(port)}, serverEnv),
		compHarness: newChaosProc(t, dir, compHarness, bins[compHarness], nil, as(credential.UserHarness)),
		compSandbox: newChaosProc(t, dir, compSandbox, bins[compSandbox], nil, as(credential.UserSandbox)),
	}
	// Registered after the fake model's cleanup, so it runs before it.
	t.Cleanup(func() {
		var wg sync.WaitGroup
		for _, p := range procs {
			wg.Go(p.stop)
		}
		wg.Wait()
		// Nothing of the test's may outlive it.
		time.Sleep(orphanGrace)
		for _, o := range strayKill(dir) {
			t.Errorf("process %d outlived its stopped parent (killed now): %s", o.pid, oneLine(o.cmd, 300))
		}
	})
	authLog := filepath.Join(dir, "auth.log")
	t.Cleanup(func() {
		if t.Failed() {
			for _, name := range []string{compNATS, compHarness, compSandbox} {
				t.Logf("chaos: last lines of the %s log (%s):\n%s", name, procs[name].logPath, procs[name].tail(60))
			}
			t.Logf("chaos: the auth service's log is %s", authLog)
		}
	})
	procs[compNATS].start()
	// The administrator sets up the streams and buckets, as corral setup
	// does: the services may not create or change them.
	js, adminRefused := chaosConnect(t, natsURL, credential.UserAdmin, password(credential.UserAdmin))
	setupCtx, setupDone := context.WithTimeout(context.Background(), time.Minute)
	err = bus.Setup(setupCtx, js)
	setupDone()
	if err != nil {
		t.Fatal(err)
	}
	authRefused := startChaosAuth(t, natsURL, issuerSeed, authLog)
	cred, secret := credentialtest.Issue(t, js, chaosTenant, chaosUser, credential.RoleUser)
	client, clientRefused := chaosConnect(t, natsURL, cred.ID, secret)
	procs[compHarness].start()
	procs[compSandbox].start()
	// Each service is up, signed in, once its consumers exist.
	chaosRetry(t, 30*time.Second, func(ctx context.Context) error {
		for _, c := range chaosConsumers {
			if _, err := js.Consumer(ctx, c.stream, c.consumer); err != nil {
				return fmt.Errorf("consumer %s: %w", c.consumer, err)
			}
		}
		return nil
	})

	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), *chaosTimeout)
	defer cancel()

	// Kills come 1-5s apart: the harness's mostly while it waits on the
	// model, the sandbox-manager's mostly while it runs a call, the
	// server's at any moment or just as the harness gets an answer it will
	// record. Sessions start meanwhile.
	gap := func() time.Duration { return time.Second + rand.N(4*time.Second) }
	moment := map[string]func(context.Context){
		compHarness: mostly(whenTrue(gate.holding)),
		compSandbox: mostly(whenTrue(procs[compSandbox].runsCall)),
		compNATS:    gate.afterRelease,
	}
	killsDone := make(chan []chaosKill, 1)
	schedule := killSchedule(nKills, rng)
	go func() { killsDone <- killer(ctx, procs, moment, schedule, gap, dir) }()

	sessions := make([]uuid.UUID, nSessions)
	for i := range sessions {
		sessions[i] = uuid.Must(uuid.NewV7())
	}
	spread := time.Duration(nKills) * 3 * time.Second * 3 / 4
	published := make(chan error, 1)
	go func() { published <- publishSessions(ctx, client, clientRefused, sessions, spread) }()

	// Wait for every session to end, the kills to be made and the
	// sessions to be published.
	var kills []chaosKill
	var pubErr error
	killed, pubDone := false, false
	terminal := map[uuid.UUID]string{}
	for ctx.Err() == nil && pubErr == nil && !(killed && pubDone && len(terminal) == nSessions) {
		select {
		case kills = <-killsDone:
			killed = true
		case pubErr = <-published:
			pubDone = true
		case <-time.After(time.Second):
		}
		if ends, err := sessionEnds(ctx, js); err == nil {
			terminal = ends
		}
	}
	if !killed {
		kills = <-killsDone // it stops with ctx
	}
	elapsed := time.Since(start)
	if pubErr != nil {
		t.Errorf("publish requests: %v", pubErr)
	}
	allEnded := len(terminal) == nSessions
	if !allEnded {
		t.Errorf("after %v only %d of %d sessions ended; goroutine dumps of the services are in their logs", *chaosTimeout, len(terminal), nSessions)
		// Where are they stuck?
		procs[compHarness].dumpStacks()
		procs[compSandbox].dumpStacks()
	}

	// Let every component come back, and whatever is still in flight
	// settle, so that a late duplicate would show in the checks.
	chaosRetry(t, 30*time.Second, func(ctx context.Context) error {
		for name, p := range procs {
			if !p.up() {
				return fmt.Errorf("%s is down", name)
			}
		}
		return nil
	})
	settle := 60 * time.Second
	if !allEnded {
		settle = time.Second
	}
	if err := quiesce(js, settle); err != nil {
		t.Errorf("work left over after the sessions ended: %v", err)
	}

	r := checkChaos(t, js, model, sessions, data, kills)
	counts := map[string]int{}
	for _, k := range kills {
		counts[k.comp]++
	}
	if len(kills) < nKills {
		t.Errorf("made %d of %d kills", len(kills), nKills)
	}
	for _, k := range kills {
		for _, o := range k.strays {
			t.Errorf("process %d was left running after its parent died (found %v after the kill of the %s at %s; killed now): %s",
				o.pid, orphanGrace, k.comp, k.at.Format("15:04:05.000"), oneLine(o.cmd, 300))
		}
	}
	if nKills >= 6 {
		for _, c := range []string{compHarness, compSandbox, compNATS} {
			if counts[c] < 2 {
				t.Errorf("%s was killed %d times, want at least 2", c, counts[c])
			}
		}
	}
	// Everyone worked within the permissions deploy/nats.conf gives them.
	for name, v := range map[string]*violations{"admin": adminRefused, "auth": authRefused, "client": clientRefused} {
		if errs := v.all(); len(errs) > 0 {
			t.Errorf("the server refused the %s: %s", name, strings.Join(errs, "; "))
		}
	}
	for name, p := range procs {
		if refused := p.lines(violation); len(refused) > 0 {
			t.Errorf("%s: permission violations in its log: %s", name, strings.Join(refused, "; "))
		}
	}
	// A client signing in again after a restart of the server may come
	// before the auth service is back, and be refused (it tries again); a
	// service signs in with its password, and never is.
	clientSignIns := 0
	for _, l := range procs[compNATS].lines(signInRefused) {
		if credential.IsID(signInRefused.FindStringSubmatch(l)[1]) {
			clientSignIns++
		} else {
			t.Errorf("nats-server refused a service's sign-in: %s", oneLine(l, 300))
		}
	}
	for name, p := range procs {
		if exits := p.unexpectedExits(); len(exits) > 0 {
			t.Logf("chaos: %s exited %d times on its own (restarted): %s", name, len(exits), strings.Join(exits, "; "))
		}
		if crashes := p.crashes(); len(crashes) > 0 {
			t.Errorf("%s crashed: %s", name, strings.Join(crashes, "; "))
		}
	}
	t.Logf("chaos: sessions=%d completed=%d tool_calls=%d kills=%d (harness=%d sandbox-manager=%d nats-server=%d) "+
		"interrupted_calls=%d (with no sandbox-manager kill: %d) calls_without_dispatched_event=%d duplicate_model_answers=%d unexplained_duplicates=%d "+
		"refused_client_sign_ins=%d elapsed=%v",
		nSessions, r.completed, r.toolCalls, len(kills), counts[compHarness], counts[compSandbox], counts[compNATS],
		r.interrupted, r.interruptedAlive, r.undispatched, r.duplicates, r.unexplained, clientSignIns, elapsed.Round(time.Millisecond))
}

// deployedJetStream is deploy/nats.conf's jetstream block, which
// [chaosServerConfig] replaces.
var deployedJetStream = regexp.MustCompile(`(?m)^jetstream \{\s*store_dir: \S+\s*\}`)

// chaosServerConfig writes dir/nats.conf, deploy/nats.conf with its store
// in dir/nats, and returns its path. The flags -a and -p override the
// config's listen address, but nats-server refuses -sd beside a config's
// store_dir ("Duplicate 'store_dir' configuration"): the file includes
// deploy/nats.conf, unchanged, and replaces its jetstream block, which
// holds the store alone.
func chaosServerConfig(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(deployedConfig)
	if err != nil {
		t.Fatal(err)
	}
	if !deployedJetStream.Match(b) {
		t.Fatalf("%s: the jetstream block sets more than store_dir, or is gone: the chaos test replaces it whole", deployedConfig)
	}
	abs, err := filepath.Abs(deployedConfig)
	if err != nil {
		t.Fatal(err)
	}
	if dir, err = filepath.Abs(dir); err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(dir, abs) // an include is relative to its file
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "nats.conf")
	conf := fmt.Sprintf("include %q\njetstream {\n  store_dir: %q\n}\n", rel, filepath.Join(dir, "nats"))
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func chaosSkip(t *testing.T, why string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatal(why)
	}
	t.Skip(why)
}

// slowProxy returns the URL of a proxy to the model server at target that
// holds each answer back for up to half a second after the model gave it:
// the time a real model takes to stream its reply, and a window in which a
// crash loses an answer before the harness records it.
func slowProxy(t *testing.T, target string) (string, *modelGate) {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	g := &modelGate{released: make(chan struct{})}
	p := httputil.NewSingleHostReverseProxy(u)
	p.ModifyResponse = func(*http.Response) error {
		g.held.Add(1)
		defer g.held.Add(-1)
		time.Sleep(rand.N(500 * time.Millisecond))
		select {
		case g.released <- struct{}{}:
		default:
		}
		return nil
	}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	return srv.URL, g
}

// modelGate tells the killer what the proxy to the model is doing.
type modelGate struct {
	held     atomic.Int32
	released chan struct{} // receives when an answer is let through, if someone waits
}

// holding reports whether an answer is being held back: the harness waits
// on the model.
func (g *modelGate) holding() bool { return g.held.Load() > 0 }

// afterRelease waits, half the time, until an answer is let through to the
// harness and then a few milliseconds more: the harness is then recording
// it, and a server killed now may never acknowledge that publish.
func (g *modelGate) afterRelease(ctx context.Context) {
	if rand.N(2) == 0 {
		return
	}
	select {
	case <-ctx.Done():
		return
	case <-time.After(momentWait):
		return
	case <-g.released:
	}
	time.Sleep(rand.N(3 * time.Millisecond))
}

// chaosConnect connects the test's client signed in as user with pass
// once the server takes the sign-in, reconnecting forever, and collects
// the permission violations the server reports to it.
func chaosConnect(t *testing.T, url, user, pass string) (jetstream.JetStream, *violations) {
	t.Helper()
	chaosRetry(t, 30*time.Second, func(context.Context) error {
		nc, err := nats.Connect(url, bus.SignIn(user, pass))
		if err != nil {
			return err
		}
		nc.Close()
		return nil
	})
	// A client's sign-in after a restart of the server can be refused
	// while the auth service is not back, and nats.go gives up on a
	// connection refused twice in a row.
	return connectWith(t, url, user, pass, nats.Name("chaos-test"), nats.MaxReconnects(-1),
		nats.ReconnectWait(100*time.Millisecond), nats.ReconnectBufSize(-1), nats.IgnoreAuthErrorAbort())
}

// startChaosAuth runs the auth service in the test process, signed in as
// its own user and reconnecting forever, with the issuer whose seed is
// seed and its log in logPath, until the test ends. It returns once the
// service takes the server's questions, with what the server refuses it.
func startChaosAuth(t *testing.T, url, seed, logPath string) *violations {
	t.Helper()
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	js, v := chaosConnect(t, url, credential.UserAuth, password(credential.UserAuth))
	runAuth(t, js, seed, slog.New(slog.NewTextHandler(f, &slog.HandlerOptions{Level: slog.LevelDebug})))
	return v
}

// chaosRetry calls f until it succeeds, failing the test after timeout.
func chaosRetry(t *testing.T, timeout time.Duration, f func(ctx context.Context) error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := f(ctx)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %v", timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// publishSessions publishes one request per session as chaosUser, spread
// over spread, each retried until the stream has it: the server may be
// down. It gives up on a publish the server refuses (as refused reports)
// and when the connection closes.
func publishSessions(ctx context.Context, js jetstream.JetStream, refused *violations, sessions []uuid.UUID, spread time.Duration) error {
	begin := time.Now()
	for i, s := range sessions {
		at := begin.Add(spread * time.Duration(i) / time.Duration(len(sessions)))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Until(at)):
		}
		req := event.Request{Header: event.NewHeader(event.TypeRequest, chaosTenant, s), User: chaosUser, Prompt: chaosPrompt(i)}
		subject := bus.RequestSubject(chaosTenant, s, req.User)
		for {
			pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := bus.Publish(pctx, js, subject, req.ID.String(), &req)
			cancel()
			if err == nil {
				break
			}
			switch {
			case ctx.Err() != nil:
				return fmt.Errorf("session %d: %w", i, err)
			case refused.seen(subject):
				return fmt.Errorf("session %d: the server refused the publish to %s: %w", i, subject, err)
			case js.Conn().IsClosed():
				return fmt.Errorf("session %d: the connection closed (%v): %w", i, js.Conn().LastError(), err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return nil
}

// sessionEnds returns the sessions that have completed or failed, with the
// kind of their last such event.
func sessionEnds(ctx context.Context, js jetstream.JetStream) (map[uuid.UUID]string, error) {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	msgs, err := bus.ReadAll(rctx, js, bus.StreamEvents, fmt.Sprintf("events.%s.*.session.>", chaosTenant))
	if err != nil {
		return nil, err
	}
	out := map[uuid.UUID]string{}
	for _, m := range msgs {
		a, err := sessionlog.ParseSubject(m.Subject)
		if err != nil {
			continue
		}
		switch a.Type {
		case event.TypeSessionCompleted:
			out[a.Session] = "completed"
		case event.TypeSessionFailed:
			out[a.Session] = "failed"
		}
	}
	return out, nil
}

// chaosConsumers are the durable consumers of the harness and the
// sandbox-manager.
var chaosConsumers = []struct{ stream, consumer string }{
	{bus.StreamRequests, bus.ConsumerHarnessRequests},
	{bus.StreamEvents, bus.ConsumerHarnessSteps},
	{bus.StreamTools, bus.ConsumerSandboxCalls},
}

// quiesce waits until no request, step or tool call is waiting or in
// flight.
func quiesce(js jetstream.JetStream, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		err := func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			for _, c := range chaosConsumers {
				cons, err := js.Consumer(ctx, c.stream, c.consumer)
				if err != nil {
					return fmt.Errorf("consumer %s: %w", c.consumer, err)
				}
				info := cons.CachedInfo()
				if info.NumPending != 0 || info.NumAckPending != 0 {
					return fmt.Errorf("consumer %s: %d pending, %d awaiting ack", c.consumer, info.NumPending, info.NumAckPending)
				}
			}
			s, err := js.Stream(ctx, bus.StreamTools)
			if err != nil {
				return err
			}
			if n := s.CachedInfo().State.Msgs; n != 0 {
				return fmt.Errorf("%d tool calls left on the queue", n)
			}
			return nil
		}()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// chaosResult sums up what the checks saw.
type chaosResult struct {
	completed, toolCalls, interrupted, duplicates, unexplained int
	// interruptedAlive counts calls reported interrupted though no
	// sandbox-manager died while they ran: their results were lost to a
	// server restart.
	interruptedAlive int
	// undispatched counts calls whose dispatch (by their response, or a
	// tool.dispatched event) is missing from the log: a gap in the audit
	// trail, not a lost call.
	undispatched int
}

// killedBetween reports whether comp was killed between from and to.
func killedBetween(comp string, from, to time.Time, kills []chaosKill) bool {
	for _, k := range kills {
		if k.comp == comp && !k.at.Before(from) && !k.at.After(to) {
			return true
		}
	}
	return false
}

// checkChaos checks every session's log and workspace against the answers
// the model gave.
func checkChaos(t *testing.T, js jetstream.JetStream, model *chaosModel, sessions []uuid.UUID, data string, kills []chaosKill) chaosResult {
	t.Helper()
	answers, byNonce, anomalies := model.snapshot()
	for _, a := range anomalies {
		t.Errorf("model: %s", a)
	}
	var r chaosResult
	recorded := map[int]bool{} // nonces of the answers recorded as responses
	for i, s := range sessions {
		var msgs []bus.Msg
		chaosRetry(t, 30*time.Second, func(ctx context.Context) error {
			var err error
			msgs, err = bus.ReadAll(ctx, js, bus.StreamEvents, bus.SessionEvents(chaosTenant, s))
			return err
		})
		if *chaosGolden != "" {
			writeGolden(t, filepath.Join(*chaosGolden, fmt.Sprintf("chaos-%02d.jsonl", i)), msgs)
		}
		ws := filepath.Join(data, "workspaces", chaosTenant, s.String())
		c := checkSession(i, s, msgs, ws, model.plans[i], byNonce, recorded)
		for _, e := range c.errs {
			t.Errorf("session %d (%s): %s", i, s, e)
		}
		if len(c.errs) > 0 {
			t.Logf("session %d (%s) log:\n%s", i, s, dumpEvents(msgs))
		}
		if c.completed {
			r.completed++
		}
		r.toolCalls += c.calls
		r.interrupted += c.interrupted
		r.undispatched += c.undispatched
		for _, iv := range c.interruptions {
			if !killedBetween(compSandbox, iv[0].Add(-time.Second), iv[1], kills) {
				r.interruptedAlive++
			}
		}
		// The markers of answers never recorded must have no effect.
		for turn := 1; turn <= len(model.plans[i])+1; turn++ {
			for _, a := range answers[chaosKey{i, turn}] {
				if recorded[a.Nonce] {
					continue
				}
				for _, e := range unrecordedEffects(a, c.effects, ws) {
					t.Errorf("session %d (%s): %s", i, s, e)
				}
			}
		}
	}

	// A turn answered more than once: every answer before the recorded one
	// must have lost its recording to a crash of the harness or the
	// server, and none may come after it.
	keys := make([]chaosKey, 0, len(answers))
	for k := range answers {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		return keys[i].session < keys[j].session || keys[i].session == keys[j].session && keys[i].turn < keys[j].turn
	})
	for _, k := range keys {
		as := answers[k]
		if len(as) < 2 {
			continue
		}
		rec := slices.IndexFunc(as, func(a *chaosAnswer) bool { return recorded[a.Nonce] })
		r.duplicates += len(as) - 1
		var times []string
		for _, a := range as {
			times = append(times, fmt.Sprintf("n%d at %s (recorded %v)", a.Nonce, a.At.Format("15:04:05.000"), recorded[a.Nonce]))
		}
		t.Logf("chaos: session %d turn %d answered %d times: %s", k.session, k.turn, len(as), strings.Join(times, ", "))
		for j, a := range as {
			switch {
			case rec < 0 || j == rec:
			case j > rec:
				r.unexplained++
				t.Errorf("session %d turn %d: the model was asked again (n%d at %s) after its answer n%d was recorded",
					k.session, k.turn, a.Nonce, a.At.Format("15:04:05.000"), as[rec].Nonce)
			default:
				if !explained(a.At, as[j+1].At, kills) {
					r.unexplained++
					t.Errorf("session %d turn %d: answer n%d at %s was not recorded and the model was asked again at %s, "+
						"with no kill of the harness or nats-server in between", k.session, k.turn, a.Nonce,
						a.At.Format("15:04:05.000"), as[j+1].At.Format("15:04:05.000"))
				}
			}
		}
	}
	return r
}

// explained reports whether a kill of the harness or the server could have
// kept an answer given at from being recorded before the model was asked
// again at next: the harness died after it sent the request, or the server
// was down, or went down, before the harness could record the answer.
func explained(at, next time.Time, kills []chaosKill) bool {
	return killedBetween(compHarness, at.Add(-time.Second), next, kills) ||
		killedBetween(compNATS, at.Add(-5*time.Second), next, kills)
}

// sessionCheck is what checkSession found.
type sessionCheck struct {
	errs               []string
	completed          bool
	calls, interrupted int
	undispatched       int            // calls recorded as dispatched nowhere
	effects            map[string]int // marker → lines in effects
	// interruptions are when each interrupted call was dispatched and
	// when its result was made.
	interruptions [][2]time.Time
}

func checkSession(idx int, s uuid.UUID, msgs []bus.Msg, ws string, plan [][]string, byNonce map[int]*chaosAnswer, recorded map[int]bool) sessionCheck {
	var c sessionCheck
	errf := func(format string, args ...any) { c.errs = append(c.errs, fmt.Sprintf(format, args...)) }

	c.effects = map[string]int{}
	if b, err := os.ReadFile(filepath.Join(ws, effectsFile)); err == nil {
		for _, l := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
			c.effects[l]++
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		errf("read effects: %v", err)
	}

	counts := map[string]int{}
	responses := map[int][]*event.ModelResponded{}
	dispatched := map[uuid.UUID]int{}
	dispatchedAt := map[uuid.UUID]time.Time{}
	completed := map[uuid.UUID][]*event.ToolCompleted{}
	for _, m := range msgs {
		ev, err := event.Parse(m.Data)
		if err != nil {
			errf("seq %d: %v", m.StreamSeq, err)
			continue
		}
		counts[ev.(event.Event).Head().Type]++
		switch e := ev.(type) {
		case *event.ModelResponded:
			responses[e.Turn] = append(responses[e.Turn], e)
			for _, d := range e.Dispatches() { // dispatched with the response
				dispatched[d.Call]++
				dispatchedAt[d.Call] = d.Time
			}
		case *event.ToolDispatched:
			dispatched[e.Call]++
			dispatchedAt[e.Call] = e.Time
		case *event.ToolCompleted:
			completed[e.Call] = append(completed[e.Call], e)
		case *event.SessionFailed:
			errf("session failed (%s): %s", e.Code, e.Reason)
		}
	}
	c.completed = counts[event.TypeSessionCompleted] == 1
	if n := counts[event.TypeSessionRequested]; n != 1 {
		errf("%d session.requested events, want 1", n)
	}
	if n := counts[event.TypeSessionCompleted]; n != 1 {
		errf("%d session.completed events, want 1", n)
	}

	turns := len(plan) + 1
	calls := map[uuid.UUID]bool{}
	for turn := 1; turn <= turns; turn++ {
		rs := responses[turn]
		if len(rs) != 1 {
			if c.completed || len(rs) > 1 {
				errf("turn %d: %d model.responded events, want 1", turn, len(rs))
			}
			if len(rs) == 0 {
				continue
			}
		}
		resp := rs[0]
		text := textOf(resp)
		nonce, ok := nonceOf(text)
		a := byNonce[nonce]
		if !ok || a == nil || a.Session != idx || a.Turn != turn {
			errf("turn %d: the recorded response %q is no answer the model gave for it", turn, text)
			continue
		}
		recorded[nonce] = true
		if len(resp.Calls) != len(a.Calls) {
			errf("turn %d: the recorded response has %d calls, the answer had %d", turn, len(resp.Calls), len(a.Calls))
			continue
		}
		for k, call := range resp.Calls {
			calls[call.ID] = true
			c.calls++
			want := a.Calls[k]
			switch {
			case dispatched[call.ID] > 1:
				errf("call %s (%s): dispatched %d times", want.Marker, call.Name, dispatched[call.ID])
			case dispatched[call.ID] == 0:
				// Its result came in before the harness recorded the
				// dispatch, and a crash in between left the record out.
				c.undispatched++
			}
			rs := completed[call.ID]
			if len(rs) != 1 {
				errf("call %s (%s, turn %d): %d tool.completed events, want 1", want.Marker, call.Name, turn, len(rs))
				if len(rs) == 0 {
					continue
				}
			}
			res := rs[0]
			interrupted := isInterrupted(res.Output)
			if interrupted {
				c.interrupted++
				c.interruptions = append(c.interruptions, [2]time.Time{dispatchedAt[call.ID], res.Time})
			}
			switch want.Kind {
			case kindBash:
				n := c.effects[want.Marker]
				switch {
				case interrupted && n > 1:
					errf("interrupted Bash call %s ran %d times", want.Marker, n)
				case !interrupted && n != 1:
					errf("Bash call %s ran %d times, want once (result %q)", want.Marker, n, res.Output)
				case !interrupted && res.IsError:
					errf("Bash call %s failed: %q", want.Marker, res.Output)
				}
			case kindWrite, kindNote:
				if res.IsError {
					errf("Write call %s (%s) failed: %q", want.Marker, want.Path, res.Output)
					continue
				}
				b, err := os.ReadFile(filepath.Join(ws, want.Path))
				if err != nil || string(b) != want.Content {
					errf("Write call %s: %s holds %q (%v), want %q", want.Marker, want.Path, b, err, want.Content)
				}
			case kindRead:
				if res.IsError || !strings.Contains(res.Output, strings.TrimSpace(noteContent(idx))) {
					errf("Read call (turn %d) = %q, want the note", turn, res.Output)
				}
			}
		}
	}
	for turn := range responses {
		if turn < 1 || turn > turns {
			errf("a model.responded event for turn %d; the session has %d", turn, turns)
		}
	}
	for id := range dispatched {
		if !calls[id] {
			errf("tool.dispatched for call %s, which no recorded response made", id)
		}
	}
	for id, rs := range completed {
		if !calls[id] {
			errf("tool.completed for call %s (%s: %q), which no recorded response made", id, rs[0].Name, rs[0].Output)
		}
	}
	// Every line of effects is the marker of a Bash call the model made.
	for l := range c.effects {
		nonce := -1
		if i := strings.LastIndex(l, "-n"); i >= 0 {
			nonce, _ = strconv.Atoi(l[i+2:])
		}
		if a := byNonce[nonce]; a == nil || a.Session != idx {
			errf("effects has a line no call of this session wrote: %q", l)
		}
	}
	return c
}

// unrecordedEffects returns what an answer that was never recorded left
// behind: it must be nothing.
func unrecordedEffects(a *chaosAnswer, effects map[string]int, ws string) []string {
	var out []string
	for _, c := range a.Calls {
		switch c.Kind {
		case kindBash:
			if n := effects[c.Marker]; n > 0 {
				out = append(out, fmt.Sprintf("Bash call %s of an answer never recorded (turn %d) ran %d times", c.Marker, a.Turn, n))
			}
		case kindWrite:
			if _, err := os.Stat(filepath.Join(ws, c.Path)); err == nil {
				out = append(out, fmt.Sprintf("Write call %s of an answer never recorded (turn %d) wrote %s", c.Marker, a.Turn, c.Path))
			}
		}
	}
	return out
}

// dumpEvents renders a session's log compactly, one event a line.
func dumpEvents(msgs []bus.Msg) string {
	var b strings.Builder
	for _, m := range msgs {
		ev, err := event.Parse(m.Data)
		if err != nil {
			fmt.Fprintf(&b, "  seq %d: %v\n", m.StreamSeq, err)
			continue
		}
		h := ev.(event.Event).Head()
		fmt.Fprintf(&b, "  seq %d %s %s msgid=%s", m.StreamSeq, h.Time.Format("15:04:05.000"), event.Kind(h.Type), m.MsgID)
		switch e := ev.(type) {
		case *event.ModelResponded:
			fmt.Fprintf(&b, " turn=%d text=%q calls=%d", e.Turn, textOf(e), len(e.Calls))
			for _, c := range e.Calls {
				fmt.Fprintf(&b, " [%s %s %s %s]", c.ID, c.Name, c.Service, oneLine(string(e.Input(c)), 80))
			}
		case *event.ToolDispatched:
			fmt.Fprintf(&b, " call=%s %s", e.Call, e.Name)
		case *event.ToolCompleted:
			out, _ := json.Marshal(oneLine(e.Output, 100))
			fmt.Fprintf(&b, " call=%s %s error=%v %s", e.Call, e.Name, e.IsError, out)
		case *event.SessionFailed:
			fmt.Fprintf(&b, " %s: %s", e.Code, e.Reason)
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// writeGolden writes a session's log to file, one event a line: its
// stream sequence, its subject and the event.
func writeGolden(t *testing.T, file string, msgs []bus.Msg) {
	t.Helper()
	var b strings.Builder
	for _, m := range msgs {
		line, err := json.Marshal(struct {
			Seq     uint64          `json:"seq"`
			Subject string          `json:"subject"`
			Event   json.RawMessage `json:"event"`
		}{m.StreamSeq, m.Subject, m.Data})
		if err != nil {
			t.Fatal(err)
		}
		b.Write(line)
		b.WriteByte('\n')
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/event"
	"corral.dev/schemas"
)

const exampleScript = "../../scripts/examples/start-session.sh"

// natsStandIn stands in for the nats CLI where it is not installed: it
// hands its arguments to the test (DIR/pub.args, DIR/sub.args, NUL
// separated), waits for the test to do what they say, and prints what the
// test answers.
const natsStandIn = `#!/usr/bin/env bash
dir=$(dirname "$0")
printf '%s\0' "$@" > "$dir/$1.args.tmp" && mv "$dir/$1.args.tmp" "$dir/$1.args"
for _ in $(seq 600); do
  if [ -f "$dir/$1.done" ]; then cat "$dir/$1.out"; exit 0; fi
  sleep 0.1
done
echo "nats stand-in: no answer from the test" >&2
exit 1
`

// The README's example of starting a session without Go,
// scripts/examples/start-session.sh, shown there verbatim, works against
// the platform. With the nats CLI installed it runs as it is; without it,
// a stand-in for the nats command hands the test exactly what the script
// would publish and subscribe to, and the test does that with the Go
// client.
func TestPublisherExample(t *testing.T) {
	script, err := os.ReadFile(exampleScript)
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(readme, []byte("```sh\n"+string(script)+"```\n")) {
		t.Errorf("README.md does not show %s verbatim", exampleScript)
	}
	if _, err := exec.LookPath("jq"); err != nil {
		t.Skip("the example needs jq")
	}

	p := startDev(t, echoPrompt, nil)
	// Quotes, a shell variable and a nats CLI template: all sent as they are.
	prompt := `say "hi" to $USER {{Count}}`
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", exampleScript, "acme", "ada", prompt)
	cmd.Env = append(os.Environ(), "NATS_URL="+p.url)
	var stdout, stderr syncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr

	_, err = exec.LookPath("nats")
	standIn := err != nil
	dir := t.TempDir()
	if standIn {
		t.Log("no nats CLI: the test publishes and subscribes for it")
		if err := os.WriteFile(filepath.Join(dir, "nats"), []byte(natsStandIn), 0o755); err != nil {
			t.Fatal(err)
		}
		cmd.Env = append(cmd.Env, "PATH="+dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	if standIn {
		nc, err := nats.Connect(p.url)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		js, _ := jetstream.New(nc)
		standInPub(ctx, t, js, dir)
		standInSub(ctx, t, js, dir)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("the example failed: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
		}
	case <-ctx.Done():
		t.Fatalf("the example did not end\nstdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	}
	if got, want := strings.TrimSpace(stdout.String()), "answer to "+prompt; got != want {
		t.Errorf("the example printed %q, want %q", got, want)
	}
	session := sessionOf(t, stderr.String())
	var req *event.SessionRequested
	for _, ev := range p.events(t, session) {
		if r, ok := ev.(*event.SessionRequested); ok {
			req = r
		}
	}
	if req == nil || req.Tenant != "acme" || req.User != "ada" || req.Prompt != prompt {
		t.Errorf("the session recorded %+v, want tenant acme, user ada, prompt %q", req, prompt)
	}
}

// standInArgs waits for the stand-in's arguments for command name.
func standInArgs(ctx context.Context, t *testing.T, dir, name string) []string {
	t.Helper()
	for {
		b, err := os.ReadFile(filepath.Join(dir, name+".args"))
		if err == nil {
			return strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
		}
		if !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the example never ran nats %s", name)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// standInFlags splits `nats <cmd>` arguments into flags (with the values
// of those in valued) and positional arguments.
func standInFlags(args []string, valued ...string) (map[string][]string, []string) {
	flags := make(map[string][]string)
	var pos []string
	for i := 1; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			pos = append(pos, a)
			continue
		}
		name, value, ok := strings.Cut(a, "=")
		if !ok && strings.Contains(" "+strings.Join(valued, " ")+" ", " "+name+" ") && i+1 < len(args) {
			i++
			value = args[i]
		}
		flags[name] = append(flags[name], value)
	}
	return flags, pos
}

func standInAnswer(t *testing.T, dir, name string, out []byte) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name+".out"), out, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".done"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// standInPub does what `nats pub --jetstream SUBJECT --header K:V BODY`
// does: publish BODY with the headers and wait for the stream's ack.
func standInPub(ctx context.Context, t *testing.T, js jetstream.JetStream, dir string) {
	t.Helper()
	args := standInArgs(ctx, t, dir, "pub")
	flags, pos := standInFlags(args, "--header", "-H")
	if args[0] != "pub" || len(pos) != 2 || flags["--jetstream"] == nil || flags["--no-templates"] == nil {
		t.Fatalf("nats %q: want pub --jetstream --no-templates SUBJECT BODY", args)
	}
	msg := nats.NewMsg(pos[0])
	msg.Data = []byte(pos[1])
	for _, h := range append(flags["--header"], flags["-H"]...) {
		k, v, _ := strings.Cut(h, ":")
		msg.Header.Add(k, v)
	}
	if err := schemas.Validate(event.TypeRequest, msg.Data); err != nil {
		t.Errorf("the example's request does not validate: %v\n%s", err, msg.Data)
	}
	if id := msg.Header.Get(jetstream.MsgIDHeader); uuid.Validate(id) != nil || !strings.Contains(string(msg.Data), `"id":"`+id+`"`) {
		t.Errorf("Nats-Msg-Id %q is not the request's id: %s", id, msg.Data)
	}
	if _, err := js.PublishMsg(ctx, msg); err != nil {
		t.Fatal(err)
	}
	standInAnswer(t, dir, "pub", nil)
}

// standInSub does what `nats sub --stream S --all --count N --raw
// --ignore-subject X SUBJECT` does: print the data of the first N
// messages of S on SUBJECT, but for those on X, a line each.
func standInSub(ctx context.Context, t *testing.T, js jetstream.JetStream, dir string) {
	t.Helper()
	args := standInArgs(ctx, t, dir, "sub")
	flags, pos := standInFlags(args, "--stream", "--count", "--ignore-subject", "-I")
	count, err := strconv.Atoi(strings.Join(flags["--count"], ""))
	if args[0] != "sub" || len(pos) != 1 || len(flags["--stream"]) != 1 || flags["--all"] == nil || flags["--raw"] == nil || err != nil {
		t.Fatalf("nats %q: want sub --stream S --all --count N --raw SUBJECT", args)
	}
	ignore := append(flags["--ignore-subject"], flags["-I"]...)
	cons, err := js.OrderedConsumer(ctx, flags["--stream"][0], jetstream.OrderedConsumerConfig{FilterSubjects: pos})
	if err != nil {
		t.Fatal(err)
	}
	var out []byte
	for count > 0 {
		msg, err := cons.Next(jetstream.FetchMaxWait(30 * time.Second))
		if err != nil {
			t.Fatalf("nats sub %s: %v", pos[0], err)
		}
		if !strings.Contains(" "+strings.Join(ignore, " ")+" ", " "+msg.Subject()+" ") {
			out = append(append(out, msg.Data()...), '\n')
			count--
		}
	}
	standInAnswer(t, dir, "sub", out)
}

package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/modeltest"
	"corral.dev/pkg/upstreamtest"
)

// benchEnvironment is the environment of the benchmarks' sessions: its
// setup writes a program into its layer.
const benchEnvironment = `name: bench
setup: |
  mkdir -p /opt/env/bin
  printf '#!/bin/sh\necho from the layer\n' > /opt/env/bin/hello
  chmod 755 /opt/env/bin/hello
`

// BenchmarkPrepare measures how long a session waits for its workspace,
// each op from the request's publish to the model's first turn, one
// session after the other on one corral dev:
//   - repo: a session of a cached environment started from a 10 MB
//     repository on a local forge (cloned through egress in its own
//     sandbox, snapshotted, its base kept); git-clone: the same repository
//     cloned on the host by git clone --depth 1, straight from the forge,
//     its baseline;
//   - environment: a session of a cached environment, starting from
//     nothing; none: a session with no environment, its baseline.
func BenchmarkPrepare(b *testing.B) {
	up := newUpstreams(b)
	forge := upstreamtest.Git(b, up.ca, "git.example.test", "")
	forge.NewRepo(b, "big", repoOf(10<<20))
	up.add(forge.Upstream)
	var mu sync.Mutex
	first := make(map[string]chan time.Time)
	p := startDev(b, func(c modeltest.Conversation) (modeltest.Turn, error) {
		if modeltest.Turns(c) == 0 {
			now := time.Now()
			mu.Lock()
			for key, ch := range first {
				if strings.HasSuffix(c.Messages[0].Text, key) {
					ch <- now
				}
			}
			mu.Unlock()
		}
		return modeltest.Turn{Text: "done"}, nil
	}, up.env(b, strings.ReplaceAll(forgePolicy, "acme:", "bench:")))
	p.corralOK(b, "environments", "create", writeTemp(b, benchEnvironment), "--tenant", "bench")
	nc, err := p.connect()
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	// session starts one and returns how long it took to its first turn.
	session := func(b *testing.B, start func(*event.Request)) time.Duration {
		n++
		key := fmt.Sprint("prepare ", n)
		ch := make(chan time.Time, 1)
		mu.Lock()
		first[key] = ch
		mu.Unlock()
		id := uuid.Must(uuid.NewV7())
		req := event.Request{Header: event.NewHeader(event.TypeRequest, "bench", id), User: "bench", Prompt: key}
		start(&req)
		from := time.Now()
		if err := bus.Publish(context.Background(), js, bus.RequestSubject("bench", id, "bench"), req.ID.String(), &req); err != nil {
			b.Fatal(err)
		}
		select {
		case at := <-ch:
			return at.Sub(from)
		case <-time.After(2 * time.Minute):
			b.Fatalf("session %s never reached its first turn", id)
		}
		return 0
	}
	repo := func(r *event.Request) {
		r.Environment = "bench"
		r.Repo = &event.Repo{URL: forge.URL + "/big.git"}
	}
	environment := func(r *event.Request) { r.Environment = "bench" }
	none := func(*event.Request) {}
	session(b, environment) // builds the environment: cached from here on

	measure := func(name string, op func(b *testing.B) time.Duration) {
		b.Run(name, func(b *testing.B) {
			var ds []time.Duration
			for range b.N {
				ds = append(ds, op(b))
			}
			percentiles(b, ds, "")
		})
	}
	measure("repo", func(b *testing.B) time.Duration { return session(b, repo) })
	measure("git-clone", func(b *testing.B) time.Duration {
		dir := filepath.Join(b.TempDir(), "big")
		cmd := exec.Command("git", "clone", "-q", "--depth", "1", forge.DirectURL+"/big.git", dir)
		cmd.Env = append(os.Environ(), "GIT_SSL_CAINFO="+up.ca.WriteFile(b, b.TempDir()), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null")
		from := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("git clone: %v\n%s", err, out)
		}
		return time.Since(from)
	})
	measure("environment", func(b *testing.B) time.Duration { return session(b, environment) })
	measure("none", func(b *testing.B) time.Duration { return session(b, none) })
}

// repoOf returns the files of a repository of about size bytes: a few
// hundred source-like text files, which git compresses as it does code.
func repoOf(size int) map[string]string {
	rnd := rand.New(rand.NewPCG(1, 2))
	words := []string{"func", "return", "if", "err", "nil", "for", "range", "ctx", "string", "int", "map", "struct", ":=", "{", "}", "(", ")"}
	files := make(map[string]string)
	for i, total := 0, 0; total < size; i++ {
		var sb strings.Builder
		for sb.Len() < 32<<10 {
			for range 8 {
				sb.WriteString(words[rnd.IntN(len(words))])
				sb.WriteString(fmt.Sprintf(" v%d ", rnd.IntN(100000)))
			}
			sb.WriteString("\n")
		}
		files[fmt.Sprintf("pkg%02d/file%03d.go", i/32, i)] = sb.String()
		total += sb.Len()
	}
	return files
}

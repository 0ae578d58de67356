package proxy

import (
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"

	"corral.dev/pkg/egressapi"
)

// pktLine is s as a git pkt-line.
func pktLine(s string) string { return fmt.Sprintf("%04x%s", len(s)+4, s) }

// holdEnv is a proxy whose policy holds POSTs to git.example.test for
// review by rule "review", with a holder waiting on one approval.
type holdEnv struct {
	up     *upstream
	holder *holder
	rec    *recorder
	c      *http.Client
}

func newHoldEnv(t *testing.T, maxHeld int64) *holdEnv {
	t.Helper()
	j := judgeFunc(func(_ egressapi.Identity, tg Target) Verdict {
		switch tg.Method {
		case "":
			return Verdict{}
		case "POST":
			return Verdict{Decision: Approve, Rule: "review", Reason: "pushes need a reviewer", Known: true}
		}
		return Verdict{Decision: Allow, Rule: "read", Known: true}
	})
	k := newPKI(t)
	env := &holdEnv{
		up:     startUpstream(t, k, nil, "git.example.test"),
		holder: &holder{approval: uuid.MustParse("01900000-0000-7000-8000-0000000000aa")},
		rec:    newRecorder(),
	}
	p := New(Config{CA: proxyCA(), RootCAs: k.pool, MaxHeldBody: maxHeld, Resolve: map[string]string{"git.example.test": env.up.addr()}},
		j, nil, env.holder, env.rec)
	env.c = client(serve(t, p, testID), k.pool)
	return env
}

// post sends body to url, gzipped when said, and returns the answer.
func (env *holdEnv) post(t *testing.T, url string, body []byte, gzipped bool) (*http.Response, string) {
	t.Helper()
	req := newRequest(t, "POST", url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/x-git-receive-pack-request")
	if gzipped {
		req.Header.Set("Content-Encoding", "gzip")
	}
	return get(t, env.c, req)
}

func TestHeldPush(t *testing.T) {
	t.Parallel()
	zero, a, b, c := strings.Repeat("0", 40), strings.Repeat("a", 40), strings.Repeat("b", 40), strings.Repeat("c", 40)
	commands := pktLine("shallow "+c) +
		pktLine(a+" "+b+" refs/heads/main\x00 report-status side-band-64k agent=git/2.43.0") +
		pktLine(zero+" "+c+" refs/heads/feature\n") + "0000"
	pack := make([]byte, 1<<20)
	rand.Read(pack)
	plain := append([]byte(commands+"PACK"), pack...)
	var zipped bytes.Buffer
	zw := gzip.NewWriter(&zipped)
	zw.Write(plain)
	zw.Close()
	wantRefs := []RefUpdate{{a, b, "refs/heads/main"}, {zero, c, "refs/heads/feature"}}
	const url = "https://git.example.test/org/repo.git/git-receive-pack"

	for _, tc := range []struct {
		name    string
		body    []byte
		gzipped bool
	}{{"plain", plain, false}, {"gzip", zipped.Bytes(), true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := newHoldEnv(t, 0)
			resp, body := env.post(t, url, tc.body, tc.gzipped)
			id := env.holder.approval.String()
			want := "corral egress: held for approval " + id + " by rule review (pushes need a reviewer): retry the same request once a reviewer approves it\n"
			if resp.StatusCode != http.StatusForbidden || body != want || resp.Header.Get(ApprovalHeader) != id {
				t.Fatalf("got %d %q (approval %q), want 403 %q", resp.StatusCode, body, resp.Header.Get(ApprovalHeader), want)
			}
			h := env.holder.last(t)
			if h.Method != "POST" || h.URL != url || !slices.Equal(h.Refs, wantRefs) || h.BodySHA256 != "" || h.Rule != "review" {
				t.Errorf("held %+v, want POST %s with refs %v", h, url, wantRefs)
			}
			if e := env.rec.next(t); !e.Refused || e.Approval != env.holder.approval || e.Status != 403 {
				t.Errorf("entry %+v, want a refusal waiting on the approval", e)
			}
			if n := env.up.count(); n != 0 {
				t.Fatalf("upstream got %d requests before approval", n)
			}

			env.holder.approve()
			if resp, body := env.post(t, url, tc.body, tc.gzipped); resp.StatusCode != http.StatusOK {
				t.Fatalf("after approval: got %d %q", resp.StatusCode, body)
			}
			if _, got := env.up.last(t); !bytes.Equal(got, tc.body) {
				t.Errorf("upstream got %d bytes, want the %d sent, unchanged", len(got), len(tc.body))
			}
			if e := env.rec.next(t); e.Refused || e.Approval != env.holder.approval || e.Sent != int64(len(tc.body)) {
				t.Errorf("entry %+v, want the request passed with its approval", e)
			}

			// It passes once.
			if resp, _ := env.post(t, url, tc.body, tc.gzipped); resp.StatusCode != http.StatusForbidden {
				t.Errorf("again: got %s, want 403", resp.Status)
			}
		})
	}
}

// A push that updates no ref (git's probe before a big push) waits like
// any other: passed as it is, with whatever follows its flush, it would
// carry anything to a host no rule allows.
func TestHeldPushProbeWaits(t *testing.T) {
	t.Parallel()
	env := newHoldEnv(t, 0)
	payload := append([]byte("0000"), strings.Repeat("exfiltrated ", 1000)...)
	if resp, body := env.post(t, "https://git.example.test/org/repo.git/git-receive-pack", payload, false); resp.StatusCode != http.StatusForbidden {
		t.Errorf("got %d %q, want 403: held", resp.StatusCode, body)
	}
	env.up.mu.Lock()
	defer env.up.mu.Unlock()
	if len(env.up.seen) != 0 {
		t.Errorf("the upstream received %d requests", len(env.up.seen))
	}
}

// A push with options (git push -o) is refused: a reviewer would not see
// them, and they may change what the forge does with it.
func TestHeldPushWithOptionsRefused(t *testing.T) {
	t.Parallel()
	env := newHoldEnv(t, 0)
	oid, zero := strings.Repeat("a", 40), strings.Repeat("0", 40)
	cmd := zero + " " + oid + " refs/heads/main\x00report-status push-options\n"
	body := fmt.Sprintf("%04x%s0000", len(cmd)+4, cmd) + "0013ci.skip=true\n0000PACK"
	resp, text := env.post(t, "https://git.example.test/org/repo.git/git-receive-pack", []byte(body), false)
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(text, "push options") {
		t.Errorf("got %d %q, want 403 naming the push options", resp.StatusCode, text)
	}
}

func TestHeldBadPush(t *testing.T) {
	t.Parallel()
	env := newHoldEnv(t, 0)
	resp, body := env.post(t, "https://git.example.test/org/repo.git/git-receive-pack", []byte("0030not a command at all, really, no"), false)
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "cannot read the ref updates") {
		t.Errorf("got %d %q, want 403", resp.StatusCode, body)
	}
}

func TestHeldBodyHashed(t *testing.T) {
	t.Parallel()
	env := newHoldEnv(t, 64)
	body := []byte(`{"deploy":"production"}`)
	sum := sha256.Sum256(body)
	const url = "https://git.example.test/api/deploy?env=prod"
	if resp, _ := env.post(t, url, body, false); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("got %s, want 403", resp.Status)
	}
	if h := env.holder.last(t); h.BodySHA256 != hex.EncodeToString(sum[:]) || h.URL != url || h.Refs != nil {
		t.Errorf("held %+v, want the body's hash", h)
	}
	env.holder.approve()
	if resp, _ := env.post(t, url, body, false); resp.StatusCode != http.StatusOK {
		t.Fatalf("after approval: got %s, want 200", resp.Status)
	}
	if _, got := env.up.last(t); !bytes.Equal(got, body) {
		t.Errorf("upstream got %q, want %q", got, body)
	}

	resp, text := env.post(t, url, bytes.Repeat([]byte("x"), 65), false)
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(text, "body over 64 bytes cannot be held") {
		t.Errorf("too big: got %d %q, want 403", resp.StatusCode, text)
	}
}

func TestHeldWithoutHolder(t *testing.T) {
	t.Parallel()
	j := judgeFunc(func(egressapi.Identity, Target) Verdict {
		return Verdict{Decision: Approve, Rule: "review", Known: true}
	})
	up := startUpstream(t, nil, nil)
	p := New(Config{CA: proxyCA(), Resolve: map[string]string{"plain.example.test": up.addr()}}, j, nil, nil, nil)
	resp, body := get(t, client(serve(t, p, testID), newPKI(t).pool), newRequest(t, "GET", "http://plain.example.test/", nil))
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "none can be asked") {
		t.Errorf("got %d %q, want 403", resp.StatusCode, body)
	}
}

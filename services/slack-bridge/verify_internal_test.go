package slackbridge

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
)

// FuzzVerified sends the signature check requests with any timestamp,
// signature and body, signed with the secret or not: a request reaches its
// handler only when it carries the HMAC of its own timestamp and body, and
// a timestamp within five minutes of now; one signed now always does.
func FuzzVerified(f *testing.F) {
	const secret = "8f742231b10e8888abcd99yyyzzz85a5"
	now := strconv.FormatInt(time.Now().Unix(), 10)
	f.Add(now, "", []byte("token=x&team_id=T0&text=hi"), true)
	f.Add(now, "v0=00", []byte(`{"type":"url_verification","challenge":"c"}`), false)
	f.Add("1", "", []byte("a"), true)
	f.Add(now+"0", "", []byte(""), true)
	f.Add("-"+now, "v0=", []byte("x"), false)
	f.Add(" "+now, "", []byte("x"), true)
	s := &Service{cfg: Config{SigningSecret: Secret(secret)}, log: slog.New(slog.DiscardHandler)}
	mac := func(ts string, body []byte) []byte {
		h := hmac.New(sha256.New, []byte(secret))
		io.WriteString(h, "v0:"+ts+":")
		h.Write(body)
		return h.Sum(nil)
	}
	f.Fuzz(func(t *testing.T, ts, sig string, body []byte, sign bool) {
		if sign {
			sig = "v0=" + hex.EncodeToString(mac(ts, body))
		}
		var reached []byte
		h := s.verified(func(w http.ResponseWriter, r *http.Request, b []byte) { reached = b })
		r := httptest.NewRequest(http.MethodPost, PathCommands, bytes.NewReader(body))
		r.Header.Set("X-Slack-Request-Timestamp", ts)
		r.Header.Set("X-Slack-Signature", sig)
		w := httptest.NewRecorder()
		start := time.Now()
		h(w, r)
		if reached == nil {
			if sign && ts == strconv.FormatInt(start.Unix(), 10) {
				t.Fatalf("a request signed now (%s) was refused: %d %s", ts, w.Code, w.Body)
			}
			if w.Code != http.StatusUnauthorized && w.Code != http.StatusRequestEntityTooLarge {
				t.Fatalf("refused with %d", w.Code)
			}
			return
		}
		got, err := hex.DecodeString(strings.TrimPrefix(r.Header.Get("X-Slack-Signature"), "v0="))
		if err != nil || !hmac.Equal(got, mac(ts, body)) {
			t.Fatalf("timestamp %q, signature %q, body %q: reached the handler unsigned", ts, sig, body)
		}
		at, err := strconv.ParseInt(strings.TrimSpace(ts), 10, 64)
		if err != nil {
			t.Fatalf("timestamp %q reached the handler", ts)
		}
		if d := time.Since(time.Unix(at, 0)).Abs(); d > 5*time.Minute+2*time.Second {
			t.Fatalf("timestamp %q, %v from now, reached the handler", ts, d)
		}
		if !bytes.Equal(reached, body) {
			t.Fatalf("the handler got %q for %q", reached, body)
		}
	})
}

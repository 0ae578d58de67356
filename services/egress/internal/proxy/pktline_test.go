package proxy

import (
	"bytes"
	"compress/gzip"
	"io"
	"slices"
	"strings"
	"testing"
)

func TestReadPush(t *testing.T) {
	t.Parallel()
	a, b := strings.Repeat("a", 40), strings.Repeat("b", 40)
	a256, b256 := strings.Repeat("a", 64), strings.Repeat("b", 64)
	for _, tc := range []struct {
		name, body string
		want       []RefUpdate
		err        string
	}{
		{"one", pktLine(a+" "+b+" refs/heads/main\x00report-status") + "0000PACK", []RefUpdate{{a, b, "refs/heads/main"}}, ""},
		{"two with newlines", pktLine(a+" "+b+" refs/heads/main\x00caps\n") + pktLine(b+" "+a+" refs/tags/v1\n") + "0000", []RefUpdate{{a, b, "refs/heads/main"}, {b, a, "refs/tags/v1"}}, ""},
		{"sha256", pktLine(a256+" "+b256+" refs/heads/main\x00object-format=sha256") + "0000", []RefUpdate{{a256, b256, "refs/heads/main"}}, ""},
		{"shallow first", pktLine("shallow "+b) + pktLine(a+" "+b+" refs/heads/x\x00") + "0000", []RefUpdate{{a, b, "refs/heads/x"}}, ""},
		{"probe", "0000", nil, ""},
		{"no flush", pktLine(a + " " + b + " refs/heads/main\x00"), nil, "unexpected EOF"},
		{"push cert", pktLine("push-cert\x00caps") + "0000", nil, "not a ref update"},
		{"bad length", "zzzz", nil, "bad pkt-line length"},
		{"mixed lengths", pktLine(a+" "+b256+" refs/heads/main\x00") + "0000", nil, "not a ref update"},
		{"upper hex", pktLine(strings.ToUpper(a)+" "+b+" refs/heads/main\x00") + "0000", nil, "not a ref update"},
		{"delim", "0001", nil, "bad pkt-line length"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for _, gz := range []bool{false, true} {
				body := []byte(tc.body)
				if gz {
					var zb bytes.Buffer
					zw := gzip.NewWriter(&zb)
					zw.Write(body)
					zw.Close()
					body = zb.Bytes()
				}
				r := bytes.NewReader(body)
				refs, _, prefix, err := readPush(r, gz, 1<<20)
				if tc.err != "" {
					if err == nil || !strings.Contains(err.Error(), tc.err) {
						t.Errorf("gzip %v: got %v, %v, want error %q", gz, refs, err, tc.err)
					}
					continue
				}
				if err != nil || !slices.Equal(refs, tc.want) {
					t.Errorf("gzip %v: got %v, %v, want %v", gz, refs, err, tc.want)
				}
				rest, _ := io.ReadAll(r)
				if whole := append(prefix, rest...); !bytes.Equal(whole, body) {
					t.Errorf("gzip %v: prefix and rest make %q, want the body %q", gz, whole, body)
				}
			}
		})
	}
}

func TestReadPushLimit(t *testing.T) {
	t.Parallel()
	a, b := strings.Repeat("a", 40), strings.Repeat("b", 40)
	body := pktLine(a+" "+b+" refs/heads/main\x00") + pktLine(a+" "+b+" refs/heads/other") + "0000"
	_, _, _, err := readPush(strings.NewReader(body), false, 60)
	if err == nil || !strings.Contains(err.Error(), "do not end within 60 bytes") {
		t.Errorf("got %v, want the limit named", err)
	}
}

package main

import (
	"strings"
	"testing"

	"corral.dev/pkg/logtest"
	"corral.dev/pkg/natstest"
	"corral.dev/pkg/version"
)

// corral exits 0 on success, 1 when the operation failed and 2 when the
// command line was wrong, whichever command it is, and says which help
// to read.
func TestExitCodes(t *testing.T) {
	down := "nats://" + natstest.FreeAddr(t) // nothing listens there
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--version"}, 0, "corral " + version.String()},
		{[]string{"bogus"}, 2, `unknown command "bogus"`},
		{[]string{"logs"}, 2, "usage: corral logs"},
		{[]string{"logs", "a", "b"}, 2, "usage: corral logs"},
		{[]string{"run", "--nope", "x"}, 2, "unknown flag: --nope (corral run --help)"},
		{[]string{"sessions", "extra"}, 2, "usage: corral sessions"},
		{[]string{"memories", "ls", "--bogus"}, 2, "unknown flag: --bogus (corral memories ls --help)"},
		{[]string{"memories", "history"}, 2, `unknown command "history" for "corral memories"`},
		{[]string{"memories"}, 0, "corral memories [command]"},
		{[]string{"run", "--nats", down, "hello"}, 1, "CORRAL_NATS_URL"},
		{[]string{"sessions", "--nats", down}, 1, "CORRAL_NATS_URL"},
	} {
		var stdout, stderr logtest.Buffer
		code := run(t.Context(), tc.args, func(string) string { return "" }, &stdout, &stderr)
		if code != tc.code || !strings.Contains(stdout.String()+stderr.String(), tc.want) {
			t.Errorf("corral %s = %d, %q %q; want %d and %q", strings.Join(tc.args, " "), code, stdout.String(), stderr.String(), tc.code, tc.want)
		}
	}
}

// corral run - reads its prompt from standard input: whole, without its
// trailing newline; nothing, or too much, is a usage error.
func TestRunReadsThePromptFromStdin(t *testing.T) {
	for _, tc := range []struct {
		in, want, err string
	}{
		{"fix the tests\n", "fix the tests", ""},
		{"line one\n\n  line two  \n\n", "line one\n\n  line two", ""},
		{"", "", "standard input is empty"},
		{" \n\t\n", "", "standard input is empty"},
		{strings.Repeat("x", maxPrompt+1), "", "over 1048576 bytes"},
		{"\xff\xfe", "", "not UTF-8"},
	} {
		got, err := readPrompt(strings.NewReader(tc.in))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("readPrompt(%.20q) = %q, %v; want an error saying %q", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("readPrompt(%.20q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	var stdout, stderr logtest.Buffer
	if code := runIn(t.Context(), []string{"run", "-"}, func(string) string { return "" }, strings.NewReader("\n"), &stdout, &stderr); code != 2 {
		t.Errorf("corral run - with nothing on stdin exits %d (%s), want 2", code, stderr.String())
	}
}

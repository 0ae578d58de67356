package main

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"corral.dev/pkg/modeltest"
)

// browser starts headless Chromium for the test and returns its context.
// Chromium is Debian's (scripts/test.sh installs it); without it the test
// is skipped, except in CI, where it fails.
func browser(t *testing.T) context.Context {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("chromium is not installed (apt-get install -y chromium)")
		}
		t.Skip("chromium is not installed (apt-get install -y chromium)")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox, // the test runs as root
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(390, 844), // a phone's screen
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	ctx, cancelTimeout := context.WithTimeout(ctx, 3*time.Minute)
	t.Cleanup(func() { cancelTimeout(); cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// text returns the visible text of the first element sel matches.
func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		t.Fatalf("text of %s: %v", sel, err)
	}
	return s
}

func TestReviewerApprovesAndDeniesInTheBrowser(t *testing.T) {
	p := startDev(t, byPrompt(map[string][]modeltest.Call{
		"remove it": {bash("echo rm -rf went through")},
		"deny it":   {bash(hiddenPush)},
	}), nil)
	ctx := browser(t)
	page := "http://" + p.getenv("CORRAL_APPROVAL_LISTEN")

	err := chromedp.Do(ctx,
		chromedp.Navigate(page+"/"), // redirected to sign in
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), graceToken),
		chromedp.Click(chromedp.CSS("#signin")),
		chromedp.WaitVisible(chromedp.CSS("#approvals")),
	)
	if err != nil {
		t.Fatalf("sign in: %v", err)
	}
	wantIn(t, "page after sign-in", text(t, ctx, "#approvals"), "Nothing is waiting")

	// The call appears without a reload: the page is not navigated again
	// until the reviewer clicks.
	run := p.runBackground(t, "acme", "remove it")
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS("section.pending"))); err != nil {
		t.Fatalf("wait for the pending call: %v", err)
	}
	wantIn(t, "pending call", text(t, ctx, "section.pending dl.call"), "echo rm -rf went through")
	wantIn(t, "pending card", text(t, ctx, "section.pending"), "Bash", "ada", "acme", "risky-shell")
	err = chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS("section.pending button.approve")),
		chromedp.WaitVisible(chromedp.CSS("td.status-approved")),
	)
	if err != nil {
		t.Fatalf("approve: %v", err)
	}
	wantIn(t, "history", text(t, ctx, "#history"), "approved by grace")
	r := wait(t, run)
	if r.code != 0 {
		t.Fatalf("corral run exited %d:\n%s", r.code, r.stderr)
	}
	wantIn(t, "answer", r.stdout, "rm -rf went through")

	// The whole command shows, its bidi override named and marked rather
	// than turning the tail into what reads as a comment.
	run = p.runBackground(t, "acme", "deny it")
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS("section.pending"))); err != nil {
		t.Fatalf("wait for the pending call: %v", err)
	}
	shown := text(t, ctx, "section.pending dl.call")
	wantIn(t, "pending call", shown, "git push --force origin main <U+202E>;rm -rf /workspace # padding", "THE-END")
	if strings.ContainsRune(shown, '\u202e') {
		t.Errorf("the page shows the bidi override as it is: %q", shown)
	}
	wantIn(t, "marked code point", text(t, ctx, "section.pending dl.call mark.cp"), "<U+202E>")
	err = chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.CSS("section.pending input[name=reason]"), "never force-push main"),
		chromedp.Click(chromedp.CSS("section.pending button.deny")),
		chromedp.WaitVisible(chromedp.CSS("td.status-denied")),
	)
	if err != nil {
		t.Fatalf("deny: %v", err)
	}
	wantIn(t, "history", text(t, ctx, "#history"), "denied by grace: never force-push main")
	r = wait(t, run)
	if r.code != 0 {
		t.Fatalf("corral run exited %d:\n%s", r.code, r.stderr)
	}
	wantIn(t, "what the model read", r.stdout, "a reviewer (grace) denied this call", "never force-push main")
}

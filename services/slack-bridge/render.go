package slackbridge

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/slack-go/slack"

	"corral.dev/pkg/callview"
)

// What the bridge posts, as Slack mrkdwn. Text that comes from a model, a
// tool or a person is escaped (&, <, >), so that it cannot ping a channel
// or make a link Slack would render.

// maxText is the most of an answer one message carries (Slack cuts
// messages at 40,000 characters).
const maxText = 38000

func esc(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

func clip(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}

func oneLine(s string, n int) string { return clip(strings.Join(strings.Fields(s), " "), n) }

func plural(n int, one string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %ss", n, one)
}

// statusText is the progress message of a request.
func statusText(t *thread, state string) string {
	switch state {
	case "working":
		if t.Calls == 0 {
			return "⏳ Working on it…"
		}
		return fmt.Sprintf("⏳ Working on it… %s so far; last: `%s`", plural(t.Calls, "tool call"), esc(t.Last))
	case "waiting":
		return fmt.Sprintf("⏸ Waiting for a reviewer (%s so far)", plural(t.Calls, "tool call"))
	case "done":
		return fmt.Sprintf("✅ Done after %s.", plural(t.Calls, "tool call"))
	}
	return state
}

// answerText is a session's answer as posted.
func answerText(answer string, session uuid.UUID) string {
	answer = strings.TrimSpace(answer)
	if answer == "" {
		return "_(the session ended without an answer)_"
	}
	if len([]rune(answer)) > maxText {
		return esc(clip(answer, maxText)) + fmt.Sprintf("\n\n_(cut here; the whole answer: `corral logs %s`)_", session)
	}
	return esc(answer)
}

// maxSection is the most text a section block holds (Slack refuses
// more than 3,000 characters).
const maxSection = 3000

// callText describes a held call for a reviewer: the tool, the rule and
// why, and the call whole, every argument and any preview in full and
// hidden code points named ([callview.Text]). It reports whether that
// fits in one message: a call that does not, or that holds a code fence
// (which would end the block and let the call's text format itself), is
// described by its size only, and its whole text goes as a file, which
// note says where to find.
func callText(tool string, input json.RawMessage, preview, rule, why string) (text string, fits bool) {
	vis := func(s string) string { v, _ := callview.Visible(s); return v }
	head := fmt.Sprintf("*Approval needed* for `%s` (rule `%s`: %s)\n", esc(vis(tool)), esc(vis(rule)), esc(vis(why)))
	full := callview.Text(tool, input, preview)
	if !strings.Contains(full, "```") {
		text := head + "```" + esc(full) + "```"
		if utf8.RuneCountInString(text) <= maxSection-500 {
			return text, true
		}
	}
	return head + fmt.Sprintf("_The call (%d bytes of input) is too long to show here whole._", len(input)), false
}

// callFile is the name of the file that carries a call too long for a
// message.
func callFile(call uuid.UUID) string { return "call-" + call.String() + ".txt" }

// fileNote is what a call's message says where its whole text is: in the
// file, or, without one, on the other surfaces, which then decide it.
func fileNote(call uuid.UUID, uploaded bool) string {
	if uploaded {
		return fmt.Sprintf("\nThe whole call is in the file `%s` in this thread: read it before you decide.", callFile(call))
	}
	return fmt.Sprintf("\nDecide it with `corral approvals show %s` and `corral approve` or `corral deny`, or on the reviewers' page: no buttons here, since this message cannot show the whole call.", call)
}

// Action IDs of the approval buttons; their value is [approvalValue].
const (
	ActionApprove = "corral_approve"
	ActionDeny    = "corral_deny"
)

// approvalValue is what an approval button carries: the session and the
// call.
func approvalValue(session, call uuid.UUID) string { return session.String() + "/" + call.String() }

func parseApprovalValue(v string) (session, call uuid.UUID, err error) {
	a, b, ok := strings.Cut(v, "/")
	if !ok {
		return uuid.Nil, uuid.Nil, fmt.Errorf("button value %q is not session/call", v)
	}
	if session, err = uuid.Parse(a); err != nil {
		return uuid.Nil, uuid.Nil, fmt.Errorf("button value %q: %w", v, err)
	}
	if call, err = uuid.Parse(b); err != nil {
		return uuid.Nil, uuid.Nil, fmt.Errorf("button value %q: %w", v, err)
	}
	return session, call, nil
}

// approvalBlocks is a pending approval: the call and two buttons.
func approvalBlocks(text string, session, call uuid.UUID) []slack.Block {
	value := approvalValue(session, call)
	approve := slack.NewButtonBlockElement(ActionApprove, value, slack.NewTextBlockObject(slack.PlainTextType, "Approve", false, false))
	approve.Style = slack.StylePrimary
	deny := slack.NewButtonBlockElement(ActionDeny, value, slack.NewTextBlockObject(slack.PlainTextType, "Deny", false, false))
	deny.Style = slack.StyleDanger
	return []slack.Block{
		slack.NewSectionBlock(slack.NewTextBlockObject(slack.MarkdownType, text, false, false), nil, nil),
		slack.NewActionBlock("corral_approval", approve, deny),
	}
}

// textBlocks is a message of one section of mrkdwn.
func textBlocks(text string) []slack.Block {
	return []slack.Block{slack.NewSectionBlock(slack.NewTextBlockObject(slack.MarkdownType, text, false, false), nil, nil)}
}

// decidedBlocks is an approval once decided (or cancelled): the call and
// who decided, no buttons.
func decidedBlocks(text, outcome string) []slack.Block {
	return []slack.Block{
		slack.NewSectionBlock(slack.NewTextBlockObject(slack.MarkdownType, text, false, false), nil, nil),
		slack.NewContextBlock("corral_decision", slack.NewTextBlockObject(slack.MarkdownType, outcome, false, false)),
	}
}

// decisionText says who decided and why. The bridge's own decisions and
// the log's account of them read the same.
func decisionText(approved bool, reviewer, reason string) string {
	verdict := "❌ *Denied*"
	if approved {
		verdict = "✅ *Approved*"
	}
	s := verdict + " by " + esc(reviewer)
	if reason != "" {
		s += " — " + esc(reason)
	}
	return s
}

// decisionReason is the reason the bridge gives with a decision made by a
// click: who clicked.
func decisionReason(name, user string) string {
	return fmt.Sprintf("decided in Slack by %s (%s%s)", name, UserPrefix, user)
}

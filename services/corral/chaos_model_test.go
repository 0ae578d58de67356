package main

import (
	"fmt"
	"math/rand/v2"
	"regexp"
	"strconv"
	"sync"
	"time"

	"corral.dev/pkg/modeltest"
)

// The chaos test's scripted model. Every answer carries a fresh nonce in its
// text and in the markers of its calls, so two answers to one turn differ
// and each recorded response can be traced back to the answer it came from.

// Kinds of call a planned turn makes.
const (
	kindBash  = "bash"  // appends its marker to /workspace/effects
	kindWrite = "write" // writes its marker to a file of its own
	kindNote  = "note"  // writes the session's fixed note
	kindRead  = "read"  // reads the note back
)

const (
	chaosTenant = "chaos"
	chaosUser   = "chaos" // whose credential publishes the sessions
	effectsFile = "effects"
	noteFile    = "note.txt"
)

// chaosCall is one call of an answer.
type chaosCall struct {
	Kind string
	// Marker is unique to the answer and the call (Bash and Write).
	Marker string
	// Path is the file a Write or Read names, relative to /workspace.
	Path    string
	Content string
}

// chaosAnswer is one answer the fake model gave.
type chaosAnswer struct {
	Session, Turn, Nonce int
	At                   time.Time
	Calls                []chaosCall
	Final                bool
}

type chaosKey struct{ session, turn int }

// chaosModel is the script of every chaos session.
type chaosModel struct {
	plans [][][]string // per session, per tool turn: the kinds of its calls

	mu        sync.Mutex
	rng       *rand.Rand
	nonce     int
	answers   map[chaosKey][]*chaosAnswer
	byNonce   map[int]*chaosAnswer
	anomalies []string
}

func newChaosModel(sessions int, rng *rand.Rand) *chaosModel {
	m := &chaosModel{
		rng:     rng,
		answers: make(map[chaosKey][]*chaosAnswer),
		byNonce: make(map[int]*chaosAnswer),
	}
	for range sessions {
		m.plans = append(m.plans, chaosPlan(rng))
	}
	return m
}

// chaosPlan draws the tool turns of one session: 3 to 5, the first writing
// the note alongside a Bash call, the others mostly Bash, some of them two
// calls at once.
func chaosPlan(rng *rand.Rand) [][]string {
	n := 3 + rng.IntN(3)
	turns := [][]string{{kindNote, kindBash}}
	for len(turns) < n {
		switch r := rng.IntN(20); {
		case r < 9:
			turns = append(turns, []string{kindBash})
		case r < 12:
			turns = append(turns, []string{kindBash, kindBash})
		case r < 15:
			turns = append(turns, []string{kindBash, kindRead})
		case r < 18:
			turns = append(turns, []string{kindWrite, kindBash})
		default:
			turns = append(turns, []string{kindWrite})
		}
	}
	return turns
}

func chaosPrompt(session int) string { return fmt.Sprintf("chaos session %d", session) }

func noteContent(session int) string { return fmt.Sprintf("note of chaos session %d\n", session) }

var answerText = regexp.MustCompile(`^chaos s(\d+) t(\d+) n(\d+)`)

// nonceOf returns the nonce of the answer whose text is s.
func nonceOf(s string) (int, bool) {
	m := answerText.FindStringSubmatch(s)
	if m == nil {
		return 0, false
	}
	n, err := strconv.Atoi(m[3])
	return n, err == nil
}

func (m *chaosModel) script(c modeltest.Conversation) (modeltest.Turn, error) {
	at := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	session := -1
	if len(c.Messages) > 0 {
		if _, err := fmt.Sscanf(c.Messages[0].Text, "chaos session %d", &session); err != nil {
			session = -1
		}
	}
	if session < 0 || session >= len(m.plans) {
		m.anomalies = append(m.anomalies, fmt.Sprintf("model asked about an unknown session: %+v", c.Messages))
		return modeltest.Turn{Text: "unknown session"}, nil
	}
	turn := modeltest.Turns(c) + 1
	plan := m.plans[session]
	m.nonce++
	a := &chaosAnswer{Session: session, Turn: turn, Nonce: m.nonce, At: at}
	text := fmt.Sprintf("chaos s%d t%d n%d", session, turn, a.Nonce)
	if turn > len(plan)+1 {
		m.anomalies = append(m.anomalies, fmt.Sprintf("session %d: model asked for turn %d after its final answer (turn %d)", session, turn, len(plan)+1))
	}
	if turn > len(plan) {
		a.Final = true
		m.record(a)
		return modeltest.Turn{Text: text + " done"}, nil
	}
	var calls []modeltest.Call
	for k, kind := range plan[turn-1] {
		marker := fmt.Sprintf("s%d-t%d-c%d-n%d", session, turn, k, a.Nonce)
		cc := chaosCall{Kind: kind}
		var mc modeltest.Call
		switch kind {
		case kindBash:
			cc.Marker = marker
			// A small random sleep, so that kills land in the middle of
			// calls now and then.
			mc = modeltest.Call{Name: "Bash", Input: map[string]any{
				"command": fmt.Sprintf("echo %s >> /workspace/%s; sleep %.3f", marker, effectsFile, 0.1+m.rng.Float64()*1.2),
			}}
		case kindWrite:
			cc.Marker, cc.Path, cc.Content = marker, "w-"+marker+".txt", marker+"\n"
			mc = modeltest.Call{Name: "Write", Input: map[string]any{"file_path": "/workspace/" + cc.Path, "content": cc.Content}}
		case kindNote:
			cc.Path, cc.Content = noteFile, noteContent(session)
			mc = modeltest.Call{Name: "Write", Input: map[string]any{"file_path": "/workspace/" + cc.Path, "content": cc.Content}}
		case kindRead:
			cc.Path = noteFile
			mc = modeltest.Call{Name: "Read", Input: map[string]any{"file_path": "/workspace/" + cc.Path}}
		}
		a.Calls = append(a.Calls, cc)
		calls = append(calls, mc)
	}
	m.record(a)
	return modeltest.Turn{Text: text, Calls: calls}, nil
}

func (m *chaosModel) record(a *chaosAnswer) {
	k := chaosKey{a.Session, a.Turn}
	m.answers[k] = append(m.answers[k], a)
	m.byNonce[a.Nonce] = a
}

// snapshot returns the answers given so far, by session and turn.
func (m *chaosModel) snapshot() (map[chaosKey][]*chaosAnswer, map[int]*chaosAnswer, []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	answers := make(map[chaosKey][]*chaosAnswer, len(m.answers))
	for k, v := range m.answers {
		answers[k] = append([]*chaosAnswer(nil), v...)
	}
	byNonce := make(map[int]*chaosAnswer, len(m.byNonce))
	for k, v := range m.byNonce {
		byNonce[k] = v
	}
	return answers, byNonce, append([]string(nil), m.anomalies...)
}

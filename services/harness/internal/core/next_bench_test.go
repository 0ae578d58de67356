package core

import (
	"fmt"
	"testing"

	"corral.dev/pkg/policy"
)

// BenchmarkNext is what a step decides once the result of a session's
// last call is in, on sessions of 20, 200 and 1,000 turns (a Bash call
// each): ask the model, with the conversation and that result. What it
// costs should not grow with the session.
func BenchmarkNext(b *testing.B) {
	pol, err := policy.Parse([]byte("rules: []\n"))
	if err != nil {
		b.Fatal(err)
	}
	env := Env{Policy: pol, MaxTurns: 1 << 20, Now: t0, RequeueAfter: NoRequeue}
	for _, turns := range []int{20, 200, 1000} {
		l := new(log).request("go")
		for i := range turns {
			id := fmt.Sprint("c", i)
			l.respond("sandbox", id+":Bash:"+bashTrue).result(id, "some output")
		}
		st := l.fold()
		if acts := Next(st, env); len(acts) != 1 || show(acts) != fmt.Sprintf("ask(%d messages, last user: some output)", 2*turns+1) {
			b.Fatalf("%d turns: Next = %s", turns, show(acts))
		}
		b.Run(fmt.Sprint("turns-", turns), func(b *testing.B) {
			for b.Loop() {
				Next(st, env)
			}
		})
	}
}

package main

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"corral.dev/pkg/metrics"
	"corral.dev/pkg/modeltest"
	"corral.dev/pkg/tool"
)

var toolLabel = regexp.MustCompile(`(?m)^(corral_\w+)\{[^}]*tool="([^"]*)"`)

// A model that calls hundreds of tools by made-up names makes no series of
// its own: every tool label is one of the tools or "other".
func TestMetricLabelsAreAClosedSet(t *testing.T) {
	const n = 300
	p := startDev(t, func(c modeltest.Conversation) (modeltest.Turn, error) {
		if modeltest.Turns(c) == 0 {
			calls := make([]modeltest.Call, n)
			for i := range calls {
				calls[i] = modeltest.Call{Name: fmt.Sprintf("made_up_%d", i), Input: map[string]any{}}
			}
			return modeltest.Turn{Calls: calls}, nil
		}
		return modeltest.Turn{Text: fmt.Sprint(len(modeltest.Results(c)), " refused")}, nil
	}, nil)
	wantIn(t, "answer", p.runOK(t, "acme", "ada", "call made-up tools"), fmt.Sprint(n, " refused"))
	code, body := getPage(t, "http://"+p.getenv("CORRAL_METRICS_LISTEN")+"/metrics")
	if code != 200 {
		t.Fatalf("GET /metrics: %d", code)
	}
	allowed := append(tool.Names(), metrics.Other)
	series := 0
	for _, m := range toolLabel.FindAllStringSubmatch(body, -1) {
		series++
		if metrics.OneOf(m[2], allowed...) != m[2] {
			t.Errorf("%s has a series for tool %q", m[1], m[2])
		}
	}
	if series > 50 {
		t.Errorf("%d series carry a tool label after %d made-up tools", series, n)
	}
	wantIn(t, "metrics", body, fmt.Sprintf(`corral_harness_tool_calls_total{route="refused",tool="other"} %d`, n))
	if strings.Contains(body, "made_up_") {
		t.Error("a made-up tool name is in the metrics")
	}
}

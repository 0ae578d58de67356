package model

import (
	"net/http"
	"testing"
	"time"
)

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name    string
		headers map[string]string
		want    time.Duration
		wantOK  bool
	}{
		{"none", nil, 0, false},
		{"seconds", map[string]string{"retry-after": "2"}, 2 * time.Second, true},
		{"zero", map[string]string{"retry-after": "0"}, 0, true},
		{"fraction", map[string]string{"retry-after": "1.5"}, 1500 * time.Millisecond, true},
		{"milliseconds win", map[string]string{"retry-after-ms": "250", "retry-after": "1"}, 250 * time.Millisecond, true},
		{"bad milliseconds", map[string]string{"retry-after-ms": "soon", "retry-after": "1"}, time.Second, true},
		{"date", map[string]string{"retry-after": now.Add(7 * time.Second).Format(http.TimeFormat)}, 7 * time.Second, true},
		{"past date", map[string]string{"retry-after": now.Add(-time.Hour).Format(http.TimeFormat)}, 0, true},
		{"negative", map[string]string{"retry-after": "-3"}, 0, false},
		{"garbage", map[string]string{"retry-after": "later"}, 0, false},
		{"huge", map[string]string{"retry-after": "1e300"}, 1<<63 - 1, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := http.Header{}
			for k, v := range tc.headers {
				h.Set(k, v)
			}
			got, ok := retryAfter(h, now)
			if got != tc.want || ok != tc.wantOK {
				t.Errorf("retryAfter(%v) = %v, %v; want %v, %v", tc.headers, got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

func TestJitter(t *testing.T) {
	t.Parallel()
	tests := []struct {
		n        int
		min, max time.Duration
	}{
		{1, 250 * time.Millisecond, 500 * time.Millisecond},
		{2, 500 * time.Millisecond, time.Second},
		{4, 2 * time.Second, 4 * time.Second},
		{10, 15 * time.Second, 30 * time.Second},
		{1000, 15 * time.Second, 30 * time.Second},
	}
	for _, tc := range tests {
		for range 100 {
			if got := jitter(500*time.Millisecond, tc.n); got < tc.min || got > tc.max {
				t.Fatalf("jitter(500ms, %d) = %v, want within [%v, %v]", tc.n, got, tc.min, tc.max)
			}
		}
	}
}

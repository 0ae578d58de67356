package model_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sync"
	"testing"
)

// fakeAPI is a provider endpoint that records every request and answers the
// nth (from 1) with answer.
type fakeAPI struct {
	URL string

	mu   sync.Mutex
	reqs []recorded
}

type recorded struct {
	Path   string
	Header http.Header
	Body   []byte
}

func newFakeAPI(t *testing.T, answer func(n int, w http.ResponseWriter, r *http.Request)) *fakeAPI {
	t.Helper()
	f := &fakeAPI{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("read request body: %v", err)
		}
		f.mu.Lock()
		f.reqs = append(f.reqs, recorded{Path: r.URL.Path, Header: r.Header.Clone(), Body: body})
		n := len(f.reqs)
		f.mu.Unlock()
		answer(n, w, r)
	}))
	t.Cleanup(srv.Close)
	f.URL = srv.URL
	return f
}

func (f *fakeAPI) requests() []recorded {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]recorded(nil), f.reqs...)
}

// reply writes status, the headers given as name, value pairs, and body.
func reply(w http.ResponseWriter, status int, body string, headers ...string) {
	for i := 0; i+1 < len(headers); i += 2 {
		w.Header().Set(headers[i], headers[i+1])
	}
	w.Header().Set("content-type", "application/json")
	w.WriteHeader(status)
	io.WriteString(w, body)
}

// equalJSON fails the test unless got and want are the same JSON value.
func equalJSON(t *testing.T, what string, got []byte, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("%s: decode %s: %v", what, got, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("%s: decode want: %v", what, err)
	}
	if !reflect.DeepEqual(g, w) {
		var pretty bytes.Buffer
		json.Indent(&pretty, got, "", "  ")
		t.Errorf("%s:\ngot  %s\nwant %s", what, pretty.String(), want)
	}
}

package model

import (
	"bufio"
	"bytes"
	"reflect"
	"runtime"
	"strings"
	"testing"
)

// A thinking block's signature sent in many tiny deltas is gathered in
// linear time: the assembly never copies the whole signature per delta,
// which a hostile endpoint would make take minutes with a 32 MiB stream.
// (Not parallel: it measures the bytes allocated while it runs.)
func TestSignatureDeltasLinear(t *testing.T) {
	const deltas = 20000
	var b bytes.Buffer
	b.WriteString(`data: {"type":"message_start","message":{"model":"m","content":[],"usage":{"input_tokens":1}}}` + "\n\n")
	b.WriteString(`data: {"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":"s"}}` + "\n\n")
	for range deltas {
		b.WriteString(`data: {"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"AAAAAAAAAA"}}` + "\n\n")
	}
	b.WriteString(`data: {"type":"message_stop"}` + "\n\n")
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	resp, err := decodeAnthropicStream(newSSEReader(bufio.NewReaderSize(bytes.NewReader(b.Bytes()), sseBuffer)), nil)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if want := "s" + strings.Repeat("A", 10*deltas); len(resp.Content) != 1 || resp.Content[0].Signature != want {
		t.Fatalf("content = %d blocks, want 1 thinking block with the signature whole", len(resp.Content))
	}
	// Linear: a few times the stream's 2 MiB. Quadratic: about 2 GB.
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 256<<20 {
		t.Errorf("decoding %d signature deltas allocated %d MiB, want it linear in the stream", deltas, alloc>>20)
	}
}

// An error event as large as the stream makes an error no larger than an
// error body would: its message ends up in logs and in session.failed.
func TestHugeErrorEvent(t *testing.T) {
	t.Parallel()
	huge := strings.Repeat("x", 4<<20)
	data := `{"type":"error","error":{"type":"` + huge + `","message":"` + huge + `"}}`
	e := eventError("anthropic", []byte(data))
	if n := len(e.Error()); n > maxErrorBody+maxErrorMessage+200 {
		t.Errorf("the error of a %d MiB error event is %d bytes, want it bounded as an error body's", len(data)>>20, n)
	}
	if e.Status != 500 {
		t.Errorf("status = %d, want 500 (an unknown error type)", e.Status)
	}
}

// A text block started without its "text" is heard as it streams, at the
// index it has in the response, like one started with it.
func TestTextBlockStartedWithoutText(t *testing.T) {
	t.Parallel()
	stream := `data: {"type":"message_start","message":{"model":"m","content":[],"usage":{"input_tokens":1}}}` + "\n\n" +
		`data: {"type":"content_block_start","index":0,"content_block":{"type":"text"}}` + "\n\n" +
		`data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}` + "\n\n" +
		`data: {"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"t1","name":"Bash","input":{}}}` + "\n\n" +
		`data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{}"}}` + "\n\n" +
		`data: {"type":"message_stop"}` + "\n\n"
	var heard []Delta
	resp, err := decodeAnthropicStream(sse(stream), func(d Delta) { heard = append(heard, d) })
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Content) != 2 || resp.Content[0].Text != "Hi" || resp.Content[1].ID != "t1" {
		t.Fatalf("content = %+v, want the text and the call", resp.Content)
	}
	want := []Delta{{Index: 0, Kind: DeltaText, Text: "Hi"}, {Index: 1, Kind: DeltaToolUse, ID: "t1", Name: "Bash"}, {Index: 1, Kind: DeltaToolUse, Text: "{}"}}
	if !reflect.DeepEqual(heard, want) {
		t.Errorf("heard %+v, want %+v", heard, want)
	}
}

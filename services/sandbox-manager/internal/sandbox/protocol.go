package sandbox

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// The manager and the executor in a sandbox talk over the executor's stdin
// and stdout, one JSON object per line. The executor speaks first, with a
// hello naming its protocol version; then each request gets exactly one
// response, in order, after the partial messages that carry its output as
// it is written, if the request asks for them (Live). The executor
// handles one request at a time and exits when its stdin ends.
//
// A change that an old peer would misread bumps protocolVersion. The
// executor is the manager's own binary as found on disk when the sandbox
// starts, so the two differ only when the binary was replaced under a
// running manager; the manager then refuses the sandbox.
const protocolVersion = 2

// hello is the executor's first line.
type hello struct {
	Version int `json:"v"`
}

// request asks the executor to run one command.
type request struct {
	ID      uint64 `json:"id"`
	Command string `json:"command"`
	// TimeoutMS is how long the command may run; at the timeout every
	// process of the call is killed.
	TimeoutMS int64 `json:"timeout_ms"`
	// OutputLimit is how many bytes of output to keep; the rest is counted.
	OutputLimit int `json:"output_limit"`
	// Live is how many bytes of output to send as they are written, in
	// partial messages before the response (0: none).
	Live   int    `json:"live,omitempty"`
	Limits limits `json:"limits"`
}

// limits are the rlimits of each process of a call, in the kernel's units
// (bytes and seconds). Each is applied as both soft and hard limit, except
// CPU, whose hard limit is CPUHard.
type limits struct {
	CPU     uint64 `json:"cpu"`
	CPUHard uint64 `json:"cpu_hard"`
	AS      uint64 `json:"as"`
	FSize   uint64 `json:"fsize"`
	NoFile  uint64 `json:"nofile"`
	NProc   uint64 `json:"nproc"`
}

// response is the outcome of one request, or, Partial, a piece of its
// output sent as it was written.
type response struct {
	ID uint64 `json:"id"`
	// Partial marks a message sent while the command runs: Live is output
	// as written (stdout and stderr as one stream), and Cut says that no
	// more follows, the request's Live bytes sent. The response follows
	// the partial messages; its Output holds the output whatever they
	// carried.
	Partial bool   `json:"partial,omitempty"`
	Live    []byte `json:"live,omitempty"`
	Cut     bool   `json:"cut,omitempty"`
	// Error is set when the command could not be started at all; the other
	// fields are then empty.
	Error string `json:"error,omitempty"`
	// ExitCode is the command's exit status, 128+n if killed by signal n.
	ExitCode int  `json:"exit_code"`
	TimedOut bool `json:"timed_out,omitempty"`
	// Output is the first OutputLimit bytes of stdout and stderr as
	// written; Omitted counts the bytes dropped after them.
	Output  []byte `json:"output"`
	Omitted int64  `json:"omitted,omitempty"`
}

// errLineTooLong reports a protocol line longer than the reader allows.
var errLineTooLong = errors.New("protocol line too long")

// readMsg reads one line of at most max bytes and decodes it into v.
// io.EOF means the peer closed the stream before a line began.
func readMsg(br *bufio.Reader, max int, v any) error {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if len(line)+len(chunk) > max {
			return errLineTooLong
		}
		line = append(line, chunk...)
		if err == bufio.ErrBufferFull {
			continue
		}
		if err == io.EOF && len(line) > 0 {
			return io.ErrUnexpectedEOF
		}
		if err != nil {
			return err
		}
		break
	}
	if err := json.Unmarshal(line, v); err != nil {
		return fmt.Errorf("decode %q: %w", truncate(line, 200), err)
	}
	return nil
}

// writeMsg writes v as one line.
func writeMsg(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// truncate returns at most n bytes of b, for error messages.
func truncate(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}

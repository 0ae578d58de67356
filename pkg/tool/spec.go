package tool

import "encoding/json"

// Spec describes a tool to the model: its name, what it does, and the JSON
// Schema of its arguments.
type Spec struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
}

// Specs returns the specs of every tool, in a fixed order. The slice is
// shared: callers must not change it.
func Specs() []Spec { return specs }

var specs = []Spec{
	{Bash, "Runs a shell command in the session's sandbox, in /workspace, and returns its combined output and exit status. The sandbox has no network. timeout is in milliseconds (at most 600000).",
		schema(`{"command":{"type":"string","description":"The command to run"},"timeout":{"type":"integer","minimum":0,"maximum":600000,"description":"Timeout in milliseconds"},"description":{"type":"string","description":"What the command does, in a few words"}}`, "command")},
	{Read, "Reads a file and returns its lines numbered from 1. offset is the first line to read, limit the number of lines.",
		schema(`{"file_path":{"type":"string","description":"Absolute path of the file, e.g. /workspace/main.go"},"offset":{"type":"integer","minimum":0},"limit":{"type":"integer","minimum":0}}`, "file_path")},
	{Write, "Writes a file, replacing it if it exists and creating its directories if needed.",
		schema(`{"file_path":{"type":"string","description":"Absolute path of the file"},"content":{"type":"string","description":"The whole new content"}}`, "file_path", "content")},
	{Edit, "Replaces old_string with new_string in a file. old_string must occur exactly once unless replace_all is true.",
		schema(`{"file_path":{"type":"string","description":"Absolute path of the file"},"old_string":{"type":"string"},"new_string":{"type":"string"},"replace_all":{"type":"boolean"}}`, "file_path", "old_string", "new_string")},
	{Glob, "Lists files matching a glob pattern such as **/*.go, newest first.",
		schema(`{"pattern":{"type":"string"},"path":{"type":"string","description":"Directory to search in; default /workspace"}}`, "pattern")},
	{Grep, "Searches file contents for a regular expression (RE2 syntax) and returns matching lines as path:line:text.",
		schema(`{"pattern":{"type":"string"},"path":{"type":"string","description":"File or directory to search; default /workspace"},"glob":{"type":"string","description":"Only files whose name matches this glob, e.g. *.go"}}`, "pattern")},
}

func schema(props string, required ...string) json.RawMessage {
	req, _ := json.Marshal(required)
	return json.RawMessage(`{"type":"object","properties":` + props + `,"required":` + string(req) + `,"additionalProperties":false}`)
}

package model

import (
	"encoding/json"
	"slices"
	"sync"

	"corral.dev/pkg/tool"
)

// toolsCache keeps a provider's encoding of the tool list it was last
// given: every turn of every session sends the same tools, whose schemas
// would otherwise be encoded, and checked, again each time.
type toolsCache struct {
	mu    sync.Mutex
	specs []tool.Spec
	data  json.RawMessage
}

// encode returns the JSON array of the tools, each as wire gives it; nil
// when there are none.
func (c *toolsCache) encode(specs []tool.Spec, wire func(tool.Spec) any) (json.RawMessage, error) {
	if len(specs) == 0 {
		return nil, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.data != nil && slices.EqualFunc(c.specs, specs, sameSpec) {
		return c.data, nil
	}
	list := make([]any, len(specs))
	for i, s := range specs {
		list[i] = wire(s)
	}
	data, err := json.Marshal(list)
	if err != nil {
		return nil, err
	}
	c.specs = make([]tool.Spec, len(specs))
	for i, s := range specs {
		s.InputSchema = slices.Clone(s.InputSchema)
		c.specs[i] = s
	}
	c.data = data
	return data, nil
}

func sameSpec(a, b tool.Spec) bool {
	return a.Name == b.Name && a.Description == b.Description && string(a.InputSchema) == string(b.InputSchema)
}

// marshalWithTools encodes w, a request object with members besides its
// tools, with tools, their cached encoding, added as its "tools" member,
// if any. Marshalled as a field, the tools would be checked and compacted
// again in every request: kilobytes every turn.
func marshalWithTools(w any, tools json.RawMessage) ([]byte, error) {
	data, err := json.Marshal(w)
	if err != nil || len(tools) == 0 {
		return data, err
	}
	out := make([]byte, 0, len(data)+len(`,"tools":`)+len(tools))
	out = append(out, data[:len(data)-1]...) // up to the closing brace
	out = append(out, `,"tools":`...)
	out = append(out, tools...)
	return append(out, '}'), nil
}

package version

import (
	"runtime/debug"
	"testing"
)

func TestOf(t *testing.T) {
	for _, tc := range []struct {
		info debug.BuildInfo
		want string
	}{
		{debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}}, "v1.2.3"},
		{debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "devel"},
		{debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "a25131d0123456789abcdef"}, {Key: "vcs.modified", Value: "false"},
		}}, "devel a25131d01234"},
		{debug.BuildInfo{Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "a25131d"}, {Key: "vcs.modified", Value: "true"},
		}}, "devel a25131d-dirty"},
	} {
		if got := of(&tc.info); got != tc.want {
			t.Errorf("of(%+v) = %q, want %q", tc.info, got, tc.want)
		}
	}
}

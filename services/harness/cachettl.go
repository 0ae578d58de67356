package harness

// CacheTTLAuto is [Config.CacheTTL]'s default: the longer lifetime for
// the sessions that have waited for a reviewer.
const CacheTTLAuto = "auto"

// cacheTTL returns the lifetime to ask of st's cached prompt
// ([model.Request.CacheTTL]). Under [CacheTTLAuto], a session that has
// had a call held for a reviewer asks for the longer one from then on: a
// reviewer's decision often takes longer than the default five minutes,
// and the turn after it would then pay for its whole prompt again. It is
// decided from the log alone, so a rebuilt session asks as before.
func (s *Service) cacheTTL(st *state) string {
	switch s.cfg.CacheTTL {
	case "1h":
		return "1h"
	case CacheTTLAuto:
		if len(st.Asked) > 0 {
			return "1h"
		}
	}
	return ""
}

package bus

// BySession is a [Consumer.Admit] for messages whose subject names a
// tenant and a session (see [ParseSubject]): a session's messages are
// handled one at a time, in the order received, and grouped by tenant. A
// message whose subject names none is handled on its own, and its handler
// rejects it.
func BySession(m Msg) (key, group string) {
	tenant, session, err := ParseSubject(m.Subject)
	if err != nil {
		return "", ""
	}
	return SessionKey(tenant, session), tenant
}

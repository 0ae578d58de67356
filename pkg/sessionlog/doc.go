// Package sessionlog is the one way in and out of Corral's session logs:
// appending events (conditionally or not), recording tool results, reading
// a session's events, the last of a kind, following them, and storing the
// large ones elsewhere. It is also the one place where an event is judged
// before anyone folds it, counts it or shows it.
//
// An event is believed for where it is and who wrote it, never for what its
// body says about itself. Its subject is
//
//	events.<tenant>.<session>.<domain>.<name>.<writer>
//
// and a reader accepts it only when
//   - its type is corral.<domain>.v1.<name>, the one its subject names;
//   - its header names the subject's tenant and session;
//   - the writer token is one allowed to write that kind (see [Writers]):
//     the NATS permissions of deploy/ let each identity publish only its
//     own token, so the token says who published, and a wrong permission
//     alone still lets nothing be folded;
//   - a tool result's service is the writer, and, for readers that fold a
//     whole session ([Session]), the call was dispatched to that service.
//
// Clients write nothing here: a stop or a budget raise is a request
// (requests.<tenant>.<session>.<user>), which the harness records once it
// has checked that the user is the session's.
//
// Anything else is skipped: never returned, copied to the DEADLETTER stream
// with the reason (by the services, which may publish there), counted in
// corral_sessionlog_rejected_total and logged once per process. An event
// whose stored payload cannot be read is skipped the same way, so that it
// never stops a reader.
package sessionlog

// Package bus is Corral's use of NATS JetStream: the names and settings of
// every stream, consumer and KV bucket (defined once, here), connecting to a
// server or starting an embedded one, publishing with message IDs, and
// consuming with one ack policy for every service.
//
// A consumer's handler returns nil to ack, an error to be redelivered after
// a growing delay, or an error wrapping [ErrPermanent] to give the message up
// at once. A message that cannot be decoded, that is given up, or that fails
// every one of its deliveries is terminated and copied to the DEADLETTER
// stream, so a poison message never wedges a consumer and stays visible.
package bus

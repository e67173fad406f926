// Package integration holds mintgate's end-to-end tests: the three services
// built as binaries and run as processes against real Redis, NATS JetStream,
// an S3 server, an SQS server and the S3→SQS bridge. Where a Docker engine
// is reachable the servers come from pinned images (dockertest); otherwise,
// as on our CI machines, from local processes the test starts.
package integration

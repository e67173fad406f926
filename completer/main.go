// Command completer marks uploads done. It long-polls SQS for the
// S3 event notifications of the upload bucket and, for each object created
// under incoming/<tenant>/<urlId>, sets the done marker the sweeper checks
// before refunding a grant's token; given MINTGATE_NATS_URL, it also
// publishes one upload-completed event per upload (shared/events). It serves /healthz, /readyz and
// /metrics on MINTGATE_HTTP_ADDR, and exports the depth of the dead-letter
// queue named by its queue's redrive policy (dlq.go).
package main

import "github.com/mintgate/mintgate/shared/service"

func main() { service.Main("completer", run) }

// Command sweeper refunds the tokens of presigned URLs that expired unused.
// JetStream delivers each grant once it is due (expiry + grace); for each,
// one Redis script refunds a token to the issuing tier's bucket and the
// tenant's, unless the upload landed or an earlier delivery refunded it.
// Any number of sweepers share one durable consumer.
package main

import "github.com/mintgate/mintgate/shared/service"

func main() { service.Main("sweeper", run) }

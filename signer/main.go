// Command signer issues presigned S3 upload URLs, rate-limited per caller and
// per tenant (docs/api.md): POST /uploads/sign, GET /uploads/{urlId}, and the
// operational /healthz, /readyz and /metrics.
package main

import "github.com/mintgate/mintgate/shared/service"

func main() { service.Main("signer", run) }

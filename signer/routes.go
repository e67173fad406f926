package main

import (
	"github.com/labstack/echo/v4"

	"github.com/mintgate/mintgate/shared/ops"
	"github.com/mintgate/mintgate/signer/demo"
)

// addRoutes lists every route of the signer's public port. The ops port
// (MINTGATE_OPS_ADDR) is ops.Handler: /healthz, /readyz and /metrics.
func addRoutes(e *echo.Echo, d deps) {
	// The reads that cost Redis a round trip and spend nothing there are
	// limited per client address in-process (readlimit.Limiter); so is the
	// limits' answer, which costs nothing, as every other public read.
	reads := d.reads.Middleware()
	e.POST("/uploads/sign", handleSign(d))
	e.GET("/uploads/limits", handleLimits(d.cfg), reads)
	e.GET("/uploads/quota", handleQuota(d), reads)
	e.GET("/uploads", handleListUploads(d), reads)
	e.GET("/uploads/usage", handleUsage(d), reads)
	e.GET("/uploads/:urlId", handleStatus(d), reads)
	// Multipart grants: the create is charged as a sign; the rest cost
	// Redis and S3 calls but no token, so they are limited as the reads.
	e.POST("/uploads/multipart", handleMultipartCreate(d))
	e.POST("/uploads/:urlId/parts", handleSignParts(d), reads)
	e.GET("/uploads/:urlId/parts", handleListParts(d), reads)
	e.POST("/uploads/:urlId/complete", handleComplete(d), reads)
	e.DELETE("/uploads/:urlId", handleAbort(d), reads)
	// A download grant spends from its own tiers; its refusals and
	// replays are bounded as a sign's (readlimit.Limiter.Admit).
	e.POST("/uploads/:urlId/download", handleDownload(d))
	// DELETE /uploads/:urlId would take these for urlIds: they are routes
	// of their own, with no DELETE.
	for _, p := range []string{"/uploads/sign", "/uploads/limits", "/uploads/quota", "/uploads/multipart", "/uploads/usage"} {
		e.DELETE(p, func(echo.Context) error { return echo.ErrMethodNotAllowed })
	}
	e.GET("/healthz", echo.WrapHandler(ops.Healthz()))
	e.GET("/readyz", echo.WrapHandler(ops.Readyz(d.checks...)), reads)
	if d.cfg.DemoPage {
		e.GET("/demo*", echo.WrapHandler(demo.HandlerWith(demo.Options{TracesURL: d.cfg.DemoTracesURL})))
	}
}

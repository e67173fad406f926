package main

import (
	"github.com/labstack/echo/v4"

	"github.com/mintgate/mintgate/shared/ops"
	"github.com/mintgate/mintgate/signer/demo"
)

// addRoutes lists every route of the signer.
func addRoutes(e *echo.Echo, d deps) {
	e.POST("/uploads/sign", handleSign(d))
	e.GET("/uploads/:urlId", handleStatus(d))
	e.GET("/healthz", echo.WrapHandler(ops.Healthz()))
	e.GET("/readyz", echo.WrapHandler(ops.Readyz(d.checks...)))
	e.GET("/metrics", echo.WrapHandler(ops.Metrics(d.reg)))
	if d.cfg.DemoPage {
		e.GET("/demo*", echo.WrapHandler(demo.Handler()))
	}
}

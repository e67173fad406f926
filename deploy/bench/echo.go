package main

import (
	"context"
	"log/slog"
	"net/http"
	"os"

	"github.com/labstack/echo/v4"

	"github.com/mintgate/mintgate/shared/ops"
)

// echoBody is a sign response's size and shape, answered as is: what the
// signer's framework and HTTP stack cost with nothing behind them.
const echoBody = `{"url":"http://127.0.0.1:9/uploads/incoming/t0/0b9e6f0e-7f6c-4d3a-9a51-3c1f2a9d8e77?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIDMINTGATEBENCH%2F20261130%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date=20261130T120000Z&X-Amz-Expires=900&X-Amz-SignedHeaders=content-length%3Bcontent-type%3Bhost%3Bif-none-match&x-id=PutObject&X-Amz-Signature=5d672d79c15b13162d9279b0855cfba6789a8edb4c82c400e06b5924a6f2b5d7","method":"PUT","headers":{"Content-Length":"1024","Content-Type":"image/png","If-None-Match":"*"},"urlId":"0b9e6f0e-7f6c-4d3a-9a51-3c1f2a9d8e77","key":"incoming/t0/0b9e6f0e-7f6c-4d3a-9a51-3c1f2a9d8e77","expiresAt":"2026-11-30T12:15:00Z","expiresIn":900}`

// serveEcho is the bench's other mode (-serve-echo ADDR), run as a process
// of its own: an echo handler answering POST /uploads/sign with a fixed
// 201, on the same framework as the signer.
func serveEcho(ctx context.Context, addr string) error {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	body := []byte(echoBody)
	e.POST("/uploads/sign", func(c echo.Context) error { return c.JSONBlob(http.StatusCreated, body) })
	e.GET("/healthz", echo.WrapHandler(ops.Healthz()))
	return ops.Serve(ctx, slog.New(slog.NewTextHandler(os.Stderr, nil)), addr, e)
}

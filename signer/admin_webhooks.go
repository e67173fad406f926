package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mintgate/mintgate/shared/config"
	"github.com/mintgate/mintgate/shared/dial"
	"github.com/mintgate/mintgate/shared/webhook"
	"github.com/mintgate/mintgate/signer/internal/apierr"
)

// The admin routes of the webhooks that failed every try (the completer
// delivers them; docs/webhooks.md): list them, send one again. They read
// and write the stream MINTGATE_WEBHOOKS through shared/webhook's store,
// on a NATS connection of their own that exists only with the admin API.

// adminFailed is GET /admin/webhooks/failed's answer.
type adminFailed struct {
	Failed []webhook.Delivery `json:"failed"`
}

// dialWebhooks connects to NATS as the signer for the admin routes of the
// webhooks; the connection retries in the background, and a route answers
// 503 while it is down. The function it returns closes it.
func dialWebhooks(c cfg) (*webhook.Failed, func(), error) {
	opts, err := dial.NATSOptions(c.NATS, "signer")
	if err != nil {
		return nil, nil, err
	}
	nc, err := nats.Connect(c.NATS.URL, append(opts, nats.Name("mintgate-signer-webhooks"), nats.Timeout(2*time.Second),
		nats.MaxReconnects(-1), nats.RetryOnFailedConnect(true))...)
	if err != nil {
		return nil, nil, fmt.Errorf("MINTGATE_NATS_URL: connect %s: %w", config.RedactURL(c.NATS.URL), err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return webhook.NewFailed(js), nc.Close, nil
}

// adminWebhooksTimeout bounds one admin call's reads and writes of the
// stream.
const adminWebhooksTimeout = 10 * time.Second

// webhooksDown is the answer while the stream cannot be read.
func webhooksDown(err error) *apierr.Error {
	return apierr.Unavailable(apierr.CodeLedgerDown, "NATS JetStream (stream "+webhook.Stream+") is unavailable", apierr.RetryLedger, err)
}

// adminListFailed is GET /admin/webhooks/failed: the deliveries that
// failed every try, oldest first (at most webhook.MaxListed).
func adminListFailed(f *webhook.Failed) echo.HandlerFunc {
	return func(c echo.Context) error {
		ctx, cancel := context.WithTimeout(c.Request().Context(), adminWebhooksTimeout)
		defer cancel()
		list, err := f.List(ctx)
		if err != nil {
			return webhooksDown(err)
		}
		return c.JSON(http.StatusOK, adminFailed{Failed: list})
	}
}

// adminRedeliver is POST /admin/webhooks/failed/{webhookId}/redeliver:
// the delivery tried again from its first try, with the same webhook-id;
// it leaves the failed list. 404 not_found for an id not in it.
func adminRedeliver(d deps, f *webhook.Failed) echo.HandlerFunc {
	return func(c echo.Context) error {
		ctx, cancel := context.WithTimeout(c.Request().Context(), adminWebhooksTimeout)
		defer cancel()
		id := c.Param("webhookId")
		del, err := f.Redeliver(ctx, id)
		if errors.Is(err, webhook.ErrNotFound) {
			return apierr.New(http.StatusNotFound, apierr.CodeNotFound, "no failed webhook delivery has this id")
		}
		if err != nil {
			return webhooksDown(err)
		}
		d.log.Info("admin: webhook redelivered", "webhookId", del.ID, "tenant", del.Tenant)
		return c.JSON(http.StatusAccepted, map[string]string{"redelivering": del.ID, "tenant": del.Tenant})
	}
}

package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
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
// the stream MINTGATE_WEBHOOKS through shared/webhook's store, and ask the
// completer for a redelivery (a NATS request carrying only the webhook-id:
// the signer may not write the stream), on a NATS connection of their own
// that exists only with the admin API.

// adminFailed is GET /admin/webhooks/failed's answer: a page, and the
// cursor of the next (null on the last).
type adminFailed struct {
	Failed []webhook.Delivery `json:"failed"`
	Next   *string            `json:"next"`
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

// adminListFailed is GET /admin/webhooks/failed?cursor=&limit=: a page
// of the deliveries that failed every try, oldest first (limit 1 to
// webhook.MaxListed, default the most); 400 invalid_request for a cursor
// or limit it did not hand out.
func adminListFailed(f *webhook.Failed) echo.HandlerFunc {
	return func(c echo.Context) error {
		limit := webhook.MaxListed
		if l := c.QueryParam("limit"); l != "" {
			n, err := strconv.Atoi(l)
			if err != nil || n < 1 || n > webhook.MaxListed {
				return apierr.New(http.StatusBadRequest, apierr.CodeInvalidRequest, "limit must be an integer from 1 to %d", webhook.MaxListed)
			}
			limit = n
		}
		ctx, cancel := context.WithTimeout(c.Request().Context(), adminWebhooksTimeout)
		defer cancel()
		page, err := f.List(ctx, c.QueryParam("cursor"), limit)
		if errors.Is(err, webhook.ErrBadCursor) {
			return apierr.New(http.StatusBadRequest, apierr.CodeInvalidRequest, "cursor is not one this list handed out (its \"next\")")
		}
		if err != nil {
			return webhooksDown(err)
		}
		out := adminFailed{Failed: page.Failed}
		if page.Next != "" {
			out.Next = &page.Next
		}
		return c.JSON(http.StatusOK, out)
	}
}

// adminRedeliver is POST /admin/webhooks/failed/{webhookId}/redeliver:
// the completer tries the delivery again from its first try, with the
// same webhook-id, and takes it off the failed list. 404 not_found for an
// id not in it (or whose event MINTGATE_UPLOADS no longer keeps); 503
// while no completer answers. A signer SIGKILLed after sending the
// request leaves the redelivery done or not, as the completer got it
// (its side: webhook's Deliverer.redeliver); the list shows which.
func adminRedeliver(d deps, f *webhook.Failed) echo.HandlerFunc {
	return func(c echo.Context) error {
		ctx, cancel := context.WithTimeout(c.Request().Context(), adminWebhooksTimeout)
		defer cancel()
		id := c.Param("webhookId")
		del, err := f.Redeliver(ctx, id)
		if errors.Is(err, webhook.ErrNotFound) {
			return apierr.New(http.StatusNotFound, apierr.CodeNotFound, "no failed webhook delivery has this id, or its event is no longer kept")
		}
		if err != nil {
			return webhooksDown(err)
		}
		d.log.Info("admin: webhook redelivered", "webhookId", del.ID, "tenant", del.Tenant)
		return c.JSON(http.StatusAccepted, map[string]string{"redelivering": del.ID, "tenant": del.Tenant})
	}
}

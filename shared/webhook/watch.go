package webhook

import (
	"context"
	"time"
)

// streamEvery is how often the deliverer reads the size of
// MINTGATE_WEBHOOKS for mintgate_webhook_stream_bytes and its own stop
// at FullShare of the bound (one stream info, whatever the stream holds).
const streamEvery = 5 * time.Second

// failedRecountEvery is how often it counts the failed deliveries again
// (Failed.Count lists every failed subject: O(n)). Between, the gauge is
// a running count: one more for each delivery this completer stores as
// failed, one less for each it sends again. A recount corrects what it
// cannot see: another completer's failures and redeliveries, and records
// MaxAge removed.
const failedRecountEvery = 10 * time.Minute

// watchStream keeps mintgate_webhook_stream_bytes, _max_bytes and
// mintgate_webhook_failed current until ctx ends.
func (d *Deliverer) watchStream(ctx context.Context) {
	t := time.NewTicker(streamEvery)
	defer t.Stop()
	var counted time.Time
	for {
		if time.Since(counted) >= failedRecountEvery && d.recountFailed(ctx) {
			counted = time.Now()
		}
		d.readSize(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// readSize sets the stream's size gauges from one stream info.
func (d *Deliverer) readSize(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	info, err := StreamInfo(ctx, d.js)
	if err != nil {
		return
	}
	d.m.bytes.Set(float64(info.State.Bytes))
	d.m.maxBytes.Set(float64(max(info.Config.MaxBytes, 0)))
	full := info.Config.MaxBytes > 0 && float64(info.State.Bytes) >= FullShare*float64(info.Config.MaxBytes)
	if full != d.full.Swap(full) {
		d.log.Warn("webhooks: the stream's size bound", "full", full, "bytes", info.State.Bytes, "maxBytes", info.Config.MaxBytes,
			"then", "no new retry or failed record is stored while full; their deliveries wait, unacked, and are tried again later")
	}
}

// recountFailed sets mintgate_webhook_failed from a full count, and
// reports whether it could.
func (d *Deliverer) recountFailed(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	n, err := NewFailed(d.js).Count(ctx)
	if err != nil {
		return false
	}
	d.m.failed.Set(float64(n))
	return true
}

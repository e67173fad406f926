package main

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mintgate/mintgate/shared/events"
	"github.com/mintgate/mintgate/shared/keys"
)

// Issue 30: the events of an upload whose grant was bound to a checksum
// carry it, completed and rejected alike; one without carries none.
func TestEventsCarryTheGrantsChecksum(t *testing.T) {
	s := startGateStack(t, nil)
	sumOf := func(b []byte) string {
		d := sha256.Sum256(b)
		return base64.StdEncoding.EncodeToString(d[:])
	}
	good := realPNG(t, 32, 32)
	html := []byte("<!DOCTYPE html><html><body>hi</body></html>")
	put := func(body []byte, sum string) string {
		t.Helper()
		id := s.grantWithChecksum(t, len(body), sum)
		s.put(t, keys.Object("acme", id), "image/png", body)
		return id
	}
	goodID, htmlID, plainID := put(good, sumOf(good)), put(html, sumOf(html)), put(good, "")

	s.assertCompleted(t, goodID)
	var done events.Event
	if err := json.Unmarshal(s.stored(t, goodID)[events.Subject("acme")], &done); err != nil {
		t.Fatal(err)
	}
	if done.ChecksumSHA256 != sumOf(good) {
		t.Errorf("completed event %+v: want checksumSHA256 %s", done, sumOf(good))
	}
	s.assertRejected(t, htmlID, reasonType, len(html))
	if ev := s.rejectedEvent(t, htmlID); ev.ChecksumSHA256 != sumOf(html) {
		t.Errorf("rejected event %+v: want checksumSHA256 %s", ev, sumOf(html))
	}
	s.assertCompleted(t, plainID)
	var plain map[string]any
	if err := json.Unmarshal(s.stored(t, plainID)[events.Subject("acme")], &plain); err != nil {
		t.Fatal(err)
	}
	if _, ok := plain["checksumSHA256"]; ok {
		t.Errorf("an unchecksummed upload's event names a checksum: %v", plain)
	}
}

// grantWithChecksum writes a grant record of image/png, size bytes, bound
// to sum ("" none), as the signer's Finish does before its URL leaves,
// and returns its urlId.
func (s *gateStack) grantWithChecksum(t *testing.T, size int, sum string) string {
	t.Helper()
	ctx := context.Background()
	id := uuid.NewString()
	fields := []any{"expiresAt", time.Now().Add(time.Minute).UnixMilli(), "subject", "u:alice", "contentType", "image/png", "contentLength", size}
	if sum != "" {
		fields = append(fields, "checksumSHA256", sum)
	}
	if err := s.rdb.HSet(ctx, keys.Grant("acme", id), fields...).Err(); err != nil {
		t.Fatal(err)
	}
	s.rdb.Expire(ctx, keys.Grant("acme", id), time.Hour)
	return id
}

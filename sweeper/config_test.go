package main

import (
	"testing"
	"time"

	"github.com/mintgate/mintgate/shared/testenv"
	"github.com/mintgate/mintgate/shared/tiers"
)

// The sweeper takes the NATS URLs the signer takes (ws:// and wss://
// included), and the defaults every service shares.
func TestSettingsShareTheSignersForms(t *testing.T) {
	vars := map[string]string{
		"MINTGATE_GRANT_SECRET": testenv.GrantSecret,
		"MINTGATE_NATS_URL":     "wss://nats.example:443,ws://127.0.0.1:8080",
		"MINTGATE_S3_BUCKET":    testenv.VersityBucket,
	}
	s, err := loadSettings(func(k string) string { return vars[k] })
	if err != nil {
		t.Fatal(err)
	}
	if s.HTTPAddr != ":8082" || s.Grace != 30*time.Second || s.TrimInterval != 10*time.Second ||
		s.Tiers.Default[tiers.User].Capacity != 30 || s.TiersFile != "" {
		t.Errorf("defaults %+v", s)
	}
}

package tiers

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/mintgate/mintgate/shared/bucket"
	"github.com/mintgate/mintgate/shared/keys"
)

// The download tiers default when MINTGATE_TIERS does not name them, are
// overridden per tenant by the file beside "downloads":"tenant", and
// download_bytes is off until set; a bad "downloads" value is a bad file.
func TestDownloadTiersAndTheDownloadsEntry(t *testing.T) {
	defaults, err := Parse(Default + ",download_bytes=1GiB:1GiB/24h")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "tiers.json")
	if err := os.WriteFile(path, []byte(`{"acme":{"download":"10:1","downloads":"tenant"},"globex":{"downloads":"caller"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := NewLive(Set{Default: defaults}, path)
	if err != nil {
		t.Fatal(err)
	}
	set := l.Tiers()
	acme := set.DownloadBuckets("acme", "u:alice", 5)
	if len(acme) != 3 || acme[0].Key != keys.DownloadBucket("acme", "u:alice") || acme[0].Limit != (bucket.Limit{Capacity: 10, Rate: 1}) ||
		acme[1].Key != "rl:{t:acme}:download:tenant" || acme[1].Limit != DefaultDownloadTenant || acme[2].Units != 5 {
		t.Errorf("acme's download buckets: %+v", acme)
	}
	if g := set.DownloadBuckets("globex", "u:bob", 5); g[0].Limit != DefaultDownload {
		t.Errorf("globex's download tier: %+v, want the default", g[0].Limit)
	}
	if !set.DownloadsByTenant("acme") || set.DownloadsByTenant("globex") || set.DownloadsByTenant("initech") {
		t.Errorf("downloads by tenant: %v", set.TenantDownloads)
	}
	if bs := (Set{Default: Table{Anonymous: {}, User: {}, Tenant: {}}}).DownloadBuckets("acme", "u:a", 5); len(bs) != 2 {
		t.Errorf("download_bytes unset, yet %d buckets", len(bs))
	}
	if _, err := parseDownloads([]byte(`{"acme":{"downloads":"everyone"}}`)); err == nil {
		t.Error(`"downloads":"everyone" accepted`)
	}
}

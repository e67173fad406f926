package tiers

import (
	"fmt"

	"gopkg.in/yaml.v3"

	"github.com/mintgate/mintgate/shared/bucket"
	"github.com/mintgate/mintgate/shared/keys"
)

// The tiers of download grants (POST /uploads/{urlId}/download): each
// caller's and each tenant's, and optionally a caller's bucket of bytes
// that each grant spends its object's size from. Unlike the sign's, none
// is required in MINTGATE_TIERS: download and download_tenant default to
// DefaultDownload and DefaultDownloadTenant, download_bytes is off unless
// set.
const (
	Download       = "download"
	DownloadTenant = "download_tenant"
	DownloadBytes  = "download_bytes"
)

// The download tiers' defaults: 120 grants and 2 a second per caller,
// 6000 and 100 a second per tenant.
var (
	DefaultDownload       = bucket.Limit{Capacity: 120, Rate: 2}
	DefaultDownloadTenant = bucket.Limit{Capacity: 6000, Rate: 100}
)

// Roles of the buckets a download grant spends from (ledger credits never
// name them: a download grant is never refunded).
const (
	RoleDownload       Role = "download"
	RoleDownloadTenant Role = "download_tenant"
	RoleDownloadBytes  Role = "download_bytes"
	RoleDownloadShadow Role = "download_shadow"
)

// downloadTier is whether name is one of the download tiers, which any
// tenant may override whether or not MINTGATE_TIERS names them.
func downloadTier(name string) bool {
	return name == Download || name == DownloadTenant || name == DownloadBytes
}

// DownloadBuckets are the buckets one download grant of an object of size
// bytes spends from, all or none: the caller's download tier, the tenant's
// download_tenant and, when configured, the caller's download_bytes (Units
// size). Each is the tenant's override, else MINTGATE_TIERS', else the
// default.
func (s Set) DownloadBuckets(tenant, subject string, size int64) []RoleBucket {
	limit := func(tier string, def bucket.Limit) bucket.Limit {
		if l, ok := s.For(tenant, tier); ok {
			return l
		}
		return def
	}
	bs := []RoleBucket{
		{Role: RoleDownload, Bucket: bucket.Bucket{Key: keys.DownloadBucket(tenant, subject), Limit: limit(Download, DefaultDownload)}},
		{Role: RoleDownloadTenant, Bucket: bucket.Bucket{Key: keys.DownloadTenantBucket(tenant), Limit: limit(DownloadTenant, DefaultDownloadTenant)}},
	}
	if l, ok := s.For(tenant, DownloadBytes); ok && size > 0 {
		bs = append(bs, RoleBucket{Role: RoleDownloadBytes, Bucket: bucket.Bucket{Key: keys.DownloadByteBucket(tenant, subject), Limit: l, Units: float64(size)}})
	}
	return bs
}

// DownloadsEntry is the field of a tenant in MINTGATE_TENANT_TIERS_FILE,
// beside its tiers, that says who may have a download grant of its
// uploads: "tenant" (any caller of the tenant) or "caller" (the upload's
// own caller, the default): {"acme":{"user":"60:1","downloads":"tenant"}}.
const DownloadsEntry = "downloads"

// parseDownloads reads each tenant's downloads entry from the file's
// content b: the tenants whose uploads any of their callers may download.
func parseDownloads(b []byte) (map[string]bool, error) {
	var raw map[string]map[string]any
	if err := yaml.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("want an object of tenant → tier → \"capacity:refill\": %w", err)
	}
	var out map[string]bool
	for tenant, fields := range raw {
		v, ok := fields[DownloadsEntry]
		if !ok {
			continue
		}
		switch v {
		case "tenant", "caller":
		default:
			return nil, fmt.Errorf("tenant %q: %s must be \"tenant\" or \"caller\", not %v", tenant, DownloadsEntry, v)
		}
		if out == nil {
			out = map[string]bool{}
		}
		out[tenant] = v == "tenant"
	}
	return out, nil
}

// DownloadsByTenant is whether any caller of tenant may have a download
// grant of any of its uploads (its "downloads":"tenant"), not only the
// upload's own caller.
func (s Set) DownloadsByTenant(tenant string) bool { return s.TenantDownloads[tenant] }

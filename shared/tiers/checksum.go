package tiers

import (
	"fmt"

	"gopkg.in/yaml.v3"
)

// RequireChecksum is the field of a tenant in MINTGATE_TENANT_TIERS_FILE,
// beside its tiers, that makes its signs and multipart creates carry a
// checksum (true) or not need one whatever MINTGATE_REQUIRE_CHECKSUM says
// (false): {"acme":{"user":"60:1","requireChecksum":true}}.
const RequireChecksum = "requireChecksum"

// parseRequireChecksum reads each tenant's requireChecksum from the
// file's content b: a boolean (true or false, unquoted), or absent.
func parseRequireChecksum(b []byte) (map[string]bool, error) {
	var raw map[string]map[string]any
	if err := yaml.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("want an object of tenant → tier → \"capacity:refill\": %w", err)
	}
	var out map[string]bool
	for tenant, fields := range raw {
		v, ok := fields[RequireChecksum]
		if !ok {
			continue
		}
		on, ok := v.(bool)
		if !ok {
			return nil, fmt.Errorf("tenant %q: %s must be true or false, not %v", tenant, RequireChecksum, v)
		}
		if out == nil {
			out = map[string]bool{}
		}
		out[tenant] = on
	}
	return out, nil
}

// RequiresChecksum is whether tenant's signs and multipart creates must
// carry a checksum: its requireChecksum in the file when it has one, else
// global (MINTGATE_REQUIRE_CHECKSUM).
func (s Set) RequiresChecksum(tenant string, global bool) bool {
	if on, ok := s.Checksum[tenant]; ok {
		return on
	}
	return global
}

package tiers

import (
	"fmt"

	"github.com/mintgate/mintgate/shared/webhook"
)

// webhookEntry is the name of a tenant's webhook beside its tiers in
// MINTGATE_TENANT_TIERS_FILE.
const webhookEntry = "webhook"

// ParseWebhooks reads the tenants' "webhook":{"url":"…","secret":"whsec_…"}
// entries of MINTGATE_TENANT_TIERS_FILE's content: an absolute http or
// https URL (http only reaches a receiver with
// MINTGATE_WEBHOOK_ALLOW_PRIVATE=true, checked at each try) and a secret
// as MINTGATE_WEBHOOK_SECRET. A bad entry makes the whole file bad, as a
// bad tier does: the last good file stays. Errors never quote a secret.
func ParseWebhooks(b []byte) (map[string]webhook.Endpoint, error) {
	raw, err := parseRaw(b)
	if err != nil {
		return nil, err
	}
	var out map[string]webhook.Endpoint
	for tenant, entries := range raw {
		node, ok := entries[webhookEntry]
		if !ok {
			continue
		}
		var w struct {
			URL    string `yaml:"url"`
			Secret string `yaml:"secret"`
		}
		if err := node.Decode(&w); err != nil {
			return nil, fmt.Errorf("tenant %q: webhook: want {\"url\":\"https://…\",\"secret\":\"whsec_…\"}", tenant)
		}
		if err := webhook.CheckURL(w.URL, true); err != nil {
			return nil, fmt.Errorf("tenant %q: webhook: url: %w", tenant, err)
		}
		secret, err := webhook.ParseSecret(w.Secret)
		if err != nil {
			return nil, fmt.Errorf("tenant %q: webhook: secret: %w", tenant, err)
		}
		if out == nil {
			out = map[string]webhook.Endpoint{}
		}
		out[tenant] = webhook.Endpoint{URL: w.URL, Secret: secret}
	}
	return out, nil
}

// Webhook is the tenant's own webhook endpoint in the file now in force,
// if it names one.
func (l *Live) Webhook(tenant string) (webhook.Endpoint, bool) {
	ep, ok := l.Tiers().Webhooks[tenant]
	return ep, ok
}

package tiers

import (
	"github.com/mintgate/mintgate/shared/bucket"
	"github.com/mintgate/mintgate/shared/config"
)

// Limits is the bucket shapes of the signer and the sweeper: the default
// tiers with MINTGATE_TENANT_TIERS' overrides, and the file of more
// overrides re-read while the service runs.
type Limits struct {
	// Tiers is MINTGATE_TIERS with MINTGATE_TENANT_TIERS' overrides.
	Tiers Set
	// TiersFile is MINTGATE_TENANT_TIERS_FILE (empty: none), read by
	// NewLive.
	TiersFile string
}

// ReadLimits reads MINTGATE_TIERS (default Default), MINTGATE_TENANT_TIERS
// and MINTGATE_TENANT_TIERS_FILE.
func ReadLimits(e *config.Env) Limits {
	return Limits{
		Tiers:     ReadTenants(e, "MINTGATE_TENANT_TIERS", Read(e, "MINTGATE_TIERS", Default)),
		TiersFile: e.String("MINTGATE_TENANT_TIERS_FILE", ""),
	}
}

// Read reads a MINTGATE_TIERS-style variable; a bad one is a problem of e,
// and the default table stands in for it.
func Read(e *config.Env, name, def string) Table {
	t, err := Parse(e.String(name, def))
	if err != nil {
		e.Fail(name, "%v", err)
		t, _ = Parse(Default)
	}
	return t
}

// ReadTenants reads a MINTGATE_TENANT_TIERS-style variable (default: no
// overrides) on top of defaults.
func ReadTenants(e *config.Env, name string, defaults Table) Set {
	set := Set{Default: defaults}
	tenants, err := ParseTenants(e.String(name, ""), defaults)
	if err != nil {
		e.Fail(name, "%v", err)
		return set
	}
	if len(tenants) > 0 {
		set.Tenants = tenants
	}
	return set
}

// ReadShape reads one bucket shape, "capacity:refill" (refill as in
// MINTGATE_TIERS), or "off"; ok is false for off.
func ReadShape(e *config.Env, name, def string) (l bucket.Limit, ok bool) {
	v := e.String(name, def)
	if v == "off" {
		return bucket.Limit{}, false
	}
	_, l, err := parseTierItem(name + "=" + v)
	if err != nil {
		e.Fail(name, "%q: want capacity:refill (such as 30:10 or 5/60s as the refill) or off", v)
		_, l, _ = parseTierItem(name + "=" + def)
	}
	return l, true
}

.PHONY: up test tools bench chaos

# Run the whole stack locally on loopback; Ctrl-C stops everything it started.
up:
	deploy/local/up.sh

# Run every check and test (what CI runs).
test:
	deploy/local/test.sh

tools:
	deploy/local/tools.sh

# Start real servers on loopback and print the side-by-side performance
# table (also artifacts/bench.md); see docs/performance.md.
bench:
	deploy/local/bench.sh

# The fault soak's long form (its short form runs in make test): at least 10
# kills of every process kind against a single nats-server, then against a
# 3-node cluster, with single PUTs and multipart grants in the load; prints
# the invariant table of each. Extra flags go in
# CHAOS_ARGS, e.g. make chaos CHAOS_ARGS='-chaos.seed=42 -chaos.topology=r3'.
chaos:
	deploy/local/tools.sh redis nats versitygw fauxqs
	cd integration && go test ./chaos -run '^TestChaos$$' -count=1 -v -timeout 60m -chaos.long $(CHAOS_ARGS)

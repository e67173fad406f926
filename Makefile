.PHONY: up test tools bench

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

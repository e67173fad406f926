.PHONY: up test tools

# Run the whole stack locally on loopback; Ctrl-C stops everything it started.
up:
	deploy/local/up.sh

# Run every check and test (what CI runs).
test:
	deploy/local/test.sh

tools:
	deploy/local/tools.sh

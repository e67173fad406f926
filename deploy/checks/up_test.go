package checks_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// upAlone copies deploy/local/up.sh, and nothing else, into a temporary
// tree: run there it finds no tools.sh and no sources, so it stops at the
// first thing it would install or start. Its .stack/ is the tree's.
func upAlone(t *testing.T) (dir string, run func() (string, int)) {
	t.Helper()
	dir = t.TempDir()
	script := filepath.Join(dir, "deploy", "local", "up.sh")
	if err := os.MkdirAll(filepath.Join(dir, "deploy", "local"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(script, []byte(readFile(t, "deploy/local/up.sh")), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir, func() (string, int) {
		cmd := exec.Command("bash", script)
		cmd.Env = append(os.Environ(), "MINTGATE_TOOLS="+filepath.Join(dir, ".tools"))
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Fatal(err)
		}
		return string(out), cmd.ProcessState.ExitCode()
	}
}

// startAs starts a process whose command line reads like argv0's (sleeping
// for a minute), stopped when the test ends.
func startAs(t *testing.T, argv0 string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("bash", "-c", "sleep 60; :", argv0)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd
}

func writePidFile(t *testing.T, dir string, pid int) string {
	t.Helper()
	p := filepath.Join(dir, ".stack", "up.pid")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(strconv.Itoa(pid)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// A second make up while one runs refuses, naming the first's PID, and
// leaves the first alone: its pid file and its process.
func TestUpRefusesWhileAnotherRuns(t *testing.T) {
	dir, run := upAlone(t)
	first := startAs(t, "deploy/local/up.sh")
	pidFile := writePidFile(t, dir, first.Process.Pid)

	out, code := run()
	want := "already running (pid " + strconv.Itoa(first.Process.Pid) + ")"
	if code != 1 || !strings.Contains(out, want) {
		t.Fatalf("up.sh exited %d with:\n%s\nwant 1 and %q", code, out, want)
	}
	if b, err := os.ReadFile(pidFile); err != nil || strings.TrimSpace(string(b)) != strconv.Itoa(first.Process.Pid) {
		t.Errorf("the running stack's pid file is now %q (%v)", b, err)
	}
	if first.ProcessState != nil {
		t.Error("the running stack's process ended")
	}
}

// A pid file left by an up.sh that is gone, or whose PID now belongs to
// another program, does not block a start; the new run claims the file
// and removes it when it ends.
func TestUpIgnoresAStalePidFile(t *testing.T) {
	ended := exec.Command("true")
	if err := ended.Run(); err != nil {
		t.Fatal(err)
	}
	for name, pid := range map[string]int{
		"process gone":           ended.Process.Pid,
		"PID of another program": startAs(t, "not-the-stack").Process.Pid,
	} {
		t.Run(name, func(t *testing.T) {
			dir, run := upAlone(t)
			pidFile := writePidFile(t, dir, pid)
			out, _ := run()
			if strings.Contains(out, "already running") {
				t.Fatalf("a stale pid file blocked the start:\n%s", out)
			}
			if _, err := os.Stat(pidFile); !os.IsNotExist(err) {
				t.Errorf("the pid file is still there after the run (%v):\n%s", err, out)
			}
		})
	}
}

// TestUpMintsTheDevTokenForTheSignersAudience: the local signer checks the
// audience and issuer of every token (issue 17), and the dev token up.sh
// prints is minted with exactly those, so the README's curl still works.
func TestUpMintsTheDevTokenForTheSignersAudience(t *testing.T) {
	up := readFile(t, "deploy/local/up.sh")
	// The signer's start command, continuation lines joined.
	start := regexp.MustCompile(`(?m)^start signer ((?:.*\\\n)*.*)$`).FindStringSubmatch(up)
	if start == nil {
		t.Fatal("up.sh: no 'start signer' command")
	}
	mint := regexp.MustCompile(`(?m)^token=\$\("\$stack/bin/devtoken" (.*)\)$`).FindStringSubmatch(up)
	if mint == nil {
		t.Fatal("up.sh: no devtoken call")
	}
	for variable, flag := range map[string]string{"MINTGATE_JWT_AUDIENCE": "-aud", "MINTGATE_JWT_ISSUER": "-iss"} {
		m := regexp.MustCompile(variable + `=("?\$\w+"?|\S+)`).FindStringSubmatch(start[1])
		if m == nil {
			t.Errorf("up.sh: the signer starts without %s", variable)
			continue
		}
		if !strings.Contains(mint[1], flag+" "+m[1]) {
			t.Errorf("up.sh: the dev token is not minted with %s %s, the signer's %s", flag, m[1], variable)
		}
	}
}

// TestUpWiresTheWebhookReceiver: make up starts the webhook receiver and
// points the completer at it, with the secret the receiver verifies with
// and the private addresses a loopback receiver needs, so the README's
// upload shows its webhook arrive at /deliveries.
func TestUpWiresTheWebhookReceiver(t *testing.T) {
	up := readFile(t, "deploy/local/up.sh")
	command := func(name string) string {
		m := regexp.MustCompile(`(?m)^start ` + name + ` ((?:.*\\\n)*.*)$`).FindStringSubmatch(up)
		if m == nil {
			t.Fatalf("up.sh: no 'start %s' command", name)
		}
		return m[1]
	}
	receiver, completer := command("webhook"), command("completer")
	if !strings.Contains(receiver, "deploy/webhook-receiver/receiver.mjs") ||
		!strings.Contains(receiver, `--addr "127.0.0.1:$p_webhook"`) {
		t.Errorf("up.sh: the receiver does not run deploy/webhook-receiver on $p_webhook:\n%s", receiver)
	}
	file := regexp.MustCompile(`--secret-file "([^"]+)"`).FindStringSubmatch(receiver)
	if file == nil {
		t.Fatalf("up.sh: the receiver has no --secret-file:\n%s", receiver)
	}
	for _, want := range []string{
		`MINTGATE_WEBHOOK_URL="http://127.0.0.1:$p_webhook/"`,
		`MINTGATE_WEBHOOK_SECRET="$(cat "` + file[1] + `")"`,
		`MINTGATE_WEBHOOK_ALLOW_PRIVATE=true`,
		`MINTGATE_NATS_URL=`, // webhooks are delivered from the events stream
	} {
		if !strings.Contains(completer, want) {
			t.Errorf("up.sh: the completer starts without %s", want)
		}
	}
	if !strings.Contains(up, "$p_webhook/deliveries") {
		t.Error("up.sh: the ready message does not say where the webhooks arrive")
	}
}

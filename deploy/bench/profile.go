package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
)

// cpuArea is one part of the signer's work, found in a CPU profile by the
// functions on a sample's stack (pprof's -focus, minus -ignore).
type cpuArea struct {
	name, focus, ignore string
}

// cpuAreas are what a sign spends CPU on. Packages are matched where a
// library's stack can be deeper than the profiler keeps, so that its
// samples lose the frames above it; presigning is matched by both, for
// profiles of signers from before and after it left the SDK's middleware.
var cpuAreas = []cpuArea{
	{"presigning: SigV4 (`presigner.put`; before: the AWS SDK's `PresignPutObject` middleware)", `\(\*presigner\)\.put|aws-sdk-go-v2|smithy-go`, ""},
	{"Redis client: the decision script and the completing transaction (go-redis, its socket I/O)", `go-redis`, ""},
	{"ledger client: JetStream publish, ack (nats.go, ledger)", `nats-io|shared/ledger`, ""},
	{"HTTP server around the handler: parse, write, socket I/O (net/http)", `net/http\.\(\*conn\)\.serve`, `labstack/echo`},
	{"JSON: request, grant, JWT claims (encoding/json)", `encoding/json`, ""},
	{"JWT verification (golang-jwt)", `golang-jwt`, ""},
	{"garbage collection: background mark and assists", `gcBgMarkWorker|gcAssistAlloc`, ""},
	{"*of all the above:* syscalls", `syscall\.(Raw)?Syscall`, ""},
	{"*of all the above:* allocation (`mallocgc`)", `runtime\.mallocgc`, ""},
}

// profileSigners takes a CPU profile of each signer at saturation, one
// after the other, from its MINTGATE_PPROF_ADDR, writes each and its
// `go tool pprof -top` into the profiles folder, and adds to the report how
// their samples divide among cpuAreas.
func (b *bench) profileSigners(ctx context.Context, rp *report, signers ...*signer) error {
	dir := filepath.Join(b.root, b.profiles)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	head := "| where the signer's CPU goes (share of profile samples) |"
	rule := "|---|"
	shares := make([][]string, len(cpuAreas))
	used := "| CPU the signer used while profiled |"
	for _, s := range signers {
		path, rate, err := b.profile(ctx, s, dir)
		if err != nil {
			rp.notes = append(rp.notes, fmt.Sprintf("CPU profile of %s: not taken (%v); does this binary serve MINTGATE_PPROF_ADDR?", s.name, err))
			continue
		}
		rel, _ := filepath.Rel(b.root, path)
		head += fmt.Sprintf(" %s, %s (`%s`) |", s.name, rate, rel)
		rule += "--:|"
		cores, err := coresUsed(ctx, b.root, path)
		if err != nil {
			return err
		}
		used += fmt.Sprintf(" %.2f of %d cores |", cores, runtime.NumCPU())
		for i, a := range cpuAreas {
			share, err := focusShare(ctx, b.root, path, a)
			if err != nil {
				return err
			}
			shares[i] = append(shares[i], fmt.Sprintf("%.0f %%", share))
		}
	}
	if len(shares[0]) == 0 {
		return nil
	}
	rp.profile = append(rp.profile, head, rule, used)
	for i, a := range cpuAreas {
		rp.profile = append(rp.profile, "| "+a.name+" | "+strings.Join(shares[i], " | ")+" |")
	}
	return nil
}

// profile runs s at saturation while it profiles itself, and writes the
// profile and its top list. It returns the profile's path and the rate.
func (b *bench) profile(ctx context.Context, s *signer, dir string) (string, string, error) {
	b.say(fmt.Sprintf("profiling %s for %v at saturation", s.name, b.plan.profileDur))
	url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", s.prof, int(b.plan.profileDur.Seconds()))
	var (
		prof []byte
		perr error
		wg   sync.WaitGroup
	)
	wg.Go(func() { prof, perr = fetch(ctx, url) })
	res := closedLoop(ctx, b.plan.callers, b.plan.profileDur+time.Second, sign(b.client, s.base, tokens("prof-", b.plan.callers, benchTenants)))
	wg.Wait()
	if perr != nil {
		return "", "", perr
	}
	path := filepath.Join(dir, "signer-cpu-"+strings.TrimPrefix(s.name, "signer-")+".pprof")
	if err := os.WriteFile(path, prof, 0o644); err != nil {
		return "", "", err
	}
	top, err := pprof(ctx, b.root, "-top", "-nodecount=40", path)
	if err != nil {
		return "", "", err
	}
	if err := os.WriteFile(strings.TrimSuffix(path, ".pprof")+"-top.txt", []byte(top), 0o644); err != nil {
		return "", "", err
	}
	return path, fmtRate(res.rate()), nil
}

var (
	shownRE   = regexp.MustCompile(`Showing nodes accounting for ([0-9.]+)(ms|s|us|µs|min)?, ([0-9.]+)% of`)
	durRE     = regexp.MustCompile(`Duration: ([0-9.]+(?:ms|s|m|h)).*Total samples = ([0-9.]+(?:ms|s|m|h|us|µs))`)
	noSamples = "no samples"
)

// focusShare is the per cent of the profile's samples with area's functions
// on their stack.
func focusShare(ctx context.Context, root, path string, a cpuArea) (float64, error) {
	args := []string{"-top", "-focus=" + a.focus}
	if a.ignore != "" {
		args = append(args, "-ignore="+a.ignore)
	}
	out, err := pprof(ctx, root, append(args, path)...)
	if err != nil {
		if strings.Contains(out, noSamples) || strings.Contains(out, "no matches found") {
			return 0, nil
		}
		return 0, err
	}
	m := shownRE.FindStringSubmatch(out)
	if m == nil {
		return 0, nil // nothing matched
	}
	return strconv.ParseFloat(m[3], 64)
}

// coresUsed is the profile's samples over its duration: how many cores
// the signer kept busy.
func coresUsed(ctx context.Context, root, path string) (float64, error) {
	out, err := pprof(ctx, root, "-top", "-nodecount=1", path)
	if err != nil {
		return 0, err
	}
	m := durRE.FindStringSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("%s: no duration and total in %q", path, out)
	}
	d, err1 := time.ParseDuration(m[1])
	t, err2 := time.ParseDuration(strings.ReplaceAll(m[2], "µs", "us"))
	if err := firstErr(err1, err2); err != nil || d <= 0 {
		return 0, fmt.Errorf("%s: %q: %v", path, m[0], err)
	}
	return t.Seconds() / d.Seconds(), nil
}

func pprof(ctx context.Context, root string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", append([]string{"tool", "pprof"}, args...)...)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("go tool pprof %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

func fetch(ctx context.Context, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err == nil && res.StatusCode != http.StatusOK {
		err = fmt.Errorf("%s: %d", url, res.StatusCode)
	}
	return body, err
}

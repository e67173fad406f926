package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"
)

// maxAnswer is how much of a receiver's answer is read: enough for an
// error message, never a receiver's whole page.
const maxAnswer = 1 << 10

// poster makes the HTTP tries. It never follows a redirect (a 3xx is a
// failed try: an endpoint that moved must be configured again), never
// goes through a proxy (the guard checks the address it connects to),
// and reads at most maxAnswer bytes of an answer.
type poster struct {
	client  *http.Client
	timeout time.Duration
}

func newPoster(timeout time.Duration, allowPrivate bool) *poster {
	tr := &http.Transport{
		Proxy:                 nil,
		DialContext:           dialer(timeout, allowPrivate).DialContext,
		TLSClientConfig:       &tls.Config{MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout:   timeout,
		ResponseHeaderTimeout: timeout,
		MaxIdleConnsPerHost:   perEndpoint,
		IdleConnTimeout:       90 * time.Second,
		ForceAttemptHTTP2:     true,
	}
	return &poster{timeout: timeout, client: &http.Client{
		Transport:     tr,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

// try is one try's result: the status (0 when there was no answer) and,
// unless it delivered, why not.
type try struct {
	Status int
	Err    error
}

// delivered is any 2xx.
func (t try) delivered() bool { return t.Err == nil && t.Status >= 200 && t.Status < 300 }

// post sends body to ep, signed for id at now.
func (p *poster) post(ctx context.Context, ep Endpoint, id string, now time.Time, body []byte) try {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ep.URL, bytes.NewReader(body))
	if err != nil {
		return try{Err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "mintgate-webhooks/1")
	req.Header.Set(HeaderID, id)
	req.Header.Set(HeaderTimestamp, fmt.Sprint(now.Unix()))
	req.Header.Set(HeaderSignature, ep.Secret.Sign(id, now, body))
	resp, err := p.client.Do(req)
	if err != nil {
		return try{Err: scrubURL(err)}
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	t := try{Status: resp.StatusCode}
	if resp.StatusCode < 200 || resp.StatusCode >= 300 {
		t.Err = fmt.Errorf("answered %d: %s", resp.StatusCode, printable(answer, 200))
	}
	return t
}

// scrubURL drops the URL from a client error (it may carry credentials),
// keeping what went wrong.
func scrubURL(err error) error {
	if ue, ok := errors.AsType[*url.Error](err); ok {
		return ue.Err
	}
	return err
}

// printable is up to n characters of b as text for a log or a record.
func printable(b []byte, n int) string {
	s := strings.ToValidUTF8(string(b), "?")
	if utf8.RuneCountInString(s) > n {
		s = string([]rune(s)[:n]) + "…"
	}
	return strings.TrimSpace(s)
}

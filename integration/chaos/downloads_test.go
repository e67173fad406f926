package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Downloads (POST /uploads/{urlId}/download, issue 40): once the soak has
// settled and every verdict is known, each URL received asks for its
// download as its own caller. What completed gets a URL (201), and a
// sample of those URLs is fetched: S3 answers the exact bytes uploaded.
// What the gate rejected is 410 upload_rejected, what is still verifying
// 409 not_completed, anything else (refunded, never uploaded) 404. A 201
// for anything not completed is the row that must stay at 0.

// dlSample is how many of the 201s the soak fetches.
const dlSample = 25

// dlAnswer is the signer's answer to one URL's download request, and,
// for a sampled 201, what its GET returned.
type dlAnswer struct {
	status  int
	code    string // the error code of a 4xx/5xx
	url     string // the presigned GET of a 201
	fetched bool   // the GET was made (a sampled 201)
	same    bool   // the GET answered 200 with the exact bytes uploaded
	err     string // a transport error or the GET's status
}

// askDownloads asks every URL received for its download, eight at a time
// on the first signer, and fetches the first dlSample URLs it is given.
func (st *stack) askDownloads(ctx context.Context, res result) ([]dlAnswer, error) {
	out := make([]dlAnswer, len(res.urls))
	tokens := map[[2]string]string{}
	for _, u := range res.urls {
		k := [2]string{u.tenant, u.user}
		if _, ok := tokens[k]; ok {
			continue
		}
		tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
			"sub": u.user, "tenant_id": u.tenant, "exp": time.Now().Add(time.Hour).Unix(),
		}).SignedString(st.jwtSecret)
		if err != nil {
			return nil, err
		}
		tokens[k] = tok
	}
	hc := &http.Client{Timeout: 10 * time.Second}
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		sampled int
		sem     = make(chan struct{}, 8)
	)
	for i, u := range res.urls {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			a := askDownload(ctx, hc, st.signers[0].URL, u.urlID, tokens[[2]string{u.tenant, u.user}])
			if a.status == http.StatusCreated {
				mu.Lock()
				sample := sampled < dlSample
				sampled++
				mu.Unlock()
				if sample {
					a.fetched = true
					a.same, a.err = fetchEquals(ctx, hc, a.url, body(u.size, u.wrong))
				}
			}
			out[i] = a
		})
	}
	wg.Wait()
	return out, ctx.Err()
}

// askDownload sends one POST /uploads/{urlID}/download with token.
func askDownload(ctx context.Context, hc *http.Client, base, urlID, token string) dlAnswer {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/uploads/"+urlID+"/download", nil)
	if err != nil {
		return dlAnswer{err: err.Error()}
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := hc.Do(req)
	if err != nil {
		return dlAnswer{err: err.Error()}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return dlAnswer{status: resp.StatusCode, err: err.Error()}
	}
	var ans struct {
		URL   string `json:"url"`
		Error string `json:"error"`
	}
	_ = json.Unmarshal(raw, &ans) // a body that is not JSON leaves both empty: the status says enough
	return dlAnswer{status: resp.StatusCode, code: ans.Error, url: ans.URL}
}

// fetchEquals GETs url and reports whether it answered 200 with want.
func fetchEquals(ctx context.Context, hc *http.Client, url string, want []byte) (bool, string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false, err.Error()
	}
	resp, err := hc.Do(req)
	if err != nil {
		return false, err.Error()
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err != nil {
		return false, err.Error()
	}
	if resp.StatusCode != http.StatusOK {
		return false, fmt.Sprintf("GET %d", resp.StatusCode)
	}
	if !bytes.Equal(got, want) {
		return false, fmt.Sprintf("GET 200 with %d bytes, want %d", len(got), len(want))
	}
	return true, ""
}

// wantDownload is the answer a download of an upload with outcome o must
// get: 201 completed, 410 rejected, 409 verifying (or verified), 404
// without a done marker (refunded or never uploaded).
func wantDownload(o outcome) int {
	_, rejected := o.rejected()
	switch {
	case o.completed():
		return http.StatusCreated
	case rejected:
		return http.StatusGone
	case o.done:
		return http.StatusConflict
	}
	return http.StatusNotFound
}

// checkDownloads: no URL for what is not completed; every answer as the
// verdict says (a 429 is a short download bucket: not judged, counted);
// every sampled URL gives back the exact bytes uploaded.
func (r *report) checkDownloads(res result, outs []outcome, ans []dlAnswer) {
	var granted, leaked, wrong, limited, fetched, differ int
	statuses := map[string]int{}
	for i, u := range res.urls {
		o, a := outs[i], ans[i]
		statuses[fmt.Sprintf("%d %s", a.status, a.code)]++
		want := wantDownload(o)
		switch {
		case a.status == http.StatusTooManyRequests:
			limited++
			continue
		case a.status == http.StatusCreated && want != http.StatusCreated:
			leaked++
			r.example(fmt.Sprintf("download URL for an upload not completed (%d)", want), u, o)
		case a.status != want:
			wrong++
			r.example(fmt.Sprintf("download answered %d %s %s, want %d", a.status, a.code, a.err, want), u, o)
		}
		if a.status == http.StatusCreated {
			granted++
		}
		if a.fetched {
			fetched++
			if !a.same {
				differ++
				r.example("downloaded bytes differ ("+a.err+")", u, o)
			}
		}
	}
	r.summary = append(r.summary, fmt.Sprintf("downloads: %d URLs asked, %d granted, %d fetched; answers: %s",
		len(ans), granted, fetched, answers(statuses)))
	r.add("download URL for an upload not completed (rejected, verifying, refunded)", fmt.Sprint(leaked), "0", leaked == 0)
	r.add("download answer not as its verdict (201 completed, 410 rejected, 409 verifying, 404 else)",
		fmt.Sprintf("%d (%d short-bucket 429s not judged)", wrong, limited), "0", wrong == 0)
	r.add("downloaded bytes not the upload's", fmt.Sprintf("%d of %d fetched", differ, fetched), "0", differ == 0 && (fetched > 0 || granted == 0))
}

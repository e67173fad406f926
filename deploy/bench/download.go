package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/mintgate/mintgate/shared/keys"
	"github.com/mintgate/mintgate/shared/quota"
)

// downloadUploads is how many completed uploads the download row asks
// for, in turn.
const downloadUploads = 2000

// completedUpload is one upload the download row asks for: its caller's
// token and its urlId.
type completedUpload struct{ tok, urlID string }

// completeUploads signs n URLs on base's signer, spread over the users of
// toks, and marks each completed in Redis as the completer does when the
// gate passes it (its done marker "1"): the uploads a download row asks
// for, without S3 (a download grant is presigned locally).
func completeUploads(ctx context.Context, client *http.Client, rdb *redis.Client, base string, toks []string, n int) ([]completedUpload, error) {
	out := make([]completedUpload, 0, n)
	pipe := rdb.Pipeline()
	for i := range n {
		tok := toks[i%len(toks)]
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/uploads/sign", strings.NewReader(signBody))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Idempotency-Key", newKey())
		res, err := client.Do(req)
		if err != nil {
			return nil, err
		}
		var s struct {
			URLID string `json:"urlId"`
		}
		err = json.NewDecoder(res.Body).Decode(&s)
		res.Body.Close()
		if err != nil || res.StatusCode != http.StatusCreated || s.URLID == "" {
			return nil, fmt.Errorf("sign for the download row: %d %v", res.StatusCode, err)
		}
		pipe.Set(ctx, keys.Done(tenantOf(i, len(toks)), s.URLID), quota.DoneCompleted, 0)
		out = append(out, completedUpload{tok, s.URLID})
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("mark the download row's uploads completed: %w", err)
	}
	return out, nil
}

// tenantOf is the tenant of user i of tokens(prefix, n, benchTenants).
func tenantOf(i, n int) string { return "t" + strconv.Itoa(i%n%benchTenants) }

// download is POST /uploads/{urlId}/download of ups in turn, without an
// Idempotency-Key: each a fresh grant, its buckets spent.
func download(client *http.Client, base string, ups []completedUpload) op {
	return func(ctx context.Context, i int) (string, error) {
		u := ups[i%len(ups)]
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/uploads/"+u.urlID+"/download", nil)
		if err != nil {
			return "", err
		}
		req.Header.Set("Authorization", "Bearer "+u.tok)
		res, err := client.Do(req)
		if err != nil {
			return "", err
		}
		defer res.Body.Close()
		_, err = io.Copy(io.Discard, res.Body)
		return strconv.Itoa(res.StatusCode), err
	}
}

package integration

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/target"
	"github.com/chromedp/chromedp"
)

// browserDownloadLink is the newest upload's download link, which the demo
// page adds once the signer says the upload completed.
const browserDownloadLink = `#uploads > li a.download`

// browserDownload clicks the newest upload's download link as a user
// does: the page asks the signer for a presigned GET (POST
// /uploads/{urlId}/download) and opens it in a new tab. The test follows
// that tab: it must show the object S3 holds, as file's exact bytes, of
// type wantType (the type signed and verified, which the URL pins).
func browserDownload(t *testing.T, tab context.Context, file, wantType string) {
	t.Helper()
	want, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	browserPoll[bool](t, tab, "the download link", fmt.Sprintf(`!!document.querySelector(%q)`, browserDownloadLink), 10*time.Second)
	opened := chromedp.WaitNewTarget(tab, func(i *target.Info) bool { return strings.Contains(i.URL, "X-Amz-Signature=") })
	if err := chromedp.Do(tab, chromedp.Click(chromedp.CSS(browserDownloadLink))); err != nil {
		t.Fatalf("click the download link: %v", err)
	}
	var id target.ID
	select {
	case id = <-opened:
	case <-time.After(30 * time.Second):
		t.Fatalf("the download link opened no tab within 30 s (status %q)", browserStatus(tab))
	}
	if id == "" {
		t.Fatal("the download link's tab: the page's tab is gone")
	}
	dl, cancel := chromedp.NewContext(tab, chromedp.WithTargetID(id))
	defer cancel()
	const loaded = `document.readyState === 'complete' && location.href.includes('X-Amz-Signature=') ? location.href : false`
	href := browserPoll[string](t, dl, "the download's tab to load", loaded, 30*time.Second)
	if link := browserPoll[string](t, tab, "the link's URL", fmt.Sprintf(`document.querySelector(%q).dataset.url || false`, browserDownloadLink), 5*time.Second); link != href {
		t.Errorf("the tab opened %s; the link was given %s", href, link)
	}
	// The tab reads its own URL again, same-origin now, and digests what
	// S3 answers: the bytes the tab shows are the ones uploaded.
	const read = `fetch(location.href).then(async r => {
		const d = new Uint8Array(await crypto.subtle.digest('SHA-256', await r.arrayBuffer()));
		return r.status + ' ' + document.contentType + ' ' + Array.from(d, x => x.toString(16).padStart(2, '0')).join('');
	})`
	got, err := chromedp.Run(dl, chromedp.Evaluate[string](read, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("read the download in its tab: %v", err)
	}
	sum := sha256.Sum256(want)
	if w := "200 " + wantType + " " + hex.EncodeToString(sum[:]); got != w {
		t.Fatalf("the download's tab reads %q; want %q (the %d bytes uploaded)", got, w, len(want))
	}
	browserShot(t, dl, "download")
	t.Logf("the download link opened %d bytes of %s", len(want), wantType)
}

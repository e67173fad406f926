package gather_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/mintgate/mintgate/shared/gather"
)

// A batch function answers each request of its batch, in order; callers
// of one lane share its calls.
func Example() {
	g := gather.New(gather.Config{Window: time.Millisecond, MaxBatch: 16},
		func(_ context.Context, words []string) []string {
			out := make([]string, len(words))
			for i, w := range words {
				out[i] = strings.ToUpper(w)
			}
			return out
		})
	defer g.Close()

	var wg sync.WaitGroup
	answers := make([]string, 3)
	for i, w := range []string{"a", "b", "c"} {
		wg.Go(func() {
			answers[i], _ = g.Do(context.Background(), "tenant-1", w)
		})
	}
	wg.Wait()
	batches, requests := g.Stats()
	fmt.Println(answers, requests, batches <= requests)
	// Output: [A B C] 3 true
}

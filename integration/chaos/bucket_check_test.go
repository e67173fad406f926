package chaos

import (
	"fmt"
	"math"
	"strconv"
	"testing"
)

// The byte tallies read a bucket of bytes against its seed, its refill
// since the seed and the bytes uploaded, as the bucket script leaves it
// (tokens "%.6f", stamp in ms); a missing key is a full bucket.
func TestByteTallyRows(t *testing.T) {
	const seeded = int64(1_750_000_000_000)
	l := tenantBytesTier
	// stored is the hash the script writes after refilling for ms since
	// the seed and spending spent in all.
	stored := func(ms, spent int64) storedBucket {
		tok := byteSeed(l) + float64(ms)*l.rate/1000 - float64(spent)
		v, err := strconv.ParseFloat(fmt.Sprintf("%.6f", tok), 64)
		if err != nil {
			t.Fatal(err)
		}
		return storedBucket{tokens: v, stamp: seeded + ms, found: true}
	}
	for _, c := range []struct {
		name     string
		b        storedBucket
		uploaded int64
		want     int // bytes above (+) or below (−) what the bucket may hold
	}{
		{"untouched", stored(0, 0), 0, 0},
		{"uploads spent, an hour's refill", stored(3_600_000, 5<<20+77), 5<<20 + 77, 0},
		{"a refund given twice", stored(90_000, 1000-256), 1000, 256},
		{"a refund lost", stored(90_000, 1000+40), 1000, -40},
		{"a stamp that lags the seed adds no refill", storedBucket{tokens: byteSeed(l) - 10, stamp: seeded - 5000, found: true}, 10, 0},
		{"missing: a full bucket", storedBucket{}, 0, int(l.capacity - byteSeed(l))},
	} {
		t.Run(c.name, func(t *testing.T) {
			excess, _ := byteExcess(c.b, l, seeded, c.uploaded)
			if got := int(math.Round(excess)); got != c.want || math.Abs(excess-float64(c.want)) > 0.01 {
				t.Fatalf("excess %.6f, want %d", excess, c.want)
			}
		})
	}

	// A whole run's refill, an hour of the long soak: well under what the
	// seed leaves below capacity, so the refill never stops at it.
	if _, refill := byteExcess(stored(3_600_000, 0), l, seeded, 0); refill > l.capacity-byteSeed(l) || refill < 1 {
		t.Fatalf("refill of an hour %.1f B", refill)
	}
}

// The bucket rows fail on a token or a byte minted, and on more tokens or
// bytes lost than the signer kills put at risk.
func TestBucketRows(t *testing.T) {
	for _, c := range []struct {
		name         string
		b            bucketTallies
		exposed      int
		exposedBytes int64
		fail         []string
	}{
		{"exact", bucketTallies{}, 0, 0, nil},
		{"losses within the risk", bucketTallies{users: tally{short: 2}, tenants: tally{short: 2}, userBytes: tally{short: 300}, tenantBytes: tally{short: 300}}, 2, 300, nil},
		{"a token minted", bucketTallies{tenants: tally{minted: 1, mintedIn: 1}}, 0, 0,
			[]string{"no token minted (final > capacity − uploads − multipart objects)"}},
		{"tokens lost", bucketTallies{users: tally{short: 3}}, 2, 1 << 20, []string{"no refund lost (tokens never given back)"}},
		{"a byte minted", bucketTallies{userBytes: tally{minted: 1, mintedIn: 1}}, 0, 0,
			[]string{"no byte minted (final bytes > seeded + refill − bytes uploaded)"}},
		{"bytes lost", bucketTallies{tenantBytes: tally{short: 301}}, 5, 300, []string{"no byte refund lost (bytes never given back)"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := &report{}
			r.checkBuckets(c.b, c.exposed, c.exposedBytes)
			var failed []string
			for _, x := range r.rows {
				if !x.ok {
					failed = append(failed, x.name)
				}
			}
			if fmt.Sprint(failed) != fmt.Sprint(c.fail) {
				t.Fatalf("failed rows %q, want %q", failed, c.fail)
			}
		})
	}
}

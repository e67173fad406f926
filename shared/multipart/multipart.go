// Package multipart is what mintgate does with S3 multipart uploads: the
// layout of a grant's parts (Layout), and the S3 calls of a multipart
// grant's life (Uploads): create, sign a part, list, complete with the
// total checked and create-only, abort, and End, which closes an upload
// and says how it ended.
//
// S3 does not reliably arbitrate between a complete and an abort of one
// upload that run at once: versitygw may let both succeed, or remove the
// upload before the completed object appears. So they never run at once:
// the callers claim the grant first (quota.Store.ClaimComplete,
// ClaimAbort), and End, which an abort's claim precedes, tells from the
// object whether an upload it finds gone was completed.
package multipart

import (
	"errors"
	"fmt"
)

// Limits of S3's multipart uploads.
const (
	// MinPartSize is the smallest part but the last.
	MinPartSize = 5 << 20
	// MaxPartSize is the largest part.
	MaxPartSize = 5 << 30
	// MaxParts is the most parts one upload may have.
	MaxParts = 10000
	// MaxObjectSize is the largest object a multipart upload may make.
	MaxObjectSize = 5 << 40
)

// Layout is how an object of Size bytes is cut into parts: every part
// PartSize bytes but the last, which holds the rest.
type Layout struct {
	Size     int64
	PartSize int64
}

// ErrLayout marks a layout S3 would refuse.
var ErrLayout = errors.New("multipart: invalid layout")

// Check reports whether S3 accepts l.
func (l Layout) Check() error {
	switch {
	case l.Size < 1 || l.Size > MaxObjectSize:
		return fmt.Errorf("%w: size %d is not between 1 and %d", ErrLayout, l.Size, int64(MaxObjectSize))
	case l.PartSize < MinPartSize || l.PartSize > MaxPartSize:
		return fmt.Errorf("%w: part size %d is not between %d and %d", ErrLayout, l.PartSize, MinPartSize, int64(MaxPartSize))
	case l.Count() > MaxParts:
		return fmt.Errorf("%w: %d parts, at most %d", ErrLayout, l.Count(), MaxParts)
	}
	return nil
}

// Count is how many parts l has.
func (l Layout) Count() int {
	if l.PartSize <= 0 || l.Size <= 0 {
		return 0
	}
	return int((l.Size + l.PartSize - 1) / l.PartSize)
}

// PartLen is the exact length of part n (1 to Count), 0 for a number
// outside.
func (l Layout) PartLen(n int) int64 {
	c := l.Count()
	switch {
	case n < 1 || n > c:
		return 0
	case n < c:
		return l.PartSize
	}
	return l.Size - int64(c-1)*l.PartSize
}

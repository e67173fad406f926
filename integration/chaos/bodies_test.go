package chaos

import (
	"bytes"
	"image"
	"image/png"
)

// The bytes the load uploads. The completer's verification gate is on: an
// object declared image/png must start with a PNG the gate reads (mimetype
// by its signature, image.DecodeConfig by its IHDR), so every right upload
// is a tiny valid PNG (signature, IHDR of a 2×2 image, IDAT, IEND) padded
// to its declared size; a wrong one (one single PUT in wrongEvery, drawn
// from the seed) is HTML padded the same way, which the gate must reject
// as type_mismatch.
var (
	pngHead  = tinyPNG()
	htmlHead = []byte("<!doctype html><html><head><title>not a png</title></head><body>")
	// minBody is the least contentLength the load asks: both heads fit.
	minBody = int64(max(len(pngHead), len(htmlHead)))
)

// wrongEvery: one single PUT in wrongEvery uploads HTML where it declared
// image/png.
const wrongEvery = 8

// encodedEvery: one single PUT in encodedEvery adds an unsigned
// Content-Encoding (br or gzip) to its bytes, which the gate must reject
// encoding_not_allowed whatever they are.
const encodedEvery = 12

// reputEvery: one wrong upload in reputEvery is PUT again on its URL once
// it reads rejected (reputBody): one grant, one object.
const reputEvery = 2

// reputBody is a re-PUT's size bytes: HTML again, but padded otherwise
// than body's, so the check tells the quarantined first object from it.
func reputBody(size int64) []byte {
	b := body(size, true)
	for i := len(htmlHead); i < len(b); i++ {
		b[i] = 'y'
	}
	return b
}

// tinyPNG encodes a 2×2 grey image: a valid PNG of a few dozen bytes.
func tinyPNG() []byte {
	var b bytes.Buffer
	if err := png.Encode(&b, image.NewGray(image.Rect(0, 0, 2, 2))); err != nil {
		panic(err) // encoding to memory does not fail
	}
	return b.Bytes()
}

// body is an upload's size bytes: the PNG, or the HTML when wrong, then
// padding. size is at least minBody.
func body(size int64, wrong bool) []byte {
	head := pngHead
	if wrong {
		head = htmlHead
	}
	b := make([]byte, size)
	n := copy(b, head)
	for i := n; i < len(b); i++ {
		b[i] = 'x'
	}
	return b
}

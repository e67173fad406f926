package main

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"io"
	"strconv"
	"strings"
	"testing"

	"github.com/mintgate/mintgate/shared/quota"
)

// eicar is the EICAR anti-virus test string: harmless, and found by
// deploy/clamav/mintgate-test.ndb anywhere in a stream.
const eicar = `X5O!P%@AP[4\PZX54(P^)7CC)7}$EICAR-STANDARD-ANTIVIRUS-TEST-FILE!$H+H*`

// realPNG is a w×h PNG, encoded by image/png.
func realPNG(t testing.TB, w, h int) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	img.Set(0, 0, color.RGBA{R: 255, A: 255})
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// realJPEG is a w×h JPEG, encoded by image/jpeg.
func realJPEG(t testing.TB, w, h int) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := jpeg.Encode(&b, image.NewGray(image.Rect(0, 0, w, h)), nil); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// pngHeader is a PNG signature and a valid IHDR chunk claiming w×h, and
// nothing after: a header DecodeConfig reads, an image nobody can decode.
func pngHeader(w, h uint32) []byte {
	ihdr := make([]byte, 17)
	copy(ihdr, "IHDR")
	binary.BigEndian.PutUint32(ihdr[4:], w)
	binary.BigEndian.PutUint32(ihdr[8:], h)
	ihdr[12], ihdr[13] = 8, 6 // 8-bit RGBA
	out := []byte("\x89PNG\r\n\x1a\n")
	out = binary.BigEndian.AppendUint32(out, 13)
	out = append(out, ihdr...)
	return binary.BigEndian.AppendUint32(out, crc32.ChecksumIEEE(ihdr))
}

// webpLossless is a RIFF/WEBP file with a VP8L header claiming w×h.
func webpLossless(w, h uint32) []byte {
	bits := (w - 1) | (h-1)<<14
	vp8l := binary.LittleEndian.AppendUint32([]byte{0x2f}, bits)
	vp8l = append(vp8l, 0, 0, 0) // a few bytes of (meaningless) image data
	chunk := binary.LittleEndian.AppendUint32([]byte("VP8L"), uint32(len(vp8l)))
	chunk = append(chunk, vp8l...)
	out := binary.LittleEndian.AppendUint32([]byte("RIFF"), uint32(4+len(chunk)))
	return append(append(out, "WEBP"...), chunk...)
}

// pdfWith is a small PDF whose one stream holds body.
func pdfWith(body string) []byte {
	return []byte("%PDF-1.4\n1 0 obj\n<< /Length " + strconv.Itoa(len(body)) + " >>\nstream\n" + body +
		"\nendstream\nendobj\ntrailer\n<< /Root 1 0 R >>\n%%EOF\n")
}

// gateShape is a grant record naming contentType want.
func gateShape(want string) quota.GrantShape {
	return quota.GrantShape{ContentType: want, Known: true}
}

// TestTypeVerdict: the type and pixel checks on the bytes alone. An
// image/png grant holding HTML, a script, a PDF or an executable fails;
// each family's real file passes; an image header that cannot be read is
// a type mismatch; width × height above the limit is too large, read from
// the header of an image nobody could afford to decode.
func TestTypeVerdict(t *testing.T) {
	html := []byte("<!DOCTYPE html><html><body><script>alert(1)</script></body></html>")
	cases := []struct {
		name, want string
		body       []byte
		maxPixels  int64
		reason     string
	}{
		{"png", "image/png", realPNG(t, 4, 3), 100, ""},
		{"jpeg", "image/jpeg", realJPEG(t, 8, 8), 100, ""},
		{"webp", "image/webp", webpLossless(30, 20), 1000, ""},
		{"pdf", "application/pdf", pdfWith("hello"), 0, ""},
		{"png with parameters", "image/png; charset=binary", realPNG(t, 1, 1), 0, ""},
		{"html as png", "image/png", html, 0, reasonType},
		{"script as png", "image/png", []byte("#!/bin/sh\nrm -rf /\n"), 0, reasonType},
		{"pdf as png", "image/png", pdfWith("x"), 0, reasonType},
		{"exe as png", "image/png", append([]byte("MZ\x90\x00\x03\x00\x00\x00\x04\x00\x00\x00\xff\xff"), make([]byte, 64)...), 0, reasonType},
		{"elf as png", "image/png", append([]byte("\x7fELF\x02\x01\x01"), make([]byte, 64)...), 0, reasonType},
		{"jpeg as png", "image/png", realJPEG(t, 2, 2), 0, reasonType},
		{"png as jpeg", "image/jpeg", realPNG(t, 2, 2), 0, reasonType},
		{"html as pdf", "application/pdf", html, 0, reasonType},
		{"png as webp", "image/webp", realPNG(t, 2, 2), 0, reasonType},
		{"empty png", "image/png", nil, 0, reasonType},
		{"png signature, no header", "image/png", []byte("\x89PNG\r\n\x1a\n-journey"), 0, reasonType},
		{"png too large", "image/png", pngHeader(20000, 20000), 1_000_000, reasonPixels},
		{"png at the limit", "image/png", pngHeader(1000, 1000), 1_000_000, ""},
		{"png, no limit", "image/png", pngHeader(20000, 20000), 0, ""},
		{"webp too large", "image/webp", webpLossless(16000, 16000), 100_000_000, reasonPixels},
		{"jpeg too large", "image/jpeg", realJPEG(t, 64, 64), 4000, reasonPixels},
		{"unknown declared type", "application/x-mintgate", html, 0, ""},
		{"octet-stream takes anything", "application/octet-stream", html, 0, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			head := c.body[:min(len(c.body), 3072)]
			got := typeVerdict(declared(gateShape(c.want), ""), head, bytes.NewReader(c.body[len(head):]), c.maxPixels)
			if got != c.reason {
				t.Errorf("verdict %q, want %q", got, c.reason)
			}
		})
	}
}

// TestTypeVerdictReadsOnlyTheHeader: a 20000×20000 PNG's verdict comes from
// its first bytes; the rest of the object is never read.
func TestTypeVerdictReadsOnlyTheHeader(t *testing.T) {
	head := pngHeader(20000, 20000)
	rest := &countingReader{r: io.MultiReader(strings.NewReader("IDAT"), bytes.NewReader(make([]byte, 1<<20)))}
	if got := typeVerdict("image/png", head, rest, 1_000_000); got != reasonPixels {
		t.Fatalf("verdict %q", got)
	}
	if rest.n > 4096 {
		t.Errorf("read %d bytes past the header", rest.n)
	}
}

type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}
